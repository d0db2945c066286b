"""TE and BE jobs through the real Engine with preemption_policy="fitgpp" (and the baselines).

The test plays the launcher: it calls on_started for every START, and
on_preempted once a KILL arrives, the way the service does. Every test runs
twice: over HiveD's buddy cell allocator (core/allocator.py, what
``Engine(spec)`` builds) and over the quota allocator (core/quota.py).
"""
import pytest

from hived.core.engine import Engine
from hived.core.jobs import DecisionKind, JobClass, JobRequest, JobState, PodGroup
from hived.core.policies import preemption_order
from hived.core.policies.fitgpp import FitGppPolicy
from hived.core.quota import QuotaAllocator
from hived.core.sim.fitgpp_workload import cluster_spec
from hived.core.spec import load_spec


@pytest.fixture(params=["hived", "quota"])
def make(request):
    def _engine(spec, **kw):
        if request.param == "quota":
            return Engine(QuotaAllocator(load_spec(spec)), **kw)
        return Engine(spec, **kw)
    return _engine


def _drive(eng, now):
    out = eng.step(now)
    for d in out:
        if d.kind is DecisionKind.START:
            eng.on_started(d.job_id, now)
    return out


def _kinds(out):
    return [(d.kind.value, d.job_id) for d in out]


def _job(cls, gpus, grace=0.0, vc="vc0", duration=None):
    return JobRequest(user="u", vc=vc, job_class=cls, groups=[PodGroup(1, gpus)], grace_period=grace,
                      duration=duration)


@pytest.fixture
def busy(make):
    """Two nodes of 8 GPUs held by BE jobs b1 (4 GPUs, grace 120 s), b2 (4, 60 s), b3 (8, 600 s);
    b4 (2 GPUs) waits in the queue."""
    eng = make(cluster_spec(2), preemption_policy="fitgpp")
    for jid, g, gp in (("b1", 4, 120.0), ("b2", 4, 60.0), ("b3", 8, 600.0)):
        eng.submit(_job(JobClass.BE, g, gp), 0.0, job_id=jid)
    out = _drive(eng, 0.0)
    assert sorted(j for k, j in _kinds(out) if k == "start") == ["b1", "b2", "b3"]
    eng.submit(_job(JobClass.BE, 2), 1.0, job_id="b4")
    assert _drive(eng, 1.0) == []
    return eng


def test_fitgpp_victim_grace_period_requeue_and_count(busy):
    eng = busy
    eng.submit(_job(JobClass.TE, 4), 10.0, job_id="t1")
    out = _drive(eng, 10.0)
    # eq. 3: sizes 0.866 (b1, b2) and 1.732 (b3), grace 120/60/600 s -> scores 1.3, 0.9, 5.0: b2
    assert _kinds(out) == [("preempt", "b2")]
    d = out[0]
    assert d.grace_period == 60.0 and "fitgpp: preempt b2" in d.reason and "t1" in d.reason
    assert eng.job("b2").state is JobState.PREEMPTING
    assert eng.job("t1").state is JobState.QUEUED
    # inside the grace period: nothing happens, the TE job waits, no second victim
    assert _drive(eng, 40.0) == []
    assert eng.next_wakeup() == pytest.approx(70.0)
    out = _drive(eng, 70.0)
    assert _kinds(out) == [("kill", "b2")] and "grace period over" in out[0].reason
    eng.on_preempted("b2", 70.0)
    rec = eng.job("b2")
    assert rec.state is JobState.QUEUED and rec.preemptions == 1
    # TE first, then the victim at the head of the BE queue, ahead of b4 that came earlier
    assert eng.queue("vc0") == ["t1", "b2", "b4"]
    out = _drive(eng, 70.0)
    assert _kinds(out) == [("start", "t1")]
    # t1 ends: the 4 GPUs go to b2 (head of the queue), not to b4
    eng.on_finished("t1", 100.0, 0)
    assert _kinds(_drive(eng, 100.0)) == [("start", "b2")]
    assert eng.job("b2").preemptions == 1 and eng.job("b2").attempts == 2
    # P = 1: b2 has the lowest score but is at the cap; FitGpp takes b1 (1.3) over b3 (5.0)
    eng.submit(_job(JobClass.TE, 4), 110.0, job_id="t2")
    out = _drive(eng, 110.0)
    assert _kinds(out) == [("preempt", "b1")] and out[0].grace_period == 120.0
    assert eng.stats["preempt_decisions"] == 2


def test_whole_node_te_job_takes_the_only_victim_that_fits_alone(busy):
    eng = busy
    eng.submit(_job(JobClass.BE, 4, grace=0.0), 2.0, job_id="b5")   # queued behind b4
    eng.submit(_job(JobClass.TE, 8), 10.0, job_id="t1")
    out = _drive(eng, 10.0)
    # 8 GPUs: only b3 (a whole node) fits alone, whatever its 600 s grace
    assert _kinds(out) == [("preempt", "b3")] and out[0].grace_period == 600.0
    assert _drive(eng, 609.0) == []
    assert _kinds(_drive(eng, 610.0)) == [("kill", "b3")]
    eng.on_preempted("b3", 610.0)
    assert _kinds(_drive(eng, 610.0)) == [("start", "t1")]
    assert eng.queue("vc0") == ["b3", "b4", "b5"]


