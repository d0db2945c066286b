"""Preemption policy hook, soft affinity and the policy registry."""
import pytest
from engine_helpers import eight_gpu_spec, fig2_spec, kinds, quota_engine, req, run

from hived.core.engine import EngineConfig
from hived.core.jobs import Affinity, JobClass, JobState
from hived.core.policies import registry
from hived.core.policies.fifo import FifoPolicy


def test_te_job_preempts_be_of_its_vc_through_fitgpp_with_cap():
    eng = quota_engine(eight_gpu_spec(2, {"A": 8, "B": 8}), preemption_policy="fitgpp")
    be = eng.submit(req("A", 8, cls=JobClass.BE, grace_period=60.0), 0.0)
    other = eng.submit(req("B", 8, cls=JobClass.BE, user="bob"), 0.0)
    run(eng, 0.0)
    te = eng.submit(req("A", 1), 10.0)
    ds = run(eng, 10.0)
    assert kinds(ds) == [("preempt", be)] and "fitgpp" in ds[0].reason
    assert eng.job(te).policy_victims == [be]
    assert run(eng, 20.0) == []                  # victim still in its grace period: not asked again
    eng.on_preempted(be, 70.0)
    ds = run(eng, 70.0)
    assert kinds(ds) == [("start", te)]
    assert eng.job(be).preemptions == 1 and eng.queue("A") == [be]
    assert eng.job(other).state is JobState.RUNNING  # other VCs' BE jobs are never candidates
    # the BE job is at the preemption cap (P=1): a second TE job may not preempt it again
    eng.on_finished(te, 80.0, 0)
    run(eng, 80.0)
    assert eng.job(be).state is JobState.RUNNING
    te2 = eng.submit(req("A", 1), 90.0)
    assert run(eng, 90.0) == [] and eng.job(te2).state is JobState.QUEUED


def test_no_policy_means_te_waits():
    eng = quota_engine(eight_gpu_spec(2, {"A": 8, "B": 8}), preemption_policy="none")
    eng.submit(req("A", 8, cls=JobClass.BE), 0.0)
    run(eng, 0.0)
    eng.submit(req("A", 1), 1.0)
    assert run(eng, 1.0) == []


def test_soft_affinity_relaxes_one_level_at_a_time_with_back_off():
    spec = fig2_spec()
    spec["virtualClusters"]["A"]["virtualCells"][0]["cellNumber"] = 2
    spec["physicalCluster"]["physicalCells"].append({"cellType": "NODE", "cellAddress": "node3"})
    eng = quota_engine(spec, config=EngineConfig(soft_wait=150.0, relax_backoff=2.0))
    b = eng.submit(req("B", 4, user="bob"), 0.0)   # B fills one node
    for _ in range(8):
        eng.submit(req("A", 1), 0.0)
    ds = run(eng, 0.0)
    by_node = {}
    for d in ds:
        if d.job_id == b:
            continue
        by_node.setdefault(d.placement.pods[0].node, []).append(d.job_id)
    assert sorted(len(v) for v in by_node.values()) == [4, 4]
    for jobs in by_node.values():
        for j in jobs[:2]:
            eng.on_finished(j, 1.0, 0)
    soft = eng.submit(req("A", 1, pods=4, affinity=Affinity.SOFT), 10.0)
    hard = None
    assert eng.job(soft).want_level == 3                     # the 4 pods want one node
    assert run(eng, 10.0) == [] and eng.next_wakeup() == 160.0
    ds = run(eng, 160.0)                                      # node level -> no constraint
    assert kinds(ds) == [("start", soft)]
    assert len({p.node for p in ds[0].placement.pods}) == 2
    assert eng.job(soft).relaxations == 1 and eng.job(soft).level is None
    assert any("relaxed" in h[2] for h in eng.job(soft).history)
    eng.on_finished(soft, 200.0, 0)
    hard = eng.submit(req("A", 1, pods=4, affinity=Affinity.HARD), 210.0)
    run(eng, 210.0)
    run(eng, 10_000.0)
    assert eng.job(hard).state is JobState.QUEUED and eng.job(hard).relaxations == 0


def test_relax_schedule_backs_off():
    spec = fig2_spec()
    spec["physicalCluster"]["cellTypes"]["SOCK"] = {"childCellType": "PCIE", "childCellNumber": 2}
    spec["physicalCluster"]["cellTypes"]["NODE"]["childCellType"] = "SOCK"
    spec["physicalCluster"]["cellTypes"]["NODE"]["childCellNumber"] = 2
    eng = quota_engine(spec, config=EngineConfig(soft_wait=100.0, relax_backoff=2.0))
    eng.submit(req("A", 8), 0.0)
    run(eng, 0.0)
    j = eng.submit(req("A", 1, pods=2, affinity=Affinity.SOFT), 0.0)
    rec = eng.job(j)
    assert rec.want_level == 2
    run(eng, 0.0)
    times = []
    for t in (100.0, 300.0, 700.0):
        assert eng.next_wakeup() == t
        run(eng, t)
        times.append((t, rec.level))
    assert times == [(100.0, 3), (300.0, 4), (700.0, None)]


def test_registry_names_and_errors():
    assert isinstance(registry.make_queue_policy("fifo"), FifoPolicy)
    assert registry.make_preemption_policy("none") is None
    assert registry.make_preemption_policy("fitgpp").name == "fitgpp"
    assert registry.make_preemption_policy("lrtp").name == "lrtp"
    assert registry.make_preemption_policy("rand").name == "rand"
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        registry.make_queue_policy("nope")
    with pytest.raises(ValueError, match="no order"):
        registry.make_queue_policy(object())
    with pytest.raises(ValueError, match="kind"):
        registry.register("other", "x", "a:b")
    registry.register("queue", "broken", "hived.core.nothing_here:X")
    with pytest.raises(ValueError, match="cannot be loaded"):
        registry.make_queue_policy("broken")
    del registry.QUEUE_POLICIES["broken"]


def test_custom_order_policy_is_used():
    class Reverse:
        name = "reverse"

        def order(self, vc, queued, view, now):
            return list(reversed(queued))

    eng = quota_engine(fig2_spec(), queue_policy=Reverse())
    a = eng.submit(req("A", 4), 0.0)
    b = eng.submit(req("A", 1), 0.0)
    assert eng.queue("A") == [b, a]
    ds = run(eng, 0.0)
    assert [d.job_id for d in ds] == [b]   # a (4 GPUs) no longer fits A's quota of 4
