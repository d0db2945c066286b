"""The engine's own module (core/engine.py) asserted where `make mutants MUTANT_SCOPE=engine-main`
found a planted bug that no other test noticed.

Each test drives a real engine on Figure 2's cluster through its public methods; time is the
engine's ``now``, never the wall clock."""
from __future__ import annotations

import pytest
from engine_helpers import borrowed, fig2_spec, kinds, quota_engine, req, run

from hived.core.engine import Engine, EngineConfig, RequestError
from hived.core.jobs import JobClass, JobState
from hived.core.spec import load_spec


def _engine(**kw) -> Engine:
    return Engine(load_spec(fig2_spec()), **kw)


class _CappedPolicy:
    """A preemption policy that brings a cap of its own, which the engine refuses."""

    cap = 2

    def choose(self, job, candidates, view, now):
        return []


def test_a_preemption_policy_with_its_own_cap_is_refused_with_where_the_cap_belongs():
    with pytest.raises(ValueError) as e:
        _engine(preemption_policy=_CappedPolicy())
    assert str(e.value) == (
        "preemption_policy: the policy object sets its own cap; the engine's P is "
        "EngineConfig.preemption_cap (or a VC's maxPreemptions): leave the policy's cap unset")


def test_job_ids_the_engine_gives_count_from_j1_and_skip_ids_already_taken():
    eng = _engine()
    assert eng.submit(req(), 0.0) == "j1"
    eng.submit(req(), 0.0, job_id="j2")
    eng.submit(req(), 0.0, job_id="j3")
    assert eng.submit(req(), 0.0) == "j4"
    assert eng.submit(req(), 0.0) == "j5"
    assert eng.job_ids() == ["j1", "j2", "j3", "j4", "j5"]


def test_the_queues_walked_are_known_before_the_first_round_and_after_each():
    eng = _engine()
    assert eng.scanned == set()
    eng.submit(req(gpus=4), 0.0, job_id="a")
    assert kinds(run(eng, 0.0)) == [("start", "a")]
    assert eng.scanned == {"A"}


def _refused(call) -> RequestError:
    with pytest.raises(RequestError) as e:
        call()
    return e.value


def test_a_job_id_given_empty_or_already_taken_is_refused_naming_the_field():
    eng = _engine()
    eng.submit(req(), 0.0, job_id="a")
    e = _refused(lambda: eng.submit(req(), 0.0, job_id=""))
    assert (e.field, e.problem) == ("job_id", "must be a non-empty string, got ''")
    e = _refused(lambda: eng.submit(req(), 0.0, job_id="a"))
    assert (e.field, e.problem) == ("job_id", "'a' already exists")
    assert eng.job_ids() == ["a"]


def test_a_submitted_job_says_it_was_submitted_and_when_it_will_be_tried():
    eng = _engine()
    eng.submit(req(), 3.0, job_id="a")
    rec = eng.job("a")
    assert rec.history[-1][1:] == ("queued", "submitted")
    assert rec.wait_reason == "submitted: tried at the next scheduling round"


def _borrowed() -> Engine:
    eng = borrowed(20.0, config=EngineConfig(preemption_cap=10))
    assert eng.job("opp").grace_deadline == 30.0
    return eng


def test_the_kill_at_the_end_of_a_grace_period_says_so():
    eng = _borrowed()
    assert eng.step(29.0) == []
    ds = eng.step(30.0)
    assert kinds(ds) == [("kill", "opp")] and ds[0].reason == "grace period over"


def test_a_grace_timer_made_void_by_a_cancel_is_no_reason_to_wake():
    eng = _borrowed()
    assert kinds(eng.cancel("opp", 12.0, "bob")) == [("kill", "opp")]
    assert eng.next_wakeup() is None


def test_a_void_timer_does_not_hide_the_timers_due_after_it():
    eng = _borrowed()
    eng.submit(req(vc="B", gpus=1, user="bob", time_limit=25.0), 11.0, job_id="lim")
    eng.cancel("opp", 12.0, "bob")                 # its grace timer (30) is void now
    eng.on_preempted("opp", 13.0)
    eng.on_finished("bfill", 13.0, 0)
    assert ("start", "lim") in kinds(run(eng, 13.0))   # its limit is due at 38
    assert kinds(eng.step(40.0))[:1] == [("preempt", "lim")]


