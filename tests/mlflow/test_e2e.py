"""End to end: a real `hived serve`, a real sqlite tracking store, the example MLproject.

One run goes through the `mlflow run` CLI in a subprocess (its console script,
the entry point found through the installed metadata); the others through
mlflow.projects.run. test_cli_inproc.py runs the CLI's other paths in-process.
"""
import os
import statistics
import subprocess
import sys
import time

import mlflow
import pytest
from mlflow.exceptions import ExecutionException
from mlflow.tracking import MlflowClient

from hived.mlflow_plugin.config import HivedBackendError
from hived.mlflow_plugin.history import MlflowHistory, project_signature
from hived.service.client import HivedClient

from .conftest import PROJECT, VC, VC_GPUS

MLFLOW = os.path.join(os.path.dirname(sys.executable), "mlflow")
pytestmark = pytest.mark.timeout(150)


def _steps(client, run_id, key="loss"):
    return sorted(m.step for m in client.get_metric_history(run_id, key))


def _wait_for(pred, timeout=60, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_cli_blocks_streams_output_and_finishes(hived_server, tracking_uri, tmp_path):
    env = {**os.environ, "MLFLOW_TRACKING_URI": tracking_uri, "HIVED_URL": hived_server["url"],
           "HIVED_TOKEN": hived_server["token"], "HIVED_DATA_DIR": str(tmp_path)}
    proc = subprocess.run([MLFLOW, "run", str(PROJECT), "--backend", "hived", "--env-manager", "local",
                           "-P", "steps=5", "-P", "step_seconds=0", "--run-name", "cli-run",
                           "--backend-config", f'{{"vc": "{VC}", "gpus": 2}}'],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "done: w=" in proc.stdout            # the job's output, streamed while blocking
    assert "succeeded" in out
    client = MlflowClient(tracking_uri)
    (run,) = [r for r in client.search_runs([e.experiment_id for e in client.search_experiments()])
              if r.data.tags.get("mlflow.runName") == "cli-run"]
    assert run.info.status == "FINISHED"        # set by the backend: the CLI never waits for plugins
    assert run.data.params["steps"] == "5"
    assert _steps(client, run.info.run_id) == [0, 1, 2, 3, 4]
    tags = run.data.tags
    assert tags["mlflow.project.backend"] == "hived" and tags["hived.vc"] == VC
    assert tags["hived.gpus"] == "2" and tags["hived.nodes"] == "mlnode0"
    assert tags["hived.state"] == "succeeded" and tags["hived.preemptions"] == "0"
    assert tags["mlflow.project.entryPoint"] == "main" and tags["mlflow.source.type"] == "PROJECT"
    job = HivedClient(hived_server["url"], hived_server["token"]).job(tags["hived.job_id"])
    assert job["state"] == "succeeded" and job["job_class"] == "be"


def test_api_runs_land_on_their_own_runs(cfg, tracking_uri):
    runs = [mlflow.projects.run(str(PROJECT), parameters={"steps": n, "lr": lr, "step_seconds": 0},
                                backend="hived", backend_config=dict(cfg), env_manager="local",
                                synchronous=False)
            for n, lr in ((3, 0.05), (4, 0.2))]
    assert all(r.wait() for r in runs)
    client = MlflowClient(tracking_uri)
    for r, (n, lr) in zip(runs, ((3, 0.05), (4, 0.2))):
        run = client.get_run(r.run_id)
        assert run.info.status == "FINISHED"
        assert (run.data.params["steps"], run.data.params["lr"]) == (str(n), str(lr))
        assert _steps(client, r.run_id) == list(range(n))
        assert r.get_status() == "FINISHED"
    assert runs[0].job_id != runs[1].job_id


def test_synchronous_run_and_history_estimate(cfg, tracking_uri, capsys):
    # a history of its own (whatever other tests ran before): three finished runs of this project + entry point
    earlier = [mlflow.projects.run(str(PROJECT), parameters={"steps": 1, "step_seconds": 0}, backend="hived",
                                   backend_config=dict(cfg), env_manager="local", synchronous=False)
               for _ in range(3)]
    assert all(r.wait() for r in earlier)
    sig = project_signature("hived-demo-train", "main")
    past = MlflowHistory(tracking_uri, experiment_ids=["0"]).durations(sig, "gpu")
    assert len(past) >= 3
    sub = mlflow.projects.run(str(PROJECT), parameters={"steps": 2, "step_seconds": 0},
                              backend="hived", backend_config=dict(cfg), env_manager="local")
    run = MlflowClient(tracking_uri).get_run(sub.run_id)
    assert run.info.status == "FINISHED"
    assert "done: w=" in capsys.readouterr().out   # the job's output, as the local backend shows it
    # earlier finished runs of this project + entry point became the job's estimate
    assert run.data.tags["hived.estimate_seconds"] == f"{statistics.median(past):.3f}"
    assert run.data.tags["hived.signature"] == sig
    assert float(run.data.tags["hived.run_seconds"]) > 0


def test_failing_run_is_failed(cfg, tracking_uri):
    with pytest.raises(ExecutionException, match="failed"):
        mlflow.projects.run(str(PROJECT), parameters={"steps": 10, "fail_at": 2, "step_seconds": 0},
                            backend="hived", backend_config=dict(cfg), env_manager="local")
    client = MlflowClient(tracking_uri)
    exp = mlflow.get_experiment_by_name("Default").experiment_id
    run = client.search_runs([exp], order_by=["attributes.start_time DESC"], max_results=1)[0]
    assert run.info.status == "FAILED"
    assert run.data.tags["hived.state"] == "failed" and run.data.tags["hived.exit_code"] == "3"
    assert _steps(client, run.info.run_id) == [0, 1]


def test_cancel_kills_job_and_run(cfg, tracking_uri):
    sub = mlflow.projects.run(str(PROJECT), parameters={"steps": 1000, "step_seconds": 0.05},
                              backend="hived", backend_config=dict(cfg), env_manager="local",
                              synchronous=False)
    client = MlflowClient(tracking_uri)
    _wait_for(lambda: _steps(client, sub.run_id), what="first metric")
    assert sub.get_status() == "RUNNING"
    sub.cancel()
    assert sub.get_status() == "KILLED"
    assert client.get_run(sub.run_id).info.status == "KILLED"
    assert sub.job["state"] == "cancelled"
    assert len(_steps(client, sub.run_id)) < 1000


def test_preempted_run_resumes_under_same_run_id(cfg, hived_server, tracking_uri):
    steps = 30
    be = dict(cfg, gpus=VC_GPUS, grace_period=2, poll=0.2)
    sub = mlflow.projects.run(str(PROJECT), parameters={"steps": steps, "step_seconds": 0.1},
                              backend="hived", backend_config=be, env_manager="local",
                              synchronous=False)
    client = MlflowClient(tracking_uri)
    _wait_for(lambda: len(_steps(client, sub.run_id)) >= 5, what="5 steps before preemption")
    hived = HivedClient(hived_server["url"], hived_server["token"])
    te = hived.submit({"vc": VC, "command": "sleep 1", "job_class": "te", "gpus": VC_GPUS,
                       "name": "notebook-te"})
    # the TE job takes the VC's GPUs; the BE run waits, still RUNNING in MLflow
    _wait_for(lambda: sub.refresh().get("preemptions", 0) >= 1, what="preemption of the BE job")
    run = client.get_run(sub.run_id)
    assert run.info.status == "RUNNING"
    assert run.data.tags["hived.preempted"] == "true"
    assert "preempted (1)" in run.data.tags["mlflow.note.content"]
    assert sub.wait(timeout=120)
    assert hived.job(te["id"])["state"] == "succeeded"
    run = client.get_run(sub.run_id)
    assert run.info.status == "FINISHED"
    assert int(run.data.tags["hived.preemptions"]) >= 1
    assert int(run.data.tags["resumed_from_step"]) >= 5   # the second attempt read the checkpoint
    # both attempts ran under the same run id; the second with HIVED_RESUMED=1 and the same dir
    ckpt = run.data.tags["hived.checkpoint_dir"]
    assert ckpt.startswith(cfg["checkpoint_dir"]) and ckpt.endswith(sub.run_id)
    assert os.path.exists(os.path.join(ckpt, "train_state.json"))
    with open(os.path.join(ckpt, ".hived_attempts")) as fh:
        assert len(fh.read().split()) == int(run.data.tags["hived.attempts"]) >= 2
    log = hived.logs(sub.job_id)["text"]
    assert "start at step 0 (resumed=0)" in log and "(resumed=1)" in log, log
    assert [e.step for e in client.get_metric_history(sub.run_id, "hived.preemptions")] \
        == list(range(1, int(run.data.tags["hived.preemptions"]) + 1))   # the preemption events
    # metrics continue on the same run: every step once or (killed between log and save) twice
    assert sorted(set(_steps(client, sub.run_id))) == list(range(steps))
    assert len(_steps(client, sub.run_id)) <= steps + 1


def test_unknown_vc_refused_in_one_line(cfg, tracking_uri):
    client = MlflowClient(tracking_uri)
    before = len(client.search_runs([e.experiment_id for e in client.search_experiments()]))
    with pytest.raises(HivedBackendError) as info:
        mlflow.projects.run(str(PROJECT), backend="hived", env_manager="local",
                            backend_config=dict(cfg, vc="nope"))
    assert "nope" in str(info.value) and "\n" not in str(info.value)
    assert len(client.search_runs([e.experiment_id for e in client.search_experiments()])) == before
