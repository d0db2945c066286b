"""The event-driven loop: what wakes a round, what runs outside the lock, how it shuts down.

Every service here has a timer of 60 s, so anything that happens within a few
seconds happened because an event woke the loop, not because the timer fired.
Real SQLite journal, real processes through the LocalLauncher.
"""
import os
import sys
import threading
import time
from pathlib import Path

from service_helpers import wait_until

from hived.service.local_launcher import LocalLauncher

TIMER = 3600.0   # the loop's timer: every wait below gives up long before it could fire
PY = sys.executable


def touch_cmd(path, then="true"):
    """A command that creates ``path`` as its first act, then runs ``then``."""
    return f"touch {path}; {then}"


def fill_vca(svc, until):
    """Two BE jobs holding all 8 GPUs of vca until the file ``until`` exists; returns their ids."""
    cmd = f"while [ ! -e {until} ]; do sleep 0.02; done"
    return [svc.submit("alice", {"vc": "vca", "command": cmd, "gpus": 4, "job_class": "be"})["id"]
            for _ in range(2)]


def all_in(svc, ids, want):
    return all(state(svc, j) == want for j in ids)


def state(svc, jid):
    return svc.get_job(jid)["state"]


def test_a_submitted_job_starts_without_waiting_for_the_timer(make_service, tmp_path):
    svc = make_service(tick_seconds=TIMER)
    time.sleep(0.2)                      # the loop's first round is done; it now sleeps on the timer
    mark = tmp_path / "started"
    jid = svc.submit("alice", {"vc": "vca", "command": touch_cmd(mark), "gpus": 1})["id"]
    wait_until(mark.exists, timeout=10, what="the job's process to start")
    wait_until(lambda: state(svc, jid) == "succeeded", timeout=10, what="its exit to be recorded")


def test_an_exit_wakes_a_round_that_starts_the_next_queued_job(make_service, tmp_path):
    svc = make_service(tick_seconds=TIMER)
    release, mark = tmp_path / "release", tmp_path / "next-started"
    big = fill_vca(svc, release)
    wait_until(lambda: all_in(svc, big, "running"), timeout=10, what="the jobs holding vca to run")
    nxt = svc.submit("alice", {"vc": "vca", "command": touch_cmd(mark), "gpus": 4, "job_class": "be"})["id"]
    time.sleep(0.3)
    assert state(svc, nxt) == "queued" and not mark.exists()
    release.touch()                      # they exit by themselves: only their exits can wake the loop
    wait_until(mark.exists, timeout=10, what="the queued job to start after the exit")
    assert all_in(svc, big, "succeeded")


def test_submits_that_arrive_during_a_round_share_the_next_round(make_service, tmp_path):
    svc = make_service(tick_seconds=TIMER)
    release = tmp_path / "release"
    big = fill_vca(svc, release)
    wait_until(lambda: all_in(svc, big, "running"), timeout=10, what="the jobs holding vca to run")
    time.sleep(0.3)
    before = svc.ticks
    # while the lock is held (a round in progress), 30 submits arrive (re-entrant: this thread)
    with svc._lock:
        ids = [svc.submit("alice", {"vc": "vca", "command": "true", "gpus": 4, "job_class": "be"})["id"]
               for _ in range(30)]
    time.sleep(0.5)
    rounds = svc.ticks - before
    assert 1 <= rounds <= 3, f"{rounds} rounds for a burst of 30 submits"
    assert {state(svc, j) for j in ids} == {"queued"}
    release.touch()


class GatedLauncher(LocalLauncher):
    """A LocalLauncher whose launch, terminate and poll can be made to block until released;
    each call records whether its thread held the service's lock."""

    def __init__(self, root):
        super().__init__(root)
        self.svc = None
        self.gates = {"launch": threading.Event(), "terminate": threading.Event(), "poll": threading.Event()}
        for g in self.gates.values():
            g.set()
        self.entered = {k: threading.Event() for k in self.gates}
        self.under_lock = []

    def _enter(self, what):
        if self.svc is not None and self.svc._lock._is_owned():
            self.under_lock.append(what)
        self.entered[what].set()
        assert self.gates[what].wait(30), f"{what} was never released"

    def launch(self, *a, **kw):
        self._enter("launch")
        return super().launch(*a, **kw)

    def terminate(self, *a, **kw):
        self._enter("terminate")
        return super().terminate(*a, **kw)

    def poll(self):
        self._enter("poll")
        return super().poll()


