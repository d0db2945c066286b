"""Job control (core/engine_control.py) asserted where `make mutants MUTANT_SCOPE=engine-control`
found a planted bug that no other test noticed.

Each test drives a real engine on Figure 2's cluster through its public methods; time is the
engine's ``now``, never the wall clock."""
from __future__ import annotations

import pytest
from engine_helpers import borrowed, fig2_spec, kinds, req, run

from hived.core.engine import Engine, RequestError
from hived.core.jobs import JobClass, JobState
from hived.core.spec import load_spec


def _engine() -> Engine:
    return Engine(load_spec(fig2_spec()))


def _refused(call) -> RequestError:
    with pytest.raises(RequestError) as e:
        call()
    return e.value


@pytest.mark.parametrize("limit, said", [
    (3600.0, "1h"), (7200.0, "2h"), (5400.0, "90m"), (3660.0, "61m"), (60.0, "1m"), (120.0, "2m"),
    (90.0, "90s"), (30.0, "30s"), (1.5, "1.5s"), (59.6, "1m"), (0.0, "0s"),
])
def test_the_time_limit_is_named_in_the_largest_whole_unit(limit, said):
    eng = _engine()
    eng.submit(req(time_limit=limit, grace_period=5.0), 0.0, job_id="j")
    run(eng, 0.0)
    ds = run(eng, limit)
    assert kinds(ds) == [("preempt", "j")] and ds[0].reason == f"time limit {said} reached"
    eng.on_finished("j", limit + 1.0, -15)
    assert eng.job("j").last_error == f"time limit {said} reached"


def test_where_the_last_run_ran_is_kept_after_it_ended():
    eng = _engine()
    eng.submit(req(gpus=2), 0.0, job_id="j")
    (start,) = run(eng, 0.0)
    eng.on_finished("j", 10.0, 0)
    rec = eng.job("j")
    assert rec.placement is None and rec.last_placement == start.placement


def test_a_time_limit_reached_while_the_job_is_already_stopping_ends_it_as_timed_out():
    """Started and asked to stop in one round (B's borrower on A's node, then A's job): its
    time limit, due during the grace period, decides how it ends: failed as timed out, not
    queued again as preempted."""
    eng = _engine()
    eng.submit(req(vc="B", gpus=4, cls=JobClass.BE, user="bob"), 0.0, job_id="bfill")
    run(eng, 0.0)
    eng.submit(req(vc="B", gpus=4, cls=JobClass.OPPORTUNISTIC, user="bob", grace_period=600.0,
                   time_limit=10.0), 0.0, job_id="opp")
    assert kinds(eng.step(0.0)) == [("start", "opp")]          # the launcher has not reported it yet
    eng.submit(req(gpus=4), 1.0, job_id="g")
    assert kinds(eng.step(1.0)) == [("preempt", "opp")]
    eng.on_started("opp", 2.0)
    rec = eng.job("opp")
    assert rec.state is JobState.PREEMPTING and rec.grace_deadline == 31.0
    assert eng.step(12.0) == []                                 # the limit: nothing more to tell
    eng.on_preempted("opp", 20.0)
    assert rec.state is JobState.FAILED and rec.failure_class == "timeout"
    assert rec.history[-1][2].startswith("time limit 10s reached: timeout: not retried")


def test_a_timed_out_run_records_its_exit_and_a_retry_runs_under_a_fresh_limit():
    eng = _engine()
    eng.submit(req(time_limit=10.0, grace_period=5.0, max_retries=1), 0.0, job_id="j")
    run(eng, 0.0)
    assert kinds(run(eng, 10.0)) == [("preempt", "j")]
    eng.on_finished("j", 11.0, 0)                  # it saved and exited cleanly at the SIGTERM
    rec = eng.job("j")
    assert rec.state is JobState.QUEUED and (rec.exit_code, rec.failure_class, rec.failures) == (0, "timeout", 1)
    assert rec.last_error == "time limit 10s reached"
    assert rec.history[-1][2].startswith("time limit 10s reached: timeout: retry 1/1")
    t = max(rec.not_before or 0.0, 20.0)           # after the retry's back-off
    assert ("start", "j") in kinds(run(eng, t))
    assert rec.limit_at == t + 10.0 and kinds(run(eng, t + 10.0)) == [("preempt", "j")]   # the retry's own limit
    eng.on_finished("j", t + 11.0, -15)
    assert rec.state is JobState.FAILED and rec.failures == 2 and rec.limit_at is None