def test_a_job_cancelled_after_its_victim_left_is_not_started():
    eng = _borrowed()
    eng.on_preempted("opp", 15.0)                  # the cells are free: g is ready to start
    # nothing was launched for g yet: the cancel ends it at once, with no PREEMPT or KILL to
    # send a launcher that has nothing to stop, and its cells are free again
    assert eng.cancel("g", 15.0, "alice") == []
    assert eng.job("g").state is JobState.CANCELLED and eng.job("g").placement is None
    assert ("start", "g") not in kinds(eng.step(15.0))
    assert eng.job("g").started is None


def test_a_job_cancelled_after_its_start_went_out_is_stopped_as_a_running_one():
    """Between the START decision and the launcher's on_started the process may already be
    starting: a cancel then stops it the way it stops a running job."""
    eng = _borrowed()
    eng.on_preempted("opp", 15.0)
    assert ("start", "g") in kinds(eng.step(15.0))
    assert kinds(eng.cancel("g", 15.0, "alice")) == [("preempt", "g")]


def test_a_job_submitted_after_a_back_off_ended_is_queued_normally():
    eng = _engine()
    eng.submit(req(gpus=4), 0.0, job_id="f")
    run(eng, 0.0)
    eng.on_finished("f", 1.0, 1, "NCCL error")     # infrastructure: retried after a back-off
    due = eng.job("f").not_before
    assert ("start", "f") in kinds(run(eng, due))
    eng.submit(req(gpus=4), due + 1.0, job_id="n")
    assert eng.job("n").wait_reason == "submitted: tried at the next scheduling round"


def test_a_head_that_did_not_fit_is_not_tried_again_until_its_vc_releases_cells():
    """The failed-attempt memo (docs/engine.md, "Speed"): a submission behind the head marks the
    queue for a round, but the head is not placed again while nothing it depends on changed."""
    eng = _engine(config=EngineConfig(backfill=False))
    eng.submit(req(gpus=4), 0.0, job_id="r")
    run(eng, 0.0)
    eng.submit(req(gpus=4), 1.0, job_id="h")
    assert run(eng, 1.0) == []
    tries = eng.stats["attempts"]
    eng.submit(req(gpus=1), 2.0, job_id="x")
    assert run(eng, 2.0) == [] and eng.scanned == {"A"}
    assert eng.stats["attempts"] == tries
    eng.on_finished("r", 3.0, 0)
    assert kinds(run(eng, 3.0)) == [("start", "h")] and eng.stats["attempts"] == tries + 2


# ---------------------------------------------------------------- the scan

class _PlainPolicy:
    """A queue policy with only what a policy must have: the engine's defaults fill in the rest
    (not in queue order, no TE-first, no blunt backfill)."""

    name = "plain"

    def order(self, vc, queued, view, now):
        return list(queued)


class _InOrderPolicy(_PlainPolicy):
    preserves_order = True     # walks the engine's queue in place; says nothing about TE-first


def _blocked_head(eng: Engine) -> None:
    """A's node: ``r`` holds 2 GPUs, ``h`` (4 GPUs) heads the queue, ``x`` (2 GPUs) is behind it."""
    eng.submit(req(gpus=2), 0.0, job_id="r")
    run(eng, 0.0)
    eng.submit(req(gpus=4), 1.0, job_id="h")
    eng.submit(req(gpus=2), 1.0, job_id="x")


def test_a_queue_policy_that_asks_for_blunt_backfill_has_every_job_tried_past_the_head():
    from hived.core.policies.fifo import FifoPolicy
    eng = _engine(queue_policy=FifoPolicy(backfill=True), config=EngineConfig(backfill=False))
    _blocked_head(eng)
    assert kinds(run(eng, 1.0)) == [("start", "x")]


