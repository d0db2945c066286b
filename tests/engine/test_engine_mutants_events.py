"""What the engine's event part (core/engine_events.py) books, asserted where `make mutants
MUTANT_SCOPE=engine-events` found a planted bug that no other test noticed.

Each test drives a real engine on Figure 2's cluster through its public methods; time is the
engine's ``now``, never the wall clock."""
from __future__ import annotations

import pytest
from engine_helpers import borrowed, fig2_spec, kinds, req, run

from hived.core.engine import Engine, EngineConfig, RequestError
from hived.core.jobs import DecisionKind, JobClass, JobState
from hived.core.spec import load_spec


def _engine() -> Engine:
    return Engine(load_spec(fig2_spec()), config=EngineConfig(preemption_cap=10))


def _borrowed() -> Engine:
    return borrowed(60.0, config=EngineConfig(preemption_cap=10))


def _refused(call) -> RequestError:
    with pytest.raises(RequestError) as e:
        call()
    return e.value


# ---------------------------------------------------------------- on_started

def test_a_queued_job_cannot_be_reported_started():
    eng = _engine()
    eng.submit(req(gpus=1), 0.0, job_id="q")
    e = _refused(lambda: eng.on_started("q", 1.0))
    assert (e.field, e.problem) == ("job_id", "q cannot start: it is queued")
    assert eng.job("q").state is JobState.QUEUED and eng.job("q").attempts == 0


def test_a_job_placed_on_cells_still_held_by_a_victim_cannot_start_and_the_error_names_the_victim():
    eng = _borrowed()
    assert eng.job("g").state is JobState.PLACED and eng.job("g").waiting_for == ["opp"]
    e = _refused(lambda: eng.on_started("g", 11.0))
    assert (e.field, e.problem) == ("job_id", "g cannot start: it is placed, waiting for ['opp']")
    assert eng.job("g").started is None and eng.job("g").attempts == 0


def test_a_running_job_told_to_stop_cannot_be_reported_started_again():
    eng = _borrowed()
    before = eng.job("opp").attempts
    e = _refused(lambda: eng.on_started("opp", 11.0))
    assert (e.field, e.problem) == ("job_id", "opp cannot start: it is preempting")
    rec = eng.job("opp")
    assert rec.state is JobState.PREEMPTING and rec.attempts == before and rec.started == 0.0



def test_each_run_adds_its_time_and_the_first_start_is_kept_across_runs():
    eng = _engine()
    eng.submit(req(gpus=2), 0.0, job_id="j")
    run(eng, 5.0)
    assert kinds(eng.requeue("j", 30.0, "alice")) == [("preempt", "j")]
    eng.on_preempted("j", 35.0)                     # the first run: 5 .. 35
    rec = eng.job("j")
    assert rec.state is JobState.QUEUED and rec.run_time == 30.0
    assert ("start", "j") in kinds(run(eng, 40.0))  # the second run: 40 .. 100
    assert (rec.first_started, rec.started, rec.attempts) == (5.0, 40.0, 2)
    eng.on_finished("j", 100.0, 0)
    assert rec.state is JobState.SUCCEEDED and rec.run_time == 90.0 and rec.first_started == 5.0


def test_a_start_reported_after_the_job_was_told_to_stop_is_noted_as_such():
    eng = _engine()
    eng.submit(req(vc="B", gpus=4, cls=JobClass.BE, user="bob"), 0.0, job_id="bfill")
    run(eng, 0.0)
    eng.submit(req(vc="B", gpus=4, cls=JobClass.OPPORTUNISTIC, user="bob", grace_period=60.0), 0.0, job_id="opp")
    assert kinds(eng.step(0.0)) == [("start", "opp")]           # not reported yet
    eng.submit(req(gpus=4), 1.0, job_id="g")
    assert kinds(eng.step(1.0)) == [("preempt", "opp")]
    eng.on_started("opp", 2.0)
    rec = eng.job("opp")
    assert rec.state is JobState.PREEMPTING and rec.history[-1][1:] == ("preempting", "started (already asked to stop)")
    eng.on_preempted("opp", 3.0)
    assert rec.state is JobState.QUEUED and rec.history[-1][2] == "preempted"


