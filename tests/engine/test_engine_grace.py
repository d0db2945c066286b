"""Grace periods: a timer acts only for the preemption that set it, and the VC that wants
its cells back bounds how long a victim keeps them.

- A KILL never comes before the deadline of the *current* preemption of a job
  (the property test preempts the same job again and again, with its own books).
- A job running on another VC's cells stops within the lending VC's
  ``opportunisticGrace``, whatever grace it asked (default 30 s).
- A BE job preempted for a TE job of its VC stops within the VC's ``maxGrace``.
- Cancelling a job that is already being preempted kills it at once.
"""
from __future__ import annotations

import os

from engine_helpers import fig2_spec, kinds, req, run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hived.core.engine import Engine, EngineConfig
from hived.core.jobs import DecisionKind, JobClass, JobState
from hived.core.spec import DEFAULT_MAX_GRACE, DEFAULT_OPPORTUNISTIC_GRACE, load_spec


def _spec(**vc_a) -> dict:
    d = fig2_spec()
    d["virtualClusters"]["A"].update(vc_a)
    return d


def _engine(spec: dict, cap: int = 1) -> Engine:
    return Engine(load_spec(spec), config=EngineConfig(preemption_cap=cap))


def _of(ds, kind: DecisionKind, job: str):
    return [d for d in ds if d.kind is kind and d.job_id == job]


# ---------------------------------------------------------------- one timer, one preemption

def test_a_grace_timer_of_an_earlier_preemption_never_kills_a_later_one():
    """The issue's sequence: grace 37 s, preempted at t=0, gone, back, preempted again at
    t=20 (deadline 57). The first preemption's timer (t=37) must not kill it."""
    eng = _engine(_spec(), cap=10)
    eng.submit(req(gpus=4, cls=JobClass.BE, grace_period=37.0), 0.0, job_id="b")
    run(eng, 0.0)
    eng.submit(req(gpus=4), 0.0, job_id="t1")
    assert _of(run(eng, 0.0), DecisionKind.PREEMPT, "b")[0].grace_period == 37.0
    eng.on_preempted("b", 1.0)             # it saved its work and left early
    run(eng, 1.0)                          # t1 starts on the freed GPUs
    eng.on_finished("t1", 10.0, 0)
    assert _of(run(eng, 10.0), DecisionKind.START, "b")   # b is back
    eng.submit(req(gpus=4), 20.0, job_id="t2")
    assert _of(run(eng, 20.0), DecisionKind.PREEMPT, "b")
    assert eng.job("b").grace_deadline == 57.0
    assert run(eng, 37.0) == []            # the first preemption's deadline: nothing
    assert eng.next_wakeup() == 57.0       # the void timer is not a reason to wake
    assert kinds(run(eng, 57.0)) == [("kill", "b")]


def test_a_back_off_timer_of_an_earlier_queueing_does_not_wake_the_engine():
    eng = _engine(_spec())
    eng.submit(req(gpus=4, cls=JobClass.BE), 0.0, job_id="b")
    run(eng, 0.0)
    eng.on_finished("b", 1.0, 1, "NCCL error")     # infrastructure: retried after a back-off
    due = eng.job("b").not_before
    assert due > 1.0 and eng.next_wakeup() == due
    eng.cancel("b", 2.0, "alice")                  # gone before the back-off ends
    assert eng.next_wakeup() is None


class _Books:
    """The test's own record of the one BE job that is preempted again and again."""

    def __init__(self, grace: float):
        self.grace = grace
        self.deadline: float | None = None   # the current preemption's, None when not preempting
        self.killed = False
        self.kills = 0
        self.preemptions = 0


OPS = st.lists(st.tuples(st.sampled_from(["tick", "te", "te_done", "b_leaves"]),
                         st.floats(0.0, 60.0, allow_nan=False)), min_size=1, max_size=40)