@pytest.mark.parametrize("policy", [_PlainPolicy, _InOrderPolicy])
def test_a_queue_policy_that_says_nothing_of_backfill_keeps_strict_order_without_the_engines(policy):
    eng = _engine(queue_policy=policy(), config=EngineConfig(backfill=False))
    _blocked_head(eng)
    assert run(eng, 1.0) == [] and eng.job("x").wait_reason.startswith("behind h")


def test_a_queue_policy_in_queue_order_that_says_nothing_of_te_first_is_not_given_it():
    eng = _engine(queue_policy=_InOrderPolicy(), preemption_policy=None)
    eng.submit(req(gpus=4, cls=JobClass.BE), 0.0, job_id="be")
    eng.submit(req(gpus=4), 0.0, job_id="te")
    assert kinds(run(eng, 0.0)) == [("start", "be")]


def test_a_job_in_retry_back_off_does_not_hold_up_the_jobs_behind_it():
    eng = _engine()
    eng.submit(req(gpus=2), 0.0, job_id="f")
    run(eng, 0.0)
    eng.on_finished("f", 1.0, 1, "NCCL error")     # infrastructure: retried after a back-off
    assert eng.job("f").not_before > 2.0
    eng.submit(req(gpus=2), 2.0, job_id="k")
    assert eng.queue("A", 2.0) == ["f", "k"]
    assert kinds(run(eng, 2.0)) == [("start", "k")]


def test_a_job_that_starts_has_no_reason_to_wait():
    eng = _engine()
    eng.submit(req(gpus=2), 0.0, job_id="a")
    run(eng, 0.0)
    assert eng.job("a").state is JobState.RUNNING and eng.job("a").wait_reason == ""


def test_with_wait_reasons_off_a_job_that_did_not_fit_keeps_the_line_it_was_given():
    """The simulator turns wait reasons off (EngineConfig.wait_reasons): a failed attempt then
    writes nothing."""
    eng = _engine(config=EngineConfig(wait_reasons=False))
    eng.submit(req(gpus=4), 0.0, job_id="r")
    run(eng, 0.0)
    eng.submit(req(gpus=4), 1.0, job_id="h")
    assert run(eng, 1.0) == []
    assert eng.job("h").wait_reason == "submitted: tried at the next scheduling round"


def test_jobs_behind_a_new_head_in_a_full_vc_are_told_what_they_wait_for_in_that_round():
    eng = _engine()
    eng.submit(req(gpus=4), 0.0, job_id="r")
    run(eng, 0.0)
    eng.submit(req(gpus=4), 1.0, job_id="h")
    eng.submit(req(gpus=1), 1.0, job_id="x")
    assert run(eng, 1.0) == []
    assert eng.job("h").wait_reason.endswith("it holds a reservation on its VC's cells (end times unknown): later "
                                             "jobs may start ahead of it only as jobs it preempts when it can run")
    assert eng.job("x").wait_reason.startswith("behind h, the head of VC A's queue, which holds a reservation")


def test_under_the_quota_baseline_a_job_that_found_the_gpus_fragmented_is_tried_when_another_vc_frees_some():
    """The quota baseline shares nodes between VCs (not isolated): A's whole-node job waits while
    B's jobs hold half of each node, and goes as soon as B frees one, with no change in A."""
    eng = quota_engine(fig2_spec())
    eng.submit(req(gpus=2), 0.0, job_id="a0")
    run(eng, 0.0)
    eng.submit(req(vc="B", gpus=2, user="bob"), 0.0, job_id="b1")
    eng.submit(req(vc="B", gpus=2, user="bob"), 0.0, job_id="b2")
    ds = run(eng, 0.0)
    assert sorted(d.placement.pods[0].node for d in ds) == ["node1", "node2"]
    eng.on_finished("a0", 1.0, 0)
    run(eng, 1.0)
    eng.submit(req(gpus=4), 2.0, job_id="a")
    assert run(eng, 2.0) == [] and "fragmented" in eng.job("a").wait_reason
    eng.on_finished("b2", 3.0, 0)
    assert kinds(run(eng, 3.0)) == [("start", "a")]