def test_a_placed_job_the_launcher_reports_preempted_before_it_started_goes_back_saying_so():
    eng = _engine()
    eng.submit(req(gpus=2), 0.0, job_id="j")
    assert kinds(eng.step(0.0)) == [("start", "j")]
    assert eng.job("j").state is JobState.PLACED
    eng.on_preempted("j", 1.0)                     # its pods were evicted before it reported a start
    rec = eng.job("j")
    assert rec.state is JobState.QUEUED and rec.history[-1][2] == "preempted before start"


def test_events_for_a_job_that_is_not_running_are_refused_naming_the_field():
    eng = _engine()
    eng.submit(req(gpus=1), 0.0, job_id="q")
    e = _refused(lambda: eng.on_preempted("q", 1.0))
    assert (e.field, e.problem) == ("job_id", "q is queued, not running")
    e = _refused(lambda: eng.on_finished("q", 1.0, 0))
    assert (e.field, e.problem) == ("job_id", "q is queued, not running")
    assert eng.job("q").state is JobState.QUEUED


def test_a_cancelled_running_job_ends_cancelled_once_it_is_gone():
    eng = _engine()
    eng.submit(req(gpus=1, grace_period=5.0), 0.0, job_id="j")
    run(eng, 0.0)
    assert kinds(eng.cancel("j", 1.0, "alice")) == [("preempt", "j")]
    eng.on_preempted("j", 2.0)
    rec = eng.job("j")
    assert rec.state is JobState.CANCELLED and rec.history[-1][2] == "cancelled"


def test_gpus_preempted_add_up_per_job_and_over_the_engine():
    eng = _engine()
    eng.submit(req(gpus=2), 0.0, job_id="j")
    eng.submit(req(gpus=1), 0.0, job_id="k")
    run(eng, 0.0)
    before = eng.stats["preempted_gpus"]
    for t in (1.0, 3.0):
        eng.requeue("j", t, "alice")
        eng.on_preempted("j", t)
        run(eng, t + 1.0)
    eng.requeue("k", 5.0, "alice")
    eng.on_preempted("k", 5.0)
    assert (eng.job("j").preemptions, eng.job("j").gpus_preempted) == (2, 4)
    assert eng.stats["preempted_gpus"] == before + 5


@pytest.mark.parametrize("behind", [[], ["x"], ["x", "y"]])
def test_a_victim_moved_behind_its_preemptor_keeps_that_place_across_a_restart(behind):
    """FIFO without TE-first: the preempted BE job goes back behind the TE job it made room for
    (not at the head, where it would take the cells back), and its queue key says so, so a
    restarted engine rebuilds the same queue."""
    from engine_helpers import eight_gpu_spec

    from hived.core.engine_records import JobRecord
    from hived.core.policies.fifo import FifoPolicy

    def engine() -> Engine:
        return Engine(eight_gpu_spec(2, {"A": 8, "B": 8}), queue_policy=FifoPolicy(te_first=False),
                      preemption_policy="fitgpp")

    eng = engine()
    eng.submit(req(gpus=4, cls=JobClass.BE), 0.0, job_id="b1")
    eng.submit(req(gpus=4, cls=JobClass.BE), 0.0, job_id="b2")
    run(eng, 0.0)
    eng.submit(req(gpus=4), 1.0, job_id="t")
    (v,) = [d.job_id for d in run(eng, 1.0) if d.kind is DecisionKind.PREEMPT]
    for j in behind:
        eng.submit(req(gpus=4, cls=JobClass.BE), 1.5, job_id=j)
    eng.on_preempted(v, 2.0)
    assert eng.queue("A", 2.0) == ["t", v] + behind
    # a job submitted after the move takes a key above the victim's, wherever it went
    eng.submit(req(gpus=4, cls=JobClass.BE), 3.0, job_id="late")
    new = engine()
    for rec in eng.restore_order():
        new.restore(JobRecord.from_dict(rec.to_dict()))
    assert new.queue("A", 3.0) == ["t", v] + behind + ["late"]



# ---------------------------------------------------------------- on_finished

