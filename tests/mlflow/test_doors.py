"""The MLflow door says what happens: queued runs, late followers, relative stores, the devserver."""
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import mlflow
import pytest
from mlflow.tracking import MlflowClient

from hived.mlflow_plugin.submitted_run import HivedSubmittedRun
from hived.service.client import HivedClient

from .conftest import PROJECT, VC, VC_GPUS

pytestmark = pytest.mark.timeout(150)


def test_a_queued_run_is_scheduled_and_says_why(cfg, hived_server, tracking_uri, capsys):
    hived = HivedClient(hived_server["url"], hived_server["token"])
    blocker = hived.submit({"vc": VC, "command": "sleep 60", "job_class": "te", "gpus": VC_GPUS,
                            "name": "blocker"})
    deadline = time.monotonic() + 30
    while hived.job(blocker["id"])["state"] != "running":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    seen = {}

    def look_then_unblock():
        client = MlflowClient(tracking_uri)
        time.sleep(3)
        runs = client.search_runs(["0"], filter_string="tags.`hived.job_id` != ''",
                                  order_by=["attributes.start_time DESC"], max_results=1)
        seen["status"] = runs[0].info.status if runs else None
        hived.cancel(blocker["id"])

    t = threading.Thread(target=look_then_unblock)
    t.start()
    sub = mlflow.projects.run(str(PROJECT), entry_point="trivial", backend="hived", env_manager="local",
                              backend_config=dict(cfg, poll=0.2), synchronous=True)
    t.join()
    assert seen["status"] == "SCHEDULED"                  # queued behind the blocker: not RUNNING
    out = capsys.readouterr().out
    assert f"[hived] job {sub.job_id} queued, position 0 in VC {VC}'s queue" in out
    assert MlflowClient(tracking_uri).get_run(sub.run_id).info.status == "FINISHED"


def test_a_late_follower_stamps_preemptions_when_they_happened(tracking_uri):
    client = MlflowClient(tracking_uri)
    run_id = client.create_run(client.create_experiment("late")).info.run_id
    sub = HivedSubmittedRun(run_id, "j1", client=None, tracking_uri=tracking_uri)
    t1, t2 = 1_700_000_000.0, 1_700_000_100.0
    history = [{"time": t1 - 10, "state": "running", "reason": "started"},
               {"time": t1, "state": "preempting", "reason": "for TE job j2: ..."},
               {"time": t1 + 5, "state": "queued", "reason": "preempted"},
               {"time": t2 - 10, "state": "running", "reason": "started"},
               {"time": t2, "state": "preempting", "reason": "for TE job j3: ..."},
               {"time": t2 + 5, "state": "queued", "reason": "preempted"}]
    sub._sync({"id": "j1", "state": "queued", "preemptions": 2, "attempts": 2, "placement": None,
               "history": history})
    events = client.get_metric_history(run_id, "hived.preemptions")
    assert [(e.step, e.timestamp) for e in events] == [(1, int(t1 * 1000)), (2, int(t2 * 1000))]
    note = client.get_run(run_id).data.tags["mlflow.note.content"]
    assert "preempted (1) at 2023-11-14 22:13:20 UTC;" in note
    assert "preempted (2) at 2023-11-14 22:15:00 UTC;" in note
    assert " on ?" not in note                     # never saw where it ran: no made-up node


def test_relative_sqlite_uri_is_resolved(cfg, tmp_path, monkeypatch, _migrated_store, tracking_uri):
    shutil.copyfile(_migrated_store, tmp_path / "mlflow.db")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///mlflow.db")
    mlflow.set_tracking_uri("sqlite:///mlflow.db")
    try:
        sub = mlflow.projects.run(str(PROJECT), parameters={"steps": 3, "step_seconds": 0}, backend="hived",
                                  env_manager="local", backend_config=cfg, synchronous=True)
        run = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_run(sub.run_id)
        assert run.info.status == "FINISHED"
        assert sorted(m.step for m in MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
                      .get_metric_history(sub.run_id, "loss")) == [0, 1, 2]
        assert not (PROJECT / "mlflow.db").exists()      # the job did not open a store of its own
    finally:
        mlflow.set_tracking_uri(tracking_uri)