def test_a_retried_run_that_ends_well_before_its_limit_succeeds():
    eng = _engine()
    eng.submit(req(time_limit=10.0, grace_period=5.0, max_retries=1), 0.0, job_id="j")
    run(eng, 0.0)
    run(eng, 10.0)
    eng.on_finished("j", 11.0, 0)                  # a clean exit at the SIGTERM: still timed out
    assert eng.job("j").state is JobState.QUEUED
    t = max(eng.job("j").not_before or 0.0, 20.0)  # after the retry's back-off
    assert ("start", "j") in kinds(run(eng, t))
    eng.on_finished("j", t + 5.0, 0)
    rec = eng.job("j")
    assert rec.state is JobState.SUCCEEDED and rec.failure_class == "success" and rec.exit_code == 0


def test_a_timed_out_job_that_is_retried_queues_again_behind_the_jobs_waiting():
    eng = _engine()
    eng.submit(req(gpus=4, time_limit=10.0, grace_period=5.0, max_retries=1), 0.0, job_id="j")
    run(eng, 0.0)
    eng.submit(req(gpus=4), 1.0, job_id="k")
    run(eng, 10.0)
    eng.on_finished("j", 11.0, 0)
    assert eng.queue("A", 11.0) == ["k", "j"]
    assert kinds(run(eng, 11.0)) == [("start", "k")]


# ---------------------------------------------------------------- dependencies

def test_a_job_waiting_for_a_job_that_does_not_exist_fails_naming_it():
    eng = _engine()
    eng.submit(req(after=["nope"]), 0.0, job_id="d")
    assert run(eng, 0.0) == []
    rec = eng.job("d")
    assert rec.state is JobState.FAILED and rec.failure_class == "dependency" and rec.started is None
    assert rec.history[-1][2] == "dependency nope is gone: never started (--after)"


def test_a_job_waiting_for_two_jobs_names_both_until_each_succeeded():
    eng = _engine()
    eng.submit(req(gpus=2), 0.0, job_id="a")
    eng.submit(req(gpus=2), 0.0, job_id="b")
    eng.submit(req(after=["a", "b"]), 0.0, job_id="d")
    run(eng, 0.0)
    assert eng.job("d").wait_reason == "waits for a, b to succeed (--after)"
    eng.on_finished("a", 5.0, 0)
    run(eng, 5.0)
    assert eng.job("d").wait_reason == "waits for b to succeed (--after)"


# ---------------------------------------------------------------- hold, unhold, requeue

def test_hold_and_unhold_refuse_with_the_field_and_the_state():
    eng = _engine()
    eng.submit(req(gpus=2), 0.0, job_id="r")
    run(eng, 0.0)
    eng.submit(req(gpus=2), 0.0, job_id="q")
    e = _refused(lambda: eng.hold("r", 1.0, "alice"))
    assert (e.field, e.problem) == ("job_id", "r is running; only queued jobs can be held")
    e = _refused(lambda: eng.unhold("q", 1.0, "alice"))
    assert (e.field, e.problem) == ("job_id", "q is not held")
    eng.hold("q", 1.0, "alice")
    e = _refused(lambda: eng.hold("q", 2.0, "root"))
    assert (e.field, e.problem) == ("job_id", "q is already held (by alice)")
    e = _refused(lambda: eng.requeue("q", 2.0, "alice"))
    assert (e.field, e.problem) == ("job_id", "q is queued; only running or placed jobs can be requeued")


