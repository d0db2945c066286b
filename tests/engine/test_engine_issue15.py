"""Reproductions of the engine bugs of issue 15, each with exact jobs and cells."""
from types import SimpleNamespace

import pytest
from engine_helpers import eight_gpu_spec, fig2_spec, kinds, req, run

from hived.core.engine import Engine, EngineConfig
from hived.core.failures import FailureClass, classify
from hived.core.jobs import Affinity, DecisionKind, JobClass, JobState
from hived.core.sim.simulate import to_request
from hived.core.sim.traces import TraceJob, default_pods, parse_csv

# ---------------------------------------------------------------- a job gets every GPU it asked for

@pytest.mark.parametrize("gpus", [9, 10, 11, 12, 13, 14, 15, 17, 20, 23, 24, 31, 33])
def test_trace_job_is_split_into_exactly_its_gpus(gpus):
    j = TraceJob("j", "A", 0.0, 10.0, gpus, default_pods(gpus))
    r = to_request(j)
    sizes = [g.gpus for g in r.groups for _ in range(g.pods)]
    assert sum(sizes) == gpus, sizes
    assert all(1 <= s <= 8 for s in sizes)

STRICT_FIFO = EngineConfig(backfill=False)   # these tests pin first-in-first-out without backfill


def test_ten_gpu_job_runs_with_ten_gpus_through_the_engine():
    import io
    tr = parse_csv(io.StringIO("job_id,tenant,submit,duration,gpus\nx,A,0,10,10\n"))
    eng = Engine(eight_gpu_spec(4, {"A": 16, "B": 16}), preemption_policy="none")
    eng.submit(to_request(tr.jobs[0]), 0.0, job_id="x")
    ds = run(eng, 0.0)
    (start,) = [d for d in ds if d.kind is DecisionKind.START]
    assert start.placement.gpu_count == 10


def test_csv_pods_that_do_not_divide_are_refused_with_the_reason():
    import io

    from hived.core.sim.traces import TraceError
    with pytest.raises(TraceError, match="pods"):
        parse_csv(io.StringIO("job_id,tenant,submit,duration,gpus,pods\nx,A,0,10,10,3\n"))


# ---------------------------------------------------------------- cancel of a blocked head

def test_cancelling_the_blocked_head_lets_the_queue_move():
    eng = Engine(fig2_spec(), preemption_policy="none", config=STRICT_FIFO)
    eng.submit(req("A", gpus=2), 0.0, job_id="r")       # holds half of A's node
    run(eng, 0.0)
    eng.submit(req("A", gpus=4), 1.0, job_id="big")     # blocked: needs the whole node
    eng.submit(req("A", gpus=1), 1.0, job_id="small")   # behind it (FIFO, backfill off)
    assert run(eng, 1.0) == []
    eng.cancel("big", 2.0, "alice")
    ds = run(eng, 2.0)
    assert ("start", "small") in kinds(ds)
    assert eng.job("small").state is JobState.RUNNING


# ---------------------------------------------------------------- FitGpp only preempts what makes room

def _one_vc_two_nodes():
    """VC A owns one 8-GPU node of two; B owns the other (idle)."""
    return eight_gpu_spec(2, {"A": 8, "B": 8})


def test_fitgpp_does_not_preempt_when_the_te_job_cannot_fit_its_vc():
    eng = Engine(_one_vc_two_nodes(), preemption_policy="fitgpp")
    eng.submit(req("A", gpus=4, cls=JobClass.BE), 0.0, job_id="b1")
    eng.submit(req("A", gpus=4, cls=JobClass.BE), 0.0, job_id="b2")
    run(eng, 0.0)
    # a TE gang of two 8-GPU pods: A's quota is one node, B's node is idle; preempting
    # b1 (or both) can never give A two nodes of guaranteed cells
    eng.submit(req("A", gpus=8, pods=2, allow_opportunistic=True), 1.0, job_id="t")
    ds = run(eng, 1.0)
    assert not [d for d in ds if d.kind is DecisionKind.PREEMPT]
    assert eng.job("b1").state is JobState.RUNNING and eng.job("b2").state is JobState.RUNNING