def test_run_id_of_an_old_run_says_it_resumes_its_checkpoint(cfg, tracking_uri):
    said = []

    class Keep(logging.Handler):
        def emit(self, record):
            said.append(record.getMessage())

    log = logging.getLogger("mlflow.projects.hived")
    handler = Keep()
    log.addHandler(handler)
    try:
        first = mlflow.projects.run(str(PROJECT), entry_point="trivial", backend="hived", env_manager="local",
                                    backend_config=cfg, synchronous=True)
        assert not any("continuing from its checkpoint" in m for m in said)
        mlflow.projects.run(str(PROJECT), entry_point="trivial", backend="hived", env_manager="local",
                            backend_config={**cfg, "_mlflow_local_backend_run_id": first.run_id},
                            synchronous=True)
    finally:
        log.removeHandler(handler)
    assert any(f"--run-id {first.run_id}: continuing from its checkpoint directory" in m
               and "1 earlier attempt" in m for m in said), said


def test_devserver_stops_its_hived_serve_on_sigterm(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "hived.testing.mlflow_server", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    child = None
    try:
        line = proc.stdout.readline()
        assert line.startswith("export HIVED_URL="), line + proc.stderr.read()
        # the export line comes before the log line: wait for both, then signal
        assert "SIGTERM" in proc.stderr.readline()
        child = json.loads((tmp_path / "hived-data" / "server.json").read_text())["pid"]
        os.kill(child, 0)                               # the child server runs
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        deadline = time.monotonic() + 20
        while True:
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                break                                   # gone with its parent
            assert time.monotonic() < deadline, "hived serve outlived the devserver"
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            proc.kill()
        if child is not None:
            try:
                os.killpg(child, signal.SIGKILL)   # never leave a server behind, even on failure
            except ProcessLookupError:
                pass


CATCHES_SIGTERM = '''
import os, signal, sys, time
import mlflow
run = mlflow.start_run()
if os.environ.get("HIVED_RESUMED") == "1":
    mlflow.log_metric("resumed", 1)
    mlflow.end_run()
    sys.exit(0)
def stop(*_):
    mlflow.end_run(status="FAILED")     # the user's code closes its run on SIGTERM
    os._exit(143)
signal.signal(signal.SIGTERM, stop)
mlflow.log_metric("started", 1)
while True:
    time.sleep(0.1)
'''


def test_a_detached_run_that_ends_itself_on_sigterm_waits_running(cfg, hived_server, tracking_uri, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "MLproject").write_text("name: catches\nentry_points:\n  main:\n    command: python job.py\n")
    (project / "job.py").write_text(CATCHES_SIGTERM)
    client = MlflowClient(tracking_uri)
    sub = mlflow.projects.run(str(project), backend="hived", env_manager="local", synchronous=False,
                              backend_config=dict(cfg, gpus=VC_GPUS, grace_period=5, detach=True, poll=0.2))
    run_id = sub.run_id
    hived = HivedClient(hived_server["url"], hived_server["token"])
    deadline = time.monotonic() + 60
    while not client.get_metric_history(run_id, "started"):
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.2)
    te = hived.submit({"vc": VC, "command": "sleep 6", "job_class": "te", "gpus": VC_GPUS, "name": "te"})
    # nobody calls wait(): the background follower keeps the run in step
    while client.get_run(run_id).data.tags.get("hived.preemptions") != "1":
        assert time.monotonic() < deadline + 30, "the preemption was never noted"
        time.sleep(0.2)
    time.sleep(1.0)
    assert hived.job(te["id"])["state"] in ("placed", "running")     # the BE job still waits
    assert client.get_run(run_id).info.status == "RUNNING"           # not the FAILED its code set
    while client.get_run(run_id).info.status != "FINISHED":
        assert time.monotonic() < deadline + 90, client.get_run(run_id).info.status
        time.sleep(0.5)
    assert client.get_metric_history(run_id, "resumed")