def test_how_a_run_ended_is_kept_in_last_error_and_the_history():
    eng = _engine()
    for j in ("ok", "infra", "user", "bare"):
        eng.submit(req(gpus=1), 0.0, job_id=j)
    run(eng, 0.0)
    eng.on_finished("ok", 1.0, 0)
    eng.on_finished("infra", 1.0, 1, "NCCL error: unhandled system error\n")
    eng.on_finished("user", 1.0, 1, "  Traceback\nValueError: bad  ")
    eng.on_finished("bare", 1.0, 3)
    eng.submit(req(gpus=1), 1.0, job_id="long")
    assert ("start", "long") in kinds(run(eng, 1.0))
    tail = "x" * 600 + "y" * 600
    eng.on_finished("long", 2.0, 2, tail)
    ok, infra, user = eng.job("ok"), eng.job("infra"), eng.job("user")
    assert ok.state is JobState.SUCCEEDED and ok.last_error == "" and ok.history[-1][2] == "exit 0"
    assert infra.last_error == "NCCL error: unhandled system error"
    assert infra.history[-1][1:] == ("queued",
                                     "infrastructure (mpi-nccl): infrastructure: retry 1/3 after 120s back-off")
    assert user.last_error == "Traceback\nValueError: bad"
    assert user.history[-1][1:] == ("failed", "exit 1, user_error (semantic): user_error: not retried "
                                    "(hived submit --retries N, max_retries in the request, asks for retries)")
    assert eng.job("bare").last_error == "exit code 3"
    assert eng.job("long").last_error == tail[-1000:]


# ---------------------------------------------------------------- cancel

def test_cancel_of_an_ended_job_is_refused_naming_the_field():
    eng = _engine()
    eng.submit(req(gpus=1), 0.0, job_id="j")
    run(eng, 0.0)
    eng.on_finished("j", 1.0, 0)
    e = _refused(lambda: eng.cancel("j", 2.0, "alice"))
    assert (e.field, e.problem) == ("job_id", "j already succeeded")


def test_cancel_says_who_cancelled_in_each_state():
    eng = _engine()
    eng.submit(req(gpus=1, grace_period=5.0), 0.0, job_id="r")
    run(eng, 0.0)
    eng.submit(req(gpus=1), 0.0, job_id="q")
    assert eng.cancel("q", 1.0, "alice") == []
    assert eng.job("q").history[-1][1:] == ("cancelled", "cancelled by alice")
    ds = eng.cancel("r", 1.0, "root")
    assert kinds(ds) == [("preempt", "r")] and ds[0].reason == "cancelled by root"


def test_cancel_of_a_job_already_told_to_stop_kills_it_at_once_saying_who():
    eng = _borrowed()
    ds = eng.cancel("opp", 12.0, "bob")
    assert kinds(ds) == [("kill", "opp")] and ds[0].reason == "cancelled by bob"
    rec = eng.job("opp")
    assert rec.grace_deadline == 12.0 and rec.history[-1][2] == "cancelled by bob: killed at once"


def test_cancel_of_a_job_placed_on_cells_a_victim_still_holds_ends_it_with_nothing_to_stop():
    eng = _borrowed()
    assert eng.cancel("g", 12.0, "alice") == []
    assert eng.job("g").state is JobState.CANCELLED and eng.job("g").placement is None
    assert eng.job("opp").state is JobState.PREEMPTING


def test_cancel_of_a_job_whose_start_was_just_decided_stops_it():
    eng = _engine()
    eng.submit(req(gpus=1, grace_period=5.0), 0.0, job_id="j")
    assert kinds(eng.step(0.0)) == [("start", "j")]
    assert kinds(eng.cancel("j", 0.5, "alice")) == [("preempt", "j")]
    assert eng.job("j").state is JobState.PREEMPTING


def test_cancelling_the_head_that_blocked_its_queue_unblocks_the_jobs_submitted_behind_it():
    eng = _engine()
    eng.submit(req(gpus=4), 0.0, job_id="r")
    run(eng, 0.0)
    eng.submit(req(gpus=4), 1.0, job_id="h")
    run(eng, 1.0)
    eng.cancel("h", 2.0, "alice")
    eng.submit(req(gpus=1), 3.0, job_id="y")
    assert eng.job("y").wait_reason == "submitted: tried at the next scheduling round"