@settings(max_examples=int(os.environ.get("HIVED_HYPOTHESIS_EXAMPLES", "150")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(grace=st.sampled_from([0.0, 5.0, 37.0, 50.0, 2000.0]), ops=OPS)
def test_no_kill_before_the_current_deadline_and_one_by_it(grace, ops):
    eng = _engine(_spec(), cap=10 ** 6)
    bound = min(grace, DEFAULT_MAX_GRACE)   # stage 2: the VC's maxGrace bounds the BE job's grace
    books = _Books(grace)
    now = 0.0
    te: str | None = None
    n = 0
    eng.submit(req(gpus=4, cls=JobClass.BE, grace_period=grace), now, job_id="b")

    def step() -> None:
        fresh = False   # preempted in this very round: its KILL is due from the next round on
        for d in run(eng, now):
            if d.job_id != "b":
                continue
            if d.kind is DecisionKind.PREEMPT:
                assert books.deadline is None, "preempted twice without leaving"
                books.deadline, books.killed = now + bound, False
                books.preemptions += 1
                fresh = True
            elif d.kind is DecisionKind.KILL:
                assert books.deadline is not None and not books.killed, "a KILL with no preemption running"
                assert now >= books.deadline, f"KILL at {now} before the deadline {books.deadline}"
                books.killed = True
                books.kills += 1
        if books.deadline is not None and now >= books.deadline and not fresh:
            assert books.killed, f"no KILL by the deadline {books.deadline} (now {now})"

    step()
    for op, x in ops:
        if op == "tick":
            now += x
        elif op == "te" and te is None:
            n += 1
            te = f"t{n}"
            eng.submit(req(gpus=4), now, job_id=te)
        elif op == "te_done" and te is not None and eng.job(te).state is JobState.RUNNING:
            eng.on_finished(te, now, 0)
            te = None
        elif op == "b_leaves" and eng.job("b").state is JobState.PREEMPTING:
            eng.on_preempted("b", now)
            books.deadline = None
        step()
    assert books.kills <= books.preemptions


# ---------------------------------------------------------------- the lender bounds the borrower

def _borrowed(spec: dict, grace: float) -> tuple[Engine, float]:
    """B's opportunistic job runs on A's idle node; then A wants its node back."""
    eng = _engine(spec)
    eng.submit(req(vc="B", gpus=4, cls=JobClass.BE, user="bob"), 0.0, job_id="bfill")
    eng.submit(req(vc="B", gpus=4, cls=JobClass.OPPORTUNISTIC, user="bob", grace_period=grace), 0.0, job_id="opp")
    run(eng, 0.0)
    assert eng.job("opp").state is JobState.RUNNING and eng.job("opp").opportunistic
    return eng, 0.0


def test_a_borrower_gets_at_most_the_lenders_opportunistic_grace():
    eng, _ = _borrowed(_spec(opportunisticGrace=5), grace=86400.0)
    eng.submit(req(gpus=4), 10.0, job_id="g")
    ds = run(eng, 10.0)
    pre = _of(ds, DecisionKind.PREEMPT, "opp")
    assert pre and pre[0].grace_period == 5.0 and "asked 86400" in pre[0].reason
    assert eng.job("g").state is JobState.PLACED and eng.job("g").waiting_for == ["opp"]
    assert eng.next_wakeup() == 15.0
    assert run(eng, 14.9) == []
    assert kinds(run(eng, 15.0)) == [("kill", "opp")]
    eng.on_preempted("opp", 15.5)
    assert _of(run(eng, 15.5), DecisionKind.START, "g")


def test_the_default_opportunistic_grace_is_thirty_seconds():
    assert DEFAULT_OPPORTUNISTIC_GRACE == 30.0
    eng, _ = _borrowed(_spec(), grace=600.0)
    eng.submit(req(gpus=4), 10.0, job_id="g")
    assert _of(run(eng, 10.0), DecisionKind.PREEMPT, "opp")[0].grace_period == 30.0
    assert eng.next_wakeup() == 40.0


def test_a_borrower_asking_less_keeps_its_own_grace():
    eng, _ = _borrowed(_spec(opportunisticGrace=60), grace=7.0)
    eng.submit(req(gpus=4), 10.0, job_id="g")
    assert _of(run(eng, 10.0), DecisionKind.PREEMPT, "opp")[0].grace_period == 7.0


def test_a_borrower_already_leaving_slowly_is_hurried_to_the_lenders_bound():
    """Its owner cancelled it with a day of grace; then the lender wants the cells back."""
    eng, _ = _borrowed(_spec(opportunisticGrace=5), grace=86400.0)
    eng.cancel("opp", 1.0, "bob")
    assert eng.job("opp").state is JobState.PREEMPTING and eng.job("opp").grace_deadline == 86401.0
    run(eng, 1.0)
    eng.submit(req(gpus=4), 10.0, job_id="g")
    run(eng, 10.0)
    assert eng.job("opp").grace_deadline == 15.0
    assert kinds(run(eng, 15.0)) == [("kill", "opp")]
    assert kinds(run(eng, 86401.0)) == []   # the cancel's own timer is spent


def test_te_preempting_be_is_bounded_by_the_vcs_max_grace():
    eng = _engine(_spec(maxGrace=12))
    eng.submit(req(gpus=4, cls=JobClass.BE, grace_period=3600.0), 0.0, job_id="b")
    run(eng, 0.0)
    eng.submit(req(gpus=4), 1.0, job_id="t")
    pre = _of(run(eng, 1.0), DecisionKind.PREEMPT, "b")
    assert pre[0].grace_period == 12.0
    assert run(eng, 12.9) == [] and kinds(run(eng, 13.0)) == [("kill", "b")]


def test_the_default_max_grace_holds_the_fitgpp_workload():
    """20 minutes: FitGpp's workload truncates grace periods there, so its replays are unbounded."""
    from hived.core.sim.fitgpp_workload import sample_jobs
    graces = [j.grace_min * 60.0 for j in sample_jobs(3000, seed=1)]
    assert max(graces) <= DEFAULT_MAX_GRACE == 1200.0


def test_a_cancel_does_not_bound_the_owners_own_grace():
    eng = _engine(_spec(maxGrace=12, opportunisticGrace=1))
    eng.submit(req(gpus=4, cls=JobClass.BE, grace_period=300.0), 0.0, job_id="b")
    run(eng, 0.0)
    eng.cancel("b", 1.0, "alice")
    assert eng.job("b").grace_deadline == 301.0


# ---------------------------------------------------------------- cancel hurries a preemption

def test_cancelling_a_preempting_job_kills_it_at_once():
    eng, _ = _borrowed(_spec(opportunisticGrace=3600), grace=86400.0)
    eng.submit(req(gpus=4), 10.0, job_id="g")
    run(eng, 10.0)
    assert eng.job("opp").state is JobState.PREEMPTING
    ds = eng.cancel("opp", 11.0, "root")
    assert kinds(ds) == [("kill", "opp")] and "root" in ds[0].reason
    assert eng.cancel("opp", 12.0, "root") == []        # once killed, a second cancel adds nothing
    assert run(eng, 3610.0) == []                       # nor does the preemption's own timer
    eng.on_preempted("opp", 12.0)
    assert eng.job("opp").state is JobState.CANCELLED
    assert _of(run(eng, 12.0), DecisionKind.START, "g")


def test_a_second_cancel_of_a_running_job_kills_it_at_once():
    eng = _engine(_spec())
    eng.submit(req(gpus=4, cls=JobClass.BE, grace_period=600.0), 0.0, job_id="b")
    run(eng, 0.0)
    assert kinds(eng.cancel("b", 1.0, "alice")) == [("preempt", "b")]   # the first: SIGTERM, its own grace
    assert eng.job("b").state is JobState.PREEMPTING
    assert kinds(eng.cancel("b", 2.0, "alice")) == [("kill", "b")]
