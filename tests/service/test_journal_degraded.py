"""A journal that cannot commit (disk full, I/O error): the service degrades instead of
drifting from its store. Requests are refused with ServiceDegraded having changed nothing,
decisions wait unacted until they are written, an answered cancel survives a restart, and
the service recovers by itself once commits succeed again."""
import os
import sys
import time
from pathlib import Path

import pytest
from service_helpers import FailingCommits, wait_until

from hived.service.degraded import ServiceDegraded

PY = sys.executable
# runs until stopped, leaving its pid in the job's directory
LONG = [PY, "-c", "import os, time; open(os.path.join(os.environ['HIVED_JOB_DIR'], 'pid'), 'w')"
        ".write(str(os.getpid())); time.sleep(120)"]


def job(command=LONG, **kw):
    return {"vc": "vca", "command": command, "gpus": 1, "grace_period": 2, **kw}


def stored(svc, jid):
    rows = [r for r in svc.store.load_jobs() if r["job_id"] == jid]
    return rows[0]["state"] if rows else None


def placement_of(svc, jid):
    return next(r["placement"] for r in svc.store.load_jobs() if r["job_id"] == jid)


def pid_of(svc, jid):
    p = svc.data_dir / "jobs" / jid / "work" / "pid"
    return int(wait_until(lambda: p.exists() and p.read_text(), what=f"{jid} to start"))


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purpose; so is one reaped between the kill(0) and the read
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def tick_until(svc, pred, what, timeout=15.0):
    def go():
        svc.tick()
        return pred()
    return wait_until(go, timeout=timeout, what=what)


def test_submit_while_commits_fail_is_refused_and_changes_nothing(make_service):
    svc = make_service(start=False)
    disk = FailingCommits(svc.store).fail()
    with pytest.raises(ServiceDegraded) as err:
        svc.submit("alice", job())
    assert "the journal cannot be written (" in err.value.reason and "database or disk is full" in err.value.reason
    assert str(svc.data_dir) not in err.value.reason   # shown to every user: no paths
    assert svc.list_jobs() == [] and svc.store.count_jobs() == 0
    ready, why = svc.readiness()
    assert not ready and why == err.value.reason
    assert svc.status()["degraded"] == why
    # still failing: the next request is refused at once, the queue stays empty
    with pytest.raises(ServiceDegraded):
        svc.submit("alice", job())
    svc.tick()
    assert svc.readiness()[0] is False
    disk.heal()
    svc.tick()   # recovers by itself: a real write proves the journal takes writes again
    assert svc.readiness() == (True, "") and svc.status()["degraded"] is None
    j = svc.submit("alice", job(command="true"))
    assert [x["id"] for x in svc.list_jobs()] == [j["id"]] and stored(svc, j["id"]) == "queued"


def test_launch_decision_waits_for_its_commit(make_service):
    svc = make_service(start=False)
    j = svc.submit("alice", job())["id"]
    disk = FailingCommits(svc.store).fail()
    for _ in range(3):   # the engine places it, the write fails: nothing is launched
        svc.tick()
    assert disk.failed >= 3 and svc.readiness()[0] is False
    assert not (svc.data_dir / "jobs" / j).exists(), "launched before its placement was written"
    assert stored(svc, j) == "queued" and placement_of(svc, j) is None
    with pytest.raises(ServiceDegraded):
        svc.submit("alice", job())
    with pytest.raises(ServiceDegraded):
        svc.cancel(j, "alice")
    disk.heal()
    svc.tick()   # written, then launched
    assert svc.readiness() == (True, "")
    assert placement_of(svc, j) is not None
    pid = pid_of(svc, j)
    tick_until(svc, lambda: svc.get_job(j)["state"] == "running", "running")
    assert stored(svc, j) == "running" and alive(pid)
    svc.cancel(j, "alice")
    tick_until(svc, lambda: svc.get_job(j)["state"] == "cancelled", "cancelled")
    assert not alive(pid)


