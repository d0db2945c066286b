"""Slurm-style job control in the engine: time limits, dependencies, hold, requeue.
All on the engine's clock (``now``); no wall clock."""
import pytest
from engine_helpers import fig2_spec, kinds, req, run

from hived.core.engine import Engine, RequestError
from hived.core.engine_records import JobRecord
from hived.core.jobs import JobState
from hived.core.spec import load_spec


def engine() -> Engine:
    return Engine(load_spec(fig2_spec()))


def test_a_run_past_its_time_limit_is_stopped_and_fails_as_timeout():
    eng = engine()
    j = eng.submit(req(time_limit=60.0, grace_period=5.0), 0.0)
    run(eng, 0.0)
    assert eng.job(j).state is JobState.RUNNING and eng.next_wakeup() == 60.0
    assert run(eng, 59.0) == []
    ds = run(eng, 60.0)
    assert kinds(ds) == [("preempt", j)] and "time limit 1m reached" in ds[0].reason
    eng.on_finished(j, 61.0, -15)                  # it died of the SIGTERM
    rec = eng.job(j)
    assert rec.state is JobState.FAILED and rec.failure_class == "timeout"
    assert rec.history[-1][2].startswith("time limit 1m reached: timeout: not retried (hived submit --retries N")


def test_a_timed_out_job_is_retried_only_when_asked():
    eng = engine()
    j = eng.submit(req(time_limit=10.0, max_retries=1), 0.0)
    run(eng, 0.0)
    run(eng, 10.0)
    eng.on_finished(j, 10.5, 0)                     # a clean exit at the SIGTERM still timed out
    assert eng.job(j).state is JobState.QUEUED and "retry 1/1" in eng.job(j).history[-1][2]


def test_after_waits_for_success_without_blocking_and_fails_when_a_dependency_fails():
    eng = engine()
    a = eng.submit(req(), 0.0)
    b = eng.submit(req(after=[a]), 0.0)
    c = eng.submit(req(), 0.0)                      # behind b in the queue: b must not block it
    run(eng, 0.0)
    assert eng.job(a).state is JobState.RUNNING and eng.job(c).state is JobState.RUNNING
    assert eng.job(b).state is JobState.QUEUED and eng.job(b).wait_reason == f"waits for {a} to succeed (--after)"
    eng.on_finished(a, 5.0, 0)
    run(eng, 5.0)
    assert eng.job(b).state is JobState.RUNNING
    d = eng.submit(req(after=[c]), 6.0)
    eng.on_finished(c, 7.0, 1)
    run(eng, 7.0)
    rec = eng.job(d)
    assert rec.state is JobState.FAILED and rec.failure_class == "dependency" and rec.started is None
    assert rec.history[-1][2] == f"dependency {c} failed: never started (--after)"


def test_hold_passes_a_queued_job_over_until_released():
    eng = engine()
    a = eng.submit(req(), 0.0)
    eng.hold(a, 0.0, "alice")
    b = eng.submit(req(), 0.0)
    run(eng, 1.0)
    assert eng.job(a).state is JobState.QUEUED and eng.job(b).state is JobState.RUNNING
    assert eng.job(a).wait_reason == f"held by alice: hived release {a} lets it start"
    with pytest.raises(RequestError, match="already held"):
        eng.hold(a, 1.0, "alice")
    with pytest.raises(RequestError, match="only queued jobs can be held"):
        eng.hold(b, 1.0, "alice")
    eng.unhold(a, 2.0, "alice")
    run(eng, 2.0)
    assert eng.job(a).state is JobState.RUNNING
    assert [h[2] for h in eng.job(a).history if "held" in h[2] or "released" in h[2]] == [
        "held by alice", "released by alice"]


def test_requeue_stops_a_running_job_and_queues_it_at_the_head():
    eng = engine()
    a = eng.submit(req(grace_period=3.0), 0.0)
    run(eng, 0.0)
    ds = eng.requeue(a, 1.0, "alice")
    assert kinds(ds) == [("preempt", a)] and ds[0].reason == "requeued by alice"
    eng.on_preempted(a, 2.0)
    assert eng.job(a).state is JobState.QUEUED
    run(eng, 2.0)
    assert eng.job(a).state is JobState.RUNNING and eng.job(a).attempts == 2
    with pytest.raises(RequestError, match="only running or placed jobs can be requeued"):
        eng.requeue(eng.submit(req(gpus=4), 3.0), 3.0, "alice")


def test_control_state_survives_a_restart():
    eng = engine()
    a = eng.submit(req(time_limit=30.0), 0.0)
    b = eng.submit(req(after=[a]), 0.0)
    h = eng.submit(req(), 0.0)
    eng.hold(h, 0.0, "alice")
    run(eng, 0.0)
    new = engine()
    for rec in eng.restore_order():
        new.restore(JobRecord.from_dict(rec.to_dict()))
    assert new.job(b).request.after == [a] and new.job(h).held_by == "alice"
    assert new.next_wakeup() == 30.0
    assert kinds(run(new, 30.0))[0] == ("preempt", a)      # grace 0: the kill follows at once