@pytest.mark.parametrize("cls, allow", [(JobClass.TE, True), (JobClass.OPPORTUNISTIC, False)])
def test_a_job_that_may_borrow_is_tried_again_when_another_vc_frees_gpus(cls, allow):
    """B's job may run opportunistically: its failed attempt depends on every VC, so A's
    release has it tried again, and it runs on A's node."""
    eng = _engine(config=EngineConfig(backfill=False))
    eng.submit(req(gpus=4), 0.0, job_id="a0")
    eng.submit(req(vc="B", gpus=4, user="bob"), 0.0, job_id="b0")
    run(eng, 0.0)
    eng.submit(req(vc="B", gpus=4, user="bob", cls=cls, allow_opportunistic=allow), 1.0, job_id="w")
    assert run(eng, 1.0) == []
    eng.on_finished("a0", 2.0, 0)
    ds = run(eng, 2.0)
    assert kinds(ds) == [("start", "w")] and ds[0].placement.opportunistic


@pytest.mark.parametrize("cls, allow", [(JobClass.TE, True), (JobClass.OPPORTUNISTIC, False)])
def test_borrowers_placed_one_after_the_other_all_start_in_one_round(cls, allow):
    eng = _engine(config=EngineConfig(backfill=False))
    eng.submit(req(vc="B", gpus=4, user="bob"), 0.0, job_id="b0")
    for j in ("o1", "o2"):
        eng.submit(req(vc="B", gpus=2, user="bob", cls=cls, allow_opportunistic=allow), 0.0, job_id=j)
    assert kinds(run(eng, 0.0)) == [("start", "b0"), ("start", "o1"), ("start", "o2")]
    assert eng.queue("B", 0.0) == []


# ---------------------------------------------------------------- bind

def test_time_in_the_queue_adds_up_over_each_wait():
    eng = _engine()
    eng.submit(req(gpus=1), 2.0, job_id="j")
    run(eng, 5.0)                                  # waited 2 .. 5
    rec = eng.job("j")
    assert rec.queued_time == 3.0 and rec.queued_since is None
    eng.requeue("j", 6.0, "alice")
    eng.on_preempted("j", 7.0)                     # queued again at 7
    run(eng, 11.0)                                 # waited 7 .. 11
    assert rec.state is JobState.RUNNING and rec.queued_time == 7.0 and rec.queued_since is None


def test_how_a_job_was_placed_is_in_its_history():
    eng = _borrowed()
    assert eng.job("opp").history[1][1:] == ("placed", "opportunistic")
    assert eng.job("g").history[-1][1:] == ("placed", "guaranteed; waiting for 1 opportunistic victims")
    assert eng.job("opp").history[-1][1:] == ("preempting", "cells taken back by guaranteed job g of VC A")


# ---------------------------------------------------------------- reading the engine

def test_the_engine_is_read_by_vc_and_state_and_refuses_unknown_vcs():
    eng = _engine()
    eng.submit(req(gpus=4), 0.0, job_id="a1")
    eng.submit(req(gpus=1), 0.0, job_id="a2")
    eng.submit(req(vc="B", gpus=1, user="bob"), 0.0, job_id="b1")
    ds = run(eng, 0.0)
    assert [(d.job_id, d.reason) for d in ds] == [("a1", "guaranteed"), ("b1", "guaranteed")]
    assert eng.stats["starts"] == 2
    assert "a1" in eng and "zz" not in eng and len(eng) == 3

    def ids(records) -> list:
        return [r.job_id for r in records]

    assert ids(eng.jobs()) == ["a1", "a2", "b1"]
    assert ids(eng.jobs("A")) == ["a1", "a2"] and ids(eng.jobs("B")) == ["b1"]
    assert ids(eng.jobs(state="running")) == ["a1", "b1"] and ids(eng.jobs("A", JobState.QUEUED)) == ["a2"]
    assert ids(eng.jobs(states=[JobState.QUEUED, JobState.RUNNING])) == ["a1", "a2", "b1"]
    assert ids(eng.jobs(states=[JobState.QUEUED])) == ["a2"]
    assert ids(eng.holding("A")) == ["a1"] and eng.queue("A") == ["a2"]
    for read in (eng.holding, eng.queue):
        with pytest.raises(RequestError) as e:
            read("Z")
        assert (e.value.field, e.value.problem) == ("vc", "unknown VC 'Z'")