def test_cancel_while_commits_fail_is_refused_and_the_job_runs_on(make_service):
    svc = make_service(start=False)
    j = svc.submit("alice", job())["id"]
    tick_until(svc, lambda: svc.get_job(j)["state"] == "running", "running")
    pid = pid_of(svc, j)
    disk = FailingCommits(svc.store).fail()
    with pytest.raises(ServiceDegraded):
        svc.cancel(j, "alice")
    assert svc.get_job(j)["state"] == "running" and stored(svc, j) == "running"
    assert svc.store.intents() == []
    time.sleep(0.3)
    svc.tick()
    assert alive(pid) and svc.get_job(j)["state"] == "running"
    disk.heal()
    svc.cancel(j, "alice")   # the first request after the disk heals goes through
    tick_until(svc, lambda: svc.get_job(j)["state"] == "cancelled", "cancelled")
    assert stored(svc, j) == "cancelled" and not alive(pid) and svc.store.intents() == []


def test_answered_cancel_survives_a_restart_before_the_job_state_is_written(make_service, tmp_path):
    data = tmp_path / "data"
    svc = make_service(data_dir=data, start=False)
    j = svc.submit("alice", job())["id"]
    tick_until(svc, lambda: svc.get_job(j)["state"] == "running", "running")
    pid = pid_of(svc, j)
    disk = FailingCommits(svc.store).fail(after=1)   # the intent commits, the job's new state does not
    out = svc.cancel(j, "alice")
    assert out["state"] == "preempting"
    assert [i[:2] for i in svc.store.intents()] == [(j, "cancel")]
    assert stored(svc, j) == "running" and svc.readiness()[0] is False
    time.sleep(0.3)
    svc.tick()
    assert alive(pid), "killed before the cancel's state was written"
    svc.close()     # the service goes away while degraded (its job keeps running)
    assert alive(pid)

    again = make_service(data_dir=data, start=False)
    assert again.recovered["cancelled"] == [j]
    tick_until(again, lambda: again.get_job(j)["state"] == "cancelled", "cancelled after restart")
    got = again.get_job(j)
    assert got["attempts"] == 1 and not alive(pid)
    assert stored(again, j) == "cancelled" and again.store.intents() == []
    assert disk.failed >= 2   # the cancel's own write and the retry of the tick


def test_success_while_degraded_is_not_rerun_after_a_restart(make_service, tmp_path):
    data = tmp_path / "data"
    svc = make_service(data_dir=data, start=False)
    short = [PY, "-c", "import os, time; open(os.path.join(os.environ['HIVED_JOB_DIR'], 'pid'), 'w')"
             ".write(str(os.getpid())); time.sleep(0.5)"]
    j = svc.submit("alice", job(command=short))["id"]
    tick_until(svc, lambda: svc.get_job(j)["state"] == "running", "running")
    pid = pid_of(svc, j)
    disk = FailingCommits(svc.store).fail()
    wait_until(lambda: not alive(pid), what="the job to end")
    for _ in range(3):
        svc.tick()
    assert stored(svc, j) == "running" and disk.failed >= 3
    svc.close()
    again = make_service(data_dir=data, start=False)
    tick_until(again, lambda: again.get_job(j)["state"] == "succeeded", "success after restart")
    got = again.get_job(j)
    assert got["attempts"] == 1 and got["exit_code"] == 0 and stored(again, j) == "succeeded"
    assert not (data / "jobs" / j / "attempt-2").exists()


def test_progress_report_while_degraded_changes_nothing(make_service):
    svc = make_service(start=False)
    j = svc.submit("alice", job())["id"]
    tick_until(svc, lambda: svc.get_job(j)["state"] == "running", "running")
    svc.report_progress(j, 1, 10)
    disk = FailingCommits(svc.store).fail()
    with pytest.raises(ServiceDegraded):
        svc.report_progress(j, 5, 10)
    assert svc.get_job(j)["progress"] == svc.store.load_jobs()[0]["progress"]
    disk.heal()
    assert svc.report_progress(j, 5, 10)["progress"] == svc.store.load_jobs()[0]["progress"]