def finishes(fn, timeout=5.0):
    """Run ``fn`` in a thread; its result if it returned within ``timeout`` s, else fail."""
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("v", fn()), daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"{fn} did not finish in {timeout}s: it waits for the launcher"
    return out["v"]


def test_requests_are_answered_while_the_launcher_blocks(make_service, tmp_path):
    launcher = GatedLauncher(tmp_path / "data" / "jobs")
    svc = make_service(launcher=launcher, tick_seconds=TIMER)
    launcher.svc = svc
    for what in ("launch", "terminate", "poll"):
        gate = launcher.gates[what]
        gate.clear()
        launcher.entered[what].clear()
        if what == "launch":
            first = svc.submit("alice", {"vc": "vca", "command": "sleep 30", "gpus": 1})["id"]
        elif what == "terminate":
            svc.cancel(first, "alice")
        else:
            launcher.entered["poll"].clear()
            svc.submit("bob", {"vc": "vcb", "command": "true", "gpus": 1})
        assert launcher.entered[what].wait(10), f"{what} was never called"
        # the launcher is stuck in {what}: reads and a new submission still go through
        assert finishes(lambda j=first: svc.get_job(j))["id"] == first
        assert finishes(lambda: svc.list_jobs(vc="vca"))
        other = finishes(lambda: svc.submit("anna", {"vc": "vca", "command": "true", "gpus": 1}))
        assert other["state"] in ("queued", "placed")
        assert finishes(lambda: svc.metrics.text()).startswith(b"#")
        gate.set()
        if what == "launch":
            wait_until(lambda j=first: state(svc, j) == "running", timeout=10, what="the blocked launch to finish")
    wait_until(lambda: state(svc, first) == "cancelled", timeout=15, what="the cancel to be carried out")
    assert launcher.under_lock == []


def test_stop_carries_out_what_was_queued_and_joins_its_threads(make_service, tmp_path):
    svc = make_service(tick_seconds=TIMER)
    jid = svc.submit("alice", {"vc": "vca", "command": "sleep 30", "gpus": 1})["id"]
    wait_until(lambda: state(svc, jid) == "running", timeout=10, what="the job to run")
    pid = svc.launcher._jobs[jid].pods[0].pid
    threads = [svc._thread, svc._launchq._thread]        # this service's loop and launcher worker
    assert [t.name for t in threads] == ["hived-scheduler", "hived-launcher"]
    svc.stop(cancel_jobs=True, timeout=10)
    assert state(svc, jid) == "cancelled"
    assert not any(t.is_alive() for t in threads)
    assert not os.path.exists(f"/proc/{pid}") or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    svc.start()                          # a stopped service starts again, threads and all
    again = svc.submit("alice", {"vc": "vca", "command": "true", "gpus": 1})["id"]
    wait_until(lambda: state(svc, again) == "succeeded", timeout=10, what="a job after the restart of the loop")


def test_a_launch_that_fails_comes_back_as_a_failed_run(make_service, tmp_path):
    class Refusing(LocalLauncher):
        def launch(self, *a, **kw):
            raise OSError("no such runner")

    svc = make_service(launcher=Refusing(tmp_path / "data" / "jobs"), tick_seconds=TIMER)
    jid = svc.submit("alice", {"vc": "vca", "command": "true", "gpus": 1, "max_retries": 0})["id"]
    job = wait_until(lambda: (j := svc.get_job(jid))["state"] in ("failed",) and j, timeout=10,
                     what="the failed launch to be recorded")
    assert job["exit_code"] == 127 and "launch failed: no such runner" in str(job)


def test_an_engine_deadline_wakes_the_loop(make_service, tmp_path):
    """A TE job preempts a BE job with a grace period of 0.5 s; the BE job ignores SIGTERM,
    so it is the engine's grace deadline (not the 60 s timer) that has it killed."""
    svc = make_service(tick_seconds=TIMER)
    prog = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    be = [svc.submit("alice", {"vc": "vca", "command": [PY, "-c", prog], "gpus": 4,
                               "job_class": "be", "grace_period": 0.5})["id"] for _ in range(2)]
    wait_until(lambda: all_in(svc, be, "running"), timeout=10, what="the BE jobs to run")
    time.sleep(0.3)
    mark = tmp_path / "te-started"
    te = svc.submit("anna", {"vc": "vca", "command": touch_cmd(mark), "gpus": 4, "job_class": "te"})["id"]
    wait_until(mark.exists, timeout=15, what="the TE job to start once a BE job was killed")
    assert state(svc, te) in ("running", "succeeded")
