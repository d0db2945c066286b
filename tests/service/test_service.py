"""SchedulerService through its Python API: jobs run, TE preempts BE, bad
input changes nothing, authorization, restart adopts and keeps the queue."""
import json
import os
import signal
import sys
import time

import pytest
from service_helpers import dead_or_zombie, foreign_database, wait_until

from hived.core.engine import RequestError
from hived.service.scheduler import DataDirBusy, NotAuthorized, NotFound

PY = sys.executable
# a BE program that checkpoints its step on SIGTERM and resumes from it
RESUMABLE = (
    "import json, os, signal, sys, time\n"
    "ck = os.path.join(os.environ['HIVED_JOB_DIR'], 'ck.json')\n"
    "step = json.load(open(ck))['step'] if os.path.exists(ck) else 0\n"
    "print('resumed at', step, flush=True)\n"
    "def stop(*_):\n"
    "    json.dump({'step': step}, open(ck, 'w')); print('checkpointed', step, flush=True); sys.exit(143)\n"
    "signal.signal(signal.SIGTERM, stop)\n"
    "while step < STEPS:\n"
    "    time.sleep(0.05); step += 1\n"
    "print('done', step)\n")




def stored_count(svc):
    return svc.store.count_jobs()


def test_job_runs_with_its_gpus_and_log(make_service, tmp_path):
    svc = make_service()
    wd = tmp_path / "wd"
    wd.mkdir()
    job = svc.submit("alice", {"vc": "vca", "command": [PY, "-c",
                     "import os; print('gpus', os.environ['CUDA_VISIBLE_DEVICES'], os.environ['HIVED_VC'])"],
                     "gpus": 2, "job_class": "be", "name": "hello", "workdir": str(wd)})
    assert job["state"] == "queued" and job["user"] == "alice" and job["name"] == "hello"
    json.dumps(job)
    done = wait_until(lambda: svc.get_job(job["id"])["state"] == "succeeded" and svc.get_job(job["id"]),
                      what="job success")
    assert done["exit_code"] == 0 and done["attempts"] == 1 and done["failure_class"] == "success"
    assert [h["state"] for h in done["history"]] == ["queued", "placed", "running", "succeeded"]
    text, off = svc.logs(job["id"])
    assert "gpus " in text and " vca" in text and off > 0
    stored = {d["job_id"]: d for d in svc.store.load_jobs()}[job["id"]]
    assert [h[1] for h in stored["history"]] == ["queued", "placed", "running", "succeeded"]
    assert svc.list_jobs(vc="vca", state="succeeded")[0]["id"] == job["id"]
    assert svc.list_jobs(user="bob") == []
    json.dumps(svc.cluster()), json.dumps(svc.vcs()), json.dumps(svc.status())


BAD = [
    ({"vc": "nope", "command": "true"}, NotFound, "vc: unknown VC 'nope'; your VCs: vca"),
    ({"vc": "vca", "command": "true", "gpus": 9}, RequestError, "gpus"),
    ({"vc": "vca", "command": "true", "pods": 3, "gpus": 4}, RequestError, "never fits VC 'vca'"),
    ({"vc": "vca", "command": "true", "gpus": -1}, RequestError, "gpus: must be between 1 and"),
    ({"vc": "vca", "command": "true", "gpus": 10 ** 12}, RequestError, "gpus: must be between 1 and"),
    ({"vc": "vca", "command": "true", "gpus": "two"}, RequestError, "gpus: must be an integer"),
    ({"vc": "vca", "command": "true", "pods": 0}, RequestError, "pods: must be between 1 and 1024"),
    ({"vc": "vca", "command": "true", "grace_period": -5}, RequestError, "grace_period: must be between"),
    ({"vc": "vca", "command": "true", "grace_period": 1e12}, RequestError, "grace_period: must be between 0 and 86400"),
    ({"vc": "vca", "command": "true", "grace_period": float("nan")}, RequestError, "grace_period: must be a finite"),
    ({"vc": "vca", "command": ""}, RequestError, "command: must not be empty"),
    ({"vc": "vca", "command": "   "}, RequestError, "command: must not be empty"),
    ({"vc": "vca", "command": []}, RequestError, "command: must be a non-empty list"),
    ({"vc": "vca"}, RequestError, "command: required"),
    ({"vc": "vca", "command": "true", "workdir": "/no/such/dir"}, RequestError,
     "workdir: /no/such/dir is not a folder"),
    ({"vc": "vca", "command": "true", "job_class": "urgent"}, RequestError,
     "job_class: must be te, be or opportunistic"),
    ({"vc": "vca", "command": "true", "colour": "red"}, RequestError, "colour: unknown field"),
    ({"vc": "vca", "command": "true", "env": {"CUDA_VISIBLE_DEVICES": "0"}}, RequestError, "env.CUDA_VISIBLE_DEVICES"),
    ({"vc": "vca", "command": "true", "cell_type": "T-NODE.NOPE"}, RequestError, "cell_type"),
    ("not a dict", RequestError, "body: must be a JSON object"),
]