def test_no_single_job_fits_falls_back_and_says_so(make):
    eng = make(cluster_spec(1), preemption_policy="fitgpp")
    for jid in ("b1", "b2", "b3", "b4"):
        eng.submit(_job(JobClass.BE, 2, 30.0), 0.0, job_id=jid)
    _drive(eng, 0.0)
    eng.submit(_job(JobClass.TE, 6), 5.0, job_id="t")
    out = _drive(eng, 5.0)
    victims = [j for k, j in _kinds(out) if k == "preempt"]
    # by GPU count 3 victims make room; HiveD's buddy allocator gives a 6-GPU pod the smallest
    # cell holding 6 GPUs, the whole node, so under it all 4 go at once (fitgpp_cells.py)
    assert len(victims) == (3 if isinstance(eng.alloc, QuotaAllocator) else 4)
    assert all("fallback" in d.reason and "no single BE job fits" in d.reason for d in out)
    out = _drive(eng, 35.0)
    assert sorted(j for k, j in _kinds(out) if k == "kill") == sorted(victims)
    for j in victims:
        eng.on_preempted(j, 35.0)
    out = _drive(eng, 35.0)
    assert _kinds(out) == [("start", "t")]     # no second round of preemption


class _Spy:
    """A PreemptionPolicy that records what the engine hands it and answers like FitGpp."""

    name = "spy"

    def __init__(self):
        self.calls = []
        self.inner = FitGppPolicy()

    def choose(self, job, candidates, view, now):
        self.calls.append((job.job_id, [c.job_id for c in candidates]))
        return self.inner.choose(job, candidates, view, now)


def test_engine_candidates_match_preemption_order(make):
    spy = _Spy()
    eng = make(cluster_spec(2), preemption_policy=spy)
    for jid, g in (("b1", 4), ("b2", 4), ("b3", 8)):
        eng.submit(_job(JobClass.BE, g, 10.0), 0.0, job_id=jid)
    _drive(eng, 0.0)
    eng.submit(_job(JobClass.TE, 4), 1.0, job_id="t")
    expect = [r.job_id for r in preemption_order.policy_candidates(eng.job("t"), eng.jobs(), cap=1)]
    _drive(eng, 1.0)
    job, ids = spy.calls[0]
    assert job == "t" and sorted(ids) == sorted(expect) == ["b1", "b2", "b3"]
    # a BE job that does not fit never asks the policy
    eng.submit(_job(JobClass.BE, 8), 2.0, job_id="b9")
    _drive(eng, 2.0)
    assert [c[0] for c in spy.calls] == ["t"]


def test_strict_priority_first_policy_not_asked(make):
    spec = cluster_spec(2)
    spec["virtualClusters"] = {
        "vc0": {"virtualCells": [{"cellType": "FG-CLUSTER.FG-NODE", "cellNumber": 1}]},
        "vc1": {"virtualCells": [{"cellType": "FG-CLUSTER.FG-NODE", "cellNumber": 1}]},
    }
    spy = _Spy()
    eng = make(spec, preemption_policy=spy)
    eng.submit(_job(JobClass.BE, 8, vc="vc1"), 0.0, job_id="own1")
    eng.submit(_job(JobClass.OPPORTUNISTIC, 8, vc="vc1"), 0.0, job_id="opp1")
    out = _drive(eng, 0.0)
    assert sorted(j for k, j in _kinds(out) if k == "start") == ["opp1", "own1"]
    assert eng.job("opp1").opportunistic
    eng.submit(_job(JobClass.TE, 4, vc="vc0"), 5.0, job_id="t")
    out = _drive(eng, 5.0)
    assert _kinds(out) == [("preempt", "opp1")]
    assert spy.calls == []          # stage 1 made room: FitGpp never asked
    assert eng.job("t").state is JobState.PLACED and eng.job("t").waiting_for == ["opp1"]


@pytest.mark.parametrize("name", ["lrtp", "rand"])
def test_baselines_run_in_the_engine(name, make):
    eng = make(cluster_spec(1), preemption_policy=name)
    for jid, dur in (("short", 100.0), ("long", 5000.0)):
        eng.submit(_job(JobClass.BE, 4, 10.0, duration=dur), 0.0, job_id=jid)
    _drive(eng, 0.0)
    eng.submit(_job(JobClass.TE, 2), 50.0, job_id="t")
    out = _drive(eng, 50.0)
    victims = [j for k, j in _kinds(out) if k == "preempt"]
    assert len(victims) == 1 and out[0].reason.startswith(f"for TE job t: {name}:")
    if name == "lrtp":
        assert victims == ["long"]