def test_fitgpp_victims_are_freed_for_the_te_job_not_given_back():
    eng = Engine(_one_vc_two_nodes(), preemption_policy="fitgpp")
    eng.submit(req("A", gpus=4, cls=JobClass.BE), 0.0, job_id="b1")
    eng.submit(req("A", gpus=4, cls=JobClass.BE), 0.0, job_id="b2")
    run(eng, 0.0)
    eng.submit(req("A", gpus=4), 1.0, job_id="t")
    ds = run(eng, 1.0)
    victims = [d.job_id for d in ds if d.kind is DecisionKind.PREEMPT]
    assert len(victims) == 1
    v = victims[0]
    old = {(p.node, g) for p in eng.job(v).placement.pods for g in p.gpus}
    eng.on_preempted(v, 2.0)
    ds = run(eng, 2.0)
    assert kinds(ds) == [("start", "t")]
    got = {(p.node, g) for p in eng.job("t").placement.pods for g in p.gpus}
    assert got == old                              # the TE job took the victim's GPUs
    assert eng.job(v).state is JobState.QUEUED     # and the victim waits, it is not re-placed there


# ---------------------------------------------------------------- the preemption cap P

def _cap_setup(config=None, vc_cap=None):
    eng = Engine(fig2_spec(), preemption_policy="fitgpp", config=config)
    if vc_cap is not None:   # the spec's maxPreemptions (VCSpec.max_preemptions; frozen or not)
        object.__setattr__(eng.spec.vcs["A"], "max_preemptions", vc_cap)
    eng.submit(req("A", gpus=4, cls=JobClass.BE), 0.0, job_id="b")
    run(eng, 0.0)
    for k in range(3):
        t = float(10 * k + 1)
        eng.submit(req("A", gpus=4), t, job_id=f"t{k}")
        ds = run(eng, t)
        if ("preempt", "b") not in kinds(ds):
            return eng, k
        eng.on_preempted("b", t)
        run(eng, t)
        eng.on_finished(f"t{k}", t + 1, 0)
        run(eng, t + 1)
        assert eng.job("b").state is JobState.RUNNING
    return eng, 3


def test_preemption_cap_defaults_to_one():
    eng, k = _cap_setup()
    assert k == 1
    assert "preemption cap" in eng.job("t1").wait_reason
    assert "P=1" in eng.job("t1").wait_reason


def test_preemption_cap_from_the_engine_config():
    eng, k = _cap_setup(EngineConfig(preemption_cap=2))
    assert k == 2
    assert "P=2" in eng.job("t2").wait_reason


def test_preemption_cap_per_vc_overrides_the_service():
    eng, k = _cap_setup(EngineConfig(preemption_cap=1), vc_cap=3)
    assert k == 3


def test_one_definition_of_the_cap():
    from hived.core.policies.preemption_order import preemption_cap
    spec = SimpleNamespace(vcs={"A": SimpleNamespace(max_preemptions=None), "B": SimpleNamespace(max_preemptions=0)})
    assert preemption_cap(EngineConfig(preemption_cap=4), spec, "A") == 4
    assert preemption_cap(EngineConfig(preemption_cap=4), spec, "B") == 0


# ---------------------------------------------------------------- failures of the user's command

def test_exit_3_with_no_signature_is_the_users_and_not_retried():
    c = classify(3, "something went wrong\n")
    assert c.cls is FailureClass.USER
    eng = Engine(fig2_spec(), preemption_policy="none")
    eng.submit(req("A", gpus=1), 0.0, job_id="j")
    run(eng, 0.0)
    eng.on_finished("j", 5.0, 3, "something went wrong\n")
    rec = eng.job("j")
    assert rec.state is JobState.FAILED and rec.failure_class == "user_error"


def test_max_retries_asks_for_retries_and_the_back_off_is_visible():
    eng = Engine(fig2_spec(), preemption_policy="none")
    eng.submit(req("A", gpus=1, max_retries=1), 0.0, job_id="j")
    run(eng, 0.0)
    eng.on_finished("j", 5.0, 3, "")
    rec = eng.job("j")
    assert rec.state is JobState.QUEUED
    run(eng, 5.0)
    if rec.not_before > 5.0:
        assert f"retry at t={rec.not_before:g}" in rec.wait_reason
    run(eng, rec.not_before)
    assert rec.state is JobState.RUNNING
    eng.on_finished("j", rec.not_before + 5, 3, "")
    assert rec.state is JobState.FAILED


def test_infrastructure_failure_shows_its_retry_time():
    eng = Engine(fig2_spec(), preemption_policy="none")
    eng.submit(req("A", gpus=1), 0.0, job_id="j")
    run(eng, 0.0)
    eng.on_finished("j", 5.0, 1, "NCCL error: unhandled system error")
    rec = eng.job("j")
    assert rec.state is JobState.QUEUED and rec.not_before == 125.0
    run(eng, 6.0)
    assert "retry at t=125" in rec.wait_reason
    assert "infrastructure" in rec.wait_reason
    assert rec.to_dict()["wait_reason"] == rec.wait_reason