# ---------------------------------------------------------------- health

@pytest.mark.parametrize("gpu, where", [(None, "node1"), (0, "node1 GPU 0")])
def test_a_job_on_failing_hardware_is_stopped_naming_the_hardware(gpu, where):
    eng = _engine()
    eng.submit(req(gpus=4, grace_period=5.0), 0.0, job_id="j")
    (start,) = run(eng, 0.0)
    assert start.placement.pods[0].node == "node1"
    ds = eng.set_health("node1", gpu, False, 1.0)
    assert kinds(ds) == [("preempt", "j")] and ds[0].reason == f"hardware unhealthy on {where}"


def test_a_job_already_leaving_failing_hardware_is_not_told_again():
    eng = _borrowed()                              # opp, on A's node, is leaving
    rec = eng.job("opp")
    assert rec.state is JobState.PREEMPTING
    ds = eng.set_health(rec.placement.pods[0].node, None, False, 12.0)
    assert [d for d in ds if d.job_id == "opp"] == [] and rec.preemptions == 0


# ---------------------------------------------------------------- progress

def test_progress_is_checked_against_its_total_and_the_refusals_name_the_field():
    eng = _engine()
    eng.submit(req(gpus=1), 0.0, job_id="j")
    run(eng, 0.0)
    eng.report_progress("j", 0, 10, 1.0)            # nothing done yet, and all of it: both ends count
    assert eng.job("j").progress == (0, 10)
    eng.report_progress("j", 10, 10, 1.0)
    assert eng.job("j").progress == (10, 10)
    eng.report_progress("j", 0.5, 1.0, 1.0)
    assert eng.job("j").progress == (0.5, 1.0)
    e = _refused(lambda: eng.report_progress("j", 0.0, 0, 2.0))
    assert (e.field, e.problem) == ("total", "must be > 0, got 0")
    e = _refused(lambda: eng.report_progress("j", 3.0, 2.0, 2.0))
    assert (e.field, e.problem) == ("done", "must be within [0, 2.0], got 3.0")
    assert eng.job("j").progress == (0.5, 1.0)


# ---------------------------------------------------------------- capacity moved by an exchange

def test_capacity_moved_by_an_exchange_is_counted_and_a_downgrade_list_may_name_unknown_jobs():
    from hived.core.allocator import Allocator
    from hived.core.exchange import Cells, give_back

    alloc = Allocator(load_spec(fig2_spec()))
    eng = Engine(alloc, preemption_policy="none")
    e = _refused(lambda: eng.on_capacity_changed(["Z"], [], 0.0))
    assert (e.field, e.problem) == ("vc", "unknown VC 'Z'")
    eng.on_capacity_changed(["A"], [], 0.0)        # nothing moved: the same 4 GPUs
    assert (eng.capacity("A"), eng.capacity("B")) == (4, 4)
    alloc.transfer("A", "B", "NODE", 3, 1)         # A lends its node to B
    eng.on_capacity_changed(["A", "B"], [], 1.0)
    assert (eng.capacity("A"), eng.capacity("B")) == (0, 8)
    eng.submit(req("B", 4, user="bob"), 1.0, job_id="b1")
    eng.submit(req("B", 4, user="bob"), 1.0, job_id="b2")
    run(eng, 1.0)
    down = give_back(alloc, "B", "A", Cells("NODE", 3, 1))
    eng.on_capacity_changed(["A", "B"], ["gone", "b1"] + down, 2.0)   # an unknown id is passed over
    assert [j for j in ("b1", "b2") if eng.job(j).opportunistic] == down
    (d,) = down
    node = eng.view.nodes[eng.job(d).placement.pods[0].node]
    assert (node.gpus_free, node.guaranteed_gpus) == (0, 0)        # the same GPUs, now opportunistic work
    assert eng.job(d).history[-1][2] == "cells given back by an exchange: now opportunistic"
    assert (eng.capacity("A"), eng.capacity("B")) == (4, 4)