@pytest.mark.parametrize("payload,exc,words", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_input_is_refused_and_nothing_is_stored(make_service, payload, exc, words):
    svc = make_service(start=False)
    before = stored_count(svc)
    with pytest.raises(exc) as info:
        svc.submit("alice", payload)
    assert words in str(info.value)
    assert stored_count(svc) == before and svc.list_jobs() == []


def test_authorization(make_service):
    svc = make_service()
    with pytest.raises(NotAuthorized, match="'bob' is not a member of VC 'vca'") as info:
        svc.submit("bob", {"vc": "vca", "command": "true"})
    assert isinstance(info.value, PermissionError) and stored_count(svc) == 0
    job = svc.submit("alice", {"vc": "vca", "command": "sleep 30", "job_class": "be"})
    with pytest.raises(NotAuthorized, match="may not cancel"):
        svc.cancel(job["id"], "anna")            # same VC, not the owner, not an admin
    assert svc.get_job(job["id"])["state"] != "cancelled"
    wait_until(lambda: svc.get_job(job["id"])["state"] == "running", what="running")
    out = svc.cancel(job["id"], "ada")           # the VC's admin may
    assert out["state"] in ("preempting", "cancelled")
    wait_until(lambda: svc.get_job(job["id"])["state"] == "cancelled", what="cancelled")
    with pytest.raises(RequestError, match="already cancelled"):
        svc.cancel(job["id"], "alice")
    with pytest.raises(NotFound, match="unknown job"):
        svc.get_job("j999")
    with pytest.raises(NotFound):
        svc.vc("nope")
    with pytest.raises(RequestError, match="unknown state"):
        svc.list_jobs(state="sleeping")
    with pytest.raises(RequestError, match="rank: must be an integer from 0 to 0"):
        svc.logs(job["id"], rank=3)


def test_te_preempts_be_which_resumes(make_service):
    svc = make_service()
    prog = RESUMABLE.replace("STEPS", "40")
    bes = [svc.submit("alice", {"vc": "vca", "command": [PY, "-c", prog], "gpus": 4, "job_class": "be",
                                "grace_period": 5, "name": f"be{i}"})["id"] for i in range(2)]
    wait_until(lambda: all(svc.get_job(b)["state"] == "running" for b in bes), what="BE running")
    wait_until(lambda: all("\nresumed at 0" in svc.logs(b)[0] for b in bes), what="BE output")
    time.sleep(0.3)
    te = svc.submit("anna", {"vc": "vca", "command": "sleep 0.5", "gpus": 4, "job_class": "te"})["id"]
    wait_until(lambda: svc.get_job(te)["state"] in ("running", "succeeded"), what="TE running")
    victim = [b for b in bes if svc.get_job(b)["preemptions"] == 1]
    assert len(victim) == 1
    v = victim[0]
    assert "checkpointed" in svc.logs(v)[0]
    stored = {d["job_id"]: d for d in svc.store.load_jobs()}[v]
    assert stored["preemptions"] == 1 and "preempting" in [h[1] for h in stored["history"]]
    wait_until(lambda: svc.get_job(v)["state"] == "succeeded", timeout=30, what="victim resumed and done")
    text = svc.logs(v)[0]
    resumed = [line for line in text.splitlines() if line.startswith("resumed at")]
    assert resumed[0] == "resumed at 0" and len(resumed) == 2 and int(resumed[1].split()[-1]) > 0
    assert svc.get_job(v)["attempts"] == 2 and svc.get_job(te)["state"] == "succeeded"


def test_restart_adopts_running_marks_lost_and_keeps_queue_order(make_service, tmp_path):
    data = tmp_path / "d"
    svc = make_service(data)
    run = svc.submit("alice", {"vc": "vca", "command": "echo up; sleep 30", "gpus": 4, "job_class": "be"})["id"]
    gone = svc.submit("alice", {"vc": "vca", "command": "echo up; sleep 30", "gpus": 4, "job_class": "be"})["id"]
    queued = [svc.submit("alice", {"vc": "vca", "command": "true", "gpus": 4, "job_class": "be"})["id"]
              for _ in range(3)]
    wait_until(lambda: all(svc.get_job(j)["state"] == "running" for j in (run, gone)), what="running")
    wait_until(lambda: all("\nup\n" in svc.logs(j)[0] for j in (run, gone)), what="processes up")
    placement = {j: svc.get_job(j)["placement"] for j in (run, gone)}
    order = svc.vc("vca")["queue"]
    assert order == queued
    # the service dies without stopping anything; one job's processes die meanwhile
    svc._stop.set()
    svc._thread.join()
    svc.store.close()
    svc._lockfile.close()
    pod = json.loads((data / "jobs" / gone / "attempt-1" / "rank-0.pod.json").read_text())
    os.killpg(pod["pid"], signal.SIGKILL)
    wait_until(lambda: dead_or_zombie(pod["pid"]), what="dead")

    again = make_service(data, start=False)
    assert again.recovered["adopted"] == [run] and again.recovered["lost"] == [gone]
    assert again.get_job(run)["placement"] == placement[run] and again.get_job(run)["state"] == "running"
    lost = again.get_job(gone)
    assert lost["failure_class"] == "lost" and lost["state"] in ("queued", "failed")
    assert again.vc("vca")["queue"][:3] == queued   # the lost job, retried, queues behind them
    again.start()
    again.cancel(run, "alice")
    wait_until(lambda: again.get_job(run)["state"] == "cancelled", what="adopted job cancelled")


def test_one_service_per_data_dir(make_service, tmp_path):
    make_service(tmp_path / "same", start=False)
    with pytest.raises(DataDirBusy, match="another hived service"):
        make_service(tmp_path / "same", start=False)


def test_reload_spec_refuses_what_does_not_fit(make_service, tmp_path):
    svc = make_service()
    job = svc.submit("alice", {"vc": "vca", "command": "sleep 30", "gpus": 4, "job_class": "be"})["id"]
    wait_until(lambda: svc.get_job(job)["state"] == "running", what="running")
    from pathlib import Path
    text = Path(__file__).with_name("spec_small.yaml").read_text()
    without_vca = text.replace("  vca:\n", "  vcx:\n")
    with pytest.raises(RequestError, match="does not fit the new spec"):
        svc.reload_spec(without_vca)
    assert svc.get_job(job)["state"] == "running" and "vca" in svc.vcs()["vcs"]
    out = svc.reload_spec(text.replace("users: [bob]", "users: [bob, bea]"))
    assert out["ok"] and svc.get_job(job)["state"] == "running"
    svc.submit("bea", {"vc": "vcb", "command": "true"})


def test_queue_positions_and_preempted_head_survive_restart(make_service, tmp_path):
    data = tmp_path / "q"
    svc = make_service(data)
    prog = RESUMABLE.replace("STEPS", "400")
    bes = [svc.submit("alice", {"vc": "vca", "command": [PY, "-c", prog], "gpus": 4, "job_class": "be",
                                "grace_period": 5})["id"] for _ in range(2)]
    wait_until(lambda: all(svc.get_job(b)["state"] == "running" for b in bes), what="BE running")
    waiting = []
    for i in range(3):
        j = svc.submit("alice", {"vc": "vca", "command": "true", "gpus": 4, "job_class": "be"})
        assert j["queue_position"] == i and svc.get_job(j["id"])["queue_position"] == i
        waiting.append(j["id"])
    te = svc.submit("anna", {"vc": "vca", "command": "sleep 30", "gpus": 4, "job_class": "te"})["id"]
    wait_until(lambda: svc.get_job(te)["state"] == "running", what="TE running")
    victim = next(b for b in bes if svc.get_job(b)["preemptions"])
    before = svc.vc("vca")["queue"]
    assert before[0] == victim and before[1:] == waiting      # preempted BE at the head
    svc.stop()
    svc.close()
    again = make_service(data, start=False)
    assert again.vc("vca")["queue"] == before
    assert [again.get_job(j)["queue_position"] for j in before] == [0, 1, 2, 3]
    assert again.get_job(te)["state"] == "running" and te in again.recovered["adopted"]


def test_log_rotation_limits_from_the_environment(make_service, monkeypatch, tmp_path):
    monkeypatch.setenv("HIVED_LOG_MAX_BYTES", "2048")
    monkeypatch.setenv("HIVED_LOG_KEEP", "2")
    svc = make_service()
    job = svc.submit("alice", {"vc": "vca", "job_class": "be", "command": [
        PY, "-c", "for i in range(2000): print(f'line {i:05d}')"]})["id"]
    wait_until(lambda: svc.get_job(job)["state"] == "succeeded", what="success")
    segs = sorted((tmp_path / "data" / "jobs" / job / "logs" / "rank-0").glob("*.log"))
    assert len(segs) == 2 and all(p.stat().st_size <= 2048 for p in segs)
    text, end = svc.logs(job, offset=0)          # older text is gone: reading starts at the oldest kept byte
    assert end > 20000 and "line 01999" in text and "line 00000" not in text
    assert "exited with code 0" in text


@pytest.mark.parametrize("name,value,words", [
    ("HIVED_LOG_MAX_BYTES", "ten", "$HIVED_LOG_MAX_BYTES: must be an integer, got 'ten'"),
    ("HIVED_LOG_MAX_BYTES", "10", "$HIVED_LOG_MAX_BYTES: must be at least 1024, got 10"),
    ("HIVED_LOG_KEEP", "0", "$HIVED_LOG_KEEP: must be at least 1, got 0"),
])
def test_bad_log_settings_are_refused(make_service, monkeypatch, name, value, words):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError) as info:
        make_service(start=False)
    assert str(info.value) == words


def test_refused_store_leaves_the_data_dir_free(make_service, tmp_path):
    from hived.service.store import StoreError
    d = foreign_database(tmp_path / "foreign")
    for _ in range(2):     # refused twice the same way: the first attempt left no lock behind
        with pytest.raises(StoreError, match="foreign SQLite database"):
            make_service(d, start=False)


def test_k8s_template_is_refused_by_the_local_launcher(make_service):
    svc = make_service()
    with pytest.raises(RequestError) as e:
        svc.submit("alice", {"vc": "vca", "command": "true", "k8s_template": {"image": "x"}})
    assert e.value.field == "k8s_template" and "Kubernetes only" in e.value.problem
    with pytest.raises(RequestError) as e:
        svc.submit("alice", {"vc": "vca", "command": "true", "k8s_template": ["image", "x"]})
    assert e.value.field == "k8s_template" and "must be an object" in e.value.problem
    assert svc.list_jobs() == [] and stored_count(svc) == 0