# ---------------------------------------------------------------- every waiting job says why

def test_waiting_reasons_name_cells_holders_quota_and_the_head():
    eng = Engine(fig2_spec(), preemption_policy="none", config=STRICT_FIFO)
    eng.submit(req("A", gpus=2), 0.0, job_id="r")
    run(eng, 0.0)
    eng.submit(req("A", gpus=4), 1.0, job_id="big")
    eng.submit(req("A", gpus=1), 1.0, job_id="small")
    run(eng, 1.0)
    big = eng.job("big").wait_reason
    assert "4 GPUs" in big and "quota" in big and "r" in big.split("held by", 1)[1]
    assert "big" in eng.job("small").wait_reason and "head" in eng.job("small").wait_reason
    assert eng.job("r").wait_reason == ""
    assert eng.job("big").to_dict()["wait_reason"] == big


def test_waiting_reason_says_when_soft_affinity_relaxes():
    eng = Engine(fig2_spec(), preemption_policy="none", config=EngineConfig(soft_wait=100.0))
    eng.submit(req("A", gpus=1), 0.0, job_id="r")
    run(eng, 0.0)
    eng.submit(req("A", gpus=1, pods=4, affinity=Affinity.SOFT), 1.0, job_id="s")
    run(eng, 1.0)
    assert "relax" in eng.job("s").wait_reason and "101" in eng.job("s").wait_reason


def test_placed_job_says_which_victims_it_waits_for():
    eng = Engine(fig2_spec(), preemption_policy="none")
    # B's node is idle: A's opportunistic job borrows it
    eng.submit(req("A", gpus=4), 0.0, job_id="a")
    eng.submit(req("A", gpus=4, cls=JobClass.OPPORTUNISTIC), 0.0, job_id="o")
    run(eng, 0.0)
    assert eng.job("o").state is JobState.RUNNING
    eng.submit(req("B", gpus=4, user="bob"), 1.0, job_id="g")
    ds = run(eng, 1.0)
    assert ("preempt", "o") in kinds(ds)
    w = eng.job("g").wait_reason
    assert eng.job("g").state is JobState.PLACED and "o" in w and "opportunistic" in w


def test_victim_does_not_retake_the_cells_of_its_preemptor_without_te_first():
    from hived.core.policies.fifo import FifoPolicy
    eng = Engine(_one_vc_two_nodes(), queue_policy=FifoPolicy(te_first=False), preemption_policy="fitgpp")
    eng.submit(req("A", gpus=4, cls=JobClass.BE), 0.0, job_id="b1")
    eng.submit(req("A", gpus=4, cls=JobClass.BE), 0.0, job_id="b2")
    run(eng, 0.0)
    eng.submit(req("A", gpus=4), 1.0, job_id="t")
    ds = run(eng, 1.0)
    (v,) = [d.job_id for d in ds if d.kind is DecisionKind.PREEMPT]
    eng.on_preempted(v, 2.0)
    ds = run(eng, 2.0)
    assert kinds(ds) == [("start", "t")]
    assert eng.job(v).state is JobState.QUEUED
    assert eng.queue("A") == [v]


def test_a_policy_object_with_its_own_cap_is_refused():
    from hived.core.policies.fitgpp import FitGppPolicy
    with pytest.raises(ValueError, match="EngineConfig.preemption_cap"):
        Engine(fig2_spec(), preemption_policy=FitGppPolicy(cap=2))
    Engine(fig2_spec(), preemption_policy=FitGppPolicy(s=8.0))


def test_a_job_whose_back_off_ended_behind_a_blocked_head_says_so():
    eng = Engine(fig2_spec(), preemption_policy="none", config=STRICT_FIFO)
    eng.submit(req("A", gpus=2), 0.0, job_id="r")
    eng.submit(req("A", gpus=1), 0.0, job_id="f")
    run(eng, 0.0)
    eng.submit(req("A", gpus=4), 0.5, job_id="big")        # blocked by r and f
    run(eng, 0.5)
    eng.on_finished("f", 1.0, 1, "NCCL error")             # infrastructure: back to the tail, retry at t=121
    run(eng, 2.0)
    assert eng.job("f").wait_reason.startswith("retry at t=121")
    run(eng, 121.0)
    assert eng.job("f").state is JobState.QUEUED
    assert "behind big" in eng.job("f").wait_reason