def test_hold_and_unhold_say_why_the_job_waits_at_once():
    eng = _engine()
    eng.submit(req(gpus=2), 0.0, job_id="q")
    eng.hold("q", 0.0, "alice")
    rec = eng.job("q")
    assert (rec.held_by, rec.wait_reason) == ("alice", "held by alice: hived release q lets it start")
    eng.unhold("q", 1.0, "root")
    assert (rec.held_by, rec.wait_reason) == ("", "released: tried at the next scheduling round")


def test_holding_the_head_that_blocked_its_queue_unblocks_the_jobs_submitted_behind_it():
    eng = _engine()
    eng.submit(req(gpus=4), 0.0, job_id="r")
    run(eng, 0.0)
    eng.submit(req(gpus=4), 1.0, job_id="h")
    run(eng, 1.0)                                   # h heads A's queue and cannot fit: it blocks
    eng.submit(req(gpus=1), 2.0, job_id="x")
    assert eng.job("x").wait_reason.startswith("behind h")
    eng.hold("h", 3.0, "alice")
    eng.submit(req(gpus=1), 4.0, job_id="y")
    assert eng.job("y").wait_reason == "submitted: tried at the next scheduling round"


def test_requeueing_a_job_placed_but_not_started_frees_its_cells_and_puts_it_first_without_a_stop():
    """A's job ``g`` is placed on its node while B's borrower leaves; requeued, nothing runs
    that must be stopped: it goes back to the head of A's queue."""
    eng = borrowed()
    eng.submit(req(gpus=4), 11.0, job_id="x")
    assert eng.job("g").state is JobState.PLACED
    assert eng.requeue("g", 12.0, "alice") == []
    rec = eng.job("g")
    assert rec.state is JobState.QUEUED and rec.placement is None and rec.history[-1][2] == "requeued by alice"
    assert eng.queue("A", 12.0) == ["g", "x"]


def test_requeueing_a_job_whose_start_was_just_decided_stops_it():
    """The START is out (the launcher is creating its pods) but not yet reported: the job
    must be stopped like a running one."""
    eng = _engine()
    eng.submit(req(gpus=2, grace_period=5.0), 0.0, job_id="j")
    assert kinds(eng.step(0.0)) == [("start", "j")]
    ds = eng.requeue("j", 1.0, "alice")
    assert kinds(ds) == [("preempt", "j")] and ds[0].reason == "requeued by alice"
    assert eng.job("j").state is JobState.PREEMPTING


def test_a_job_in_another_vc_waiting_for_a_cancelled_queued_job_fails_at_the_next_round():
    """Nothing is released when a queued job is cancelled; the VC of a job that depends on it
    is looked at anyway, and the job ends failed."""
    eng = _engine()
    eng.submit(req(gpus=1), 0.0, job_id="a")
    eng.hold("a", 0.0, "alice")
    eng.submit(req(vc="B", gpus=1, user="bob", after=["a"]), 0.0, job_id="d")
    assert run(eng, 0.0) == []
    assert eng.job("d").wait_reason == "waits for a to succeed (--after)"
    eng.cancel("a", 1.0, "alice")
    run(eng, 1.0)
    rec = eng.job("d")
    assert rec.state is JobState.FAILED and rec.history[-1][2] == "dependency a cancelled: never started (--after)"


def test_a_failed_dependent_forgotten_before_the_next_round_is_no_trouble():
    eng = _engine()
    eng.submit(req(gpus=1), 0.0, job_id="a")
    eng.submit(req(gpus=1, after=["a"]), 0.0, job_id="d")
    run(eng, 0.0)
    eng.on_finished("a", 1.0, 1)
    run(eng, 1.0)
    assert eng.job("d").state is JobState.FAILED
    eng.forget("d")
    eng.submit(req(gpus=1), 2.0, job_id="n")
    assert kinds(run(eng, 2.0)) == [("start", "n")]