def test_a_borrower_is_started_saying_so():
    eng = _engine()
    eng.submit(req(vc="B", gpus=4, cls=JobClass.BE, user="bob"), 0.0, job_id="bfill")
    eng.submit(req(vc="B", gpus=4, cls=JobClass.OPPORTUNISTIC, user="bob"), 0.0, job_id="opp")
    assert [(d.job_id, d.reason) for d in run(eng, 0.0)] == [("bfill", "guaranteed"), ("opp", "opportunistic")]


def test_the_queue_is_read_by_head_count_and_lanes_and_unknown_vcs_are_said_so():
    eng = _engine()
    eng.submit(req(gpus=4), 0.0, job_id="r")
    run(eng, 0.0)
    eng.submit(req(gpus=1, cls=JobClass.BE), 1.0, job_id="q1")
    eng.submit(req(gpus=1, user="root"), 1.0, job_id="q2")
    eng.submit(req(gpus=1), 1.0, job_id="q3")
    assert eng.head("A", 1.0).job_id == "q2"                       # TE first
    assert (eng.queued_count("A"), eng.queued_count("A", "alice"), eng.queued_count("A", "root")) == (3, 2, 1)
    assert (eng.queued_count("A", "bob"), eng.queued_count("B"), eng.queued_count("Z")) == (0, 0, 0)
    te, rest = eng.lanes("A")
    assert (list(te), list(rest)) == (["q2", "q3"], ["q1"]) and eng.lanes("Z") is None
    e = _refused(lambda: eng.head("Z", 1.0))
    assert (e.field, e.problem) == ("vc", "unknown VC 'Z'")
    assert [r.job_id for r in eng.restore_order()] == ["r", "q1", "q2", "q3"]


def test_only_ended_jobs_are_forgotten():
    eng = _engine()
    eng.submit(req(gpus=1), 0.0, job_id="j")
    e = _refused(lambda: eng.forget("j"))
    assert (e.field, e.problem) == ("job_id", "j is queued; only ended jobs are forgotten")
    eng.cancel("j", 1.0, "alice")
    eng.forget("j")
    assert "j" not in eng


# ---------------------------------------------------------------- the preemption policy

def test_a_te_job_that_preempting_cannot_make_room_for_says_so_and_preempts_nothing():
    eng = _engine()
    eng.submit(req(gpus=2), 0.0, job_id="r")
    eng.submit(req(gpus=2, cls=JobClass.BE), 0.0, job_id="b")
    run(eng, 0.0)
    eng.submit(req(gpus=4), 1.0, job_id="t")
    assert run(eng, 1.0) == []
    rec = eng.job("t")
    assert rec.policy_note == "preempting every BE job under the cap would still leave VC A short of 4 GPUs"
    assert rec.policy_note in rec.wait_reason and eng.job("b").state is JobState.RUNNING


def test_a_te_job_that_preempting_makes_room_for_names_its_victim():
    eng = _engine()
    eng.submit(req(gpus=2), 0.0, job_id="r")
    eng.submit(req(gpus=2, cls=JobClass.BE, grace_period=10.0), 0.0, job_id="b")
    run(eng, 0.0)
    eng.submit(req(gpus=2), 1.0, job_id="t")      # A is full
    ds = run(eng, 1.0)
    assert kinds(ds) == [("preempt", "b")] and ds[0].reason.startswith("for TE job t: ")
    assert eng.job("t").policy_note == "" and eng.job("t").policy_victims == ["b"]
    assert run(eng, 2.0) == []                    # its victim is leaving: it waits, asking nothing more
    eng.on_preempted("b", 3.0)
    assert ("start", "t") in kinds(run(eng, 3.0))
