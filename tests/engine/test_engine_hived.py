"""Engine behaviour under HiveD's cell allocator (core/allocator.py)."""
import pytest
from engine_helpers import fig2_spec, kinds, req, run

from hived.core.allocator import Allocator
from hived.core.engine import Engine
from hived.core.jobs import JobState
from hived.core.spec import load_spec


def hived_engine(spec_dict, binding="dynamic"):
    return Engine(Allocator(load_spec(spec_dict), binding=binding), preemption_policy="none")


def _figure2_prefix(eng, allow):
    """The sequence of HiveD (earlier version) Figure 2: A fills a node with four 1-GPU jobs, two end,
    A asks 2 GPUs (its two free GPUs sit on different PCIe switches)."""
    a = [eng.submit(req("A", 1, allow_opportunistic=allow), 1.0) for _ in range(4)]
    ds = run(eng, 1.0)
    assert len(ds) == 4 and {d.placement.pods[0].node for d in ds} == {"node1"}   # one cell of A
    eng.on_finished(a[1], 2.0, 0)
    eng.on_finished(a[3], 2.0, 0)
    a5 = eng.submit(req("A", 2, allow_opportunistic=allow), 2.0)
    return a5, run(eng, 2.0)


@pytest.mark.parametrize("binding", ["dynamic", "static"])
def test_figure2_no_anomaly_under_hived(binding):
    """Under HiveD A's 2-GPU job stays inside A's cells (it waits), so B's 4-GPU
    job gets B's node at once: B's quota is really B's (no sharing anomaly)."""
    eng = hived_engine(fig2_spec(), binding)
    a5, ds = _figure2_prefix(eng, allow=False)
    assert ds == [] and eng.job(a5).state is JobState.QUEUED
    b1 = eng.submit(req("B", 4, user="bob"), 3.0)
    ds = run(eng, 3.0)
    assert kinds(ds) == [("start", b1)] and ds[0].placement.pods[0].node == "node2"
    assert eng.job(b1).state is JobState.RUNNING
    eng.alloc.check_invariants()


def test_figure2_opportunistic_borrower_is_preempted_for_the_owner():
    """If A's job may run opportunistically it borrows node2, and B's guaranteed
    job preempts it (strict priority) and starts when it is gone."""
    eng = hived_engine(fig2_spec())
    a5, ds = _figure2_prefix(eng, allow=True)
    assert kinds(ds) == [("start", a5)] and ds[0].placement.opportunistic and ds[0].placement.pods[0].node == "node2"
    b1 = eng.submit(req("B", 4, user="bob"), 3.0)
    ds = run(eng, 3.0)
    assert kinds(ds) == [("preempt", a5)]
    assert eng.job(b1).state is JobState.PLACED and eng.job(b1).waiting_for == [a5]
    eng.on_preempted(a5, 3.0)
    ds = run(eng, 3.0)
    assert ("start", b1) in kinds(ds)
    assert eng.job(a5).state is JobState.QUEUED and eng.job(a5).preemptions == 1
    eng.alloc.check_invariants()


def test_restore_rebinds_running_jobs_through_the_public_restore():
    """Service restart under HiveD: running guaranteed and opportunistic jobs get
    their exact cells back, queued ones their queue place; a conflicting record is
    refused without changing anything."""
    import json

    from hived.core.engine import JobRecord
    eng = hived_engine(fig2_spec())
    g = eng.submit(req("A", 2), 0.0)
    o = eng.submit(req("A", 4, allow_opportunistic=True), 0.0)     # over A's quota: borrows node2
    q = eng.submit(req("A", 4), 0.0)                                # waits for A's node
    run(eng, 0.0)
    assert eng.job(o).placement.opportunistic and eng.job(q).state is JobState.QUEUED
    recs = [JobRecord.from_dict(json.loads(json.dumps(r.to_dict()))) for r in eng.jobs()]
    fresh = hived_engine(fig2_spec())
    for r in recs:
        fresh.restore(r)
    for jid in (g, o):
        assert fresh.job(jid).state is JobState.RUNNING
        assert fresh.job(jid).placement == eng.job(jid).placement
        assert sorted(fresh.alloc.grant_of(jid).cells) == sorted(eng.alloc.grant_of(jid).cells)
    assert fresh.queue("A") == [q]
    fresh.alloc.check_invariants()
    # B's guaranteed job still preempts the restored opportunistic one
    b = fresh.submit(req("B", 4, user="bob"), 1.0)
    assert kinds(run(fresh, 1.0)) == [("preempt", o)]
    # a record whose GPUs are taken cannot be restored, and leaves no trace
    clash = JobRecord.from_dict({**recs[0].to_dict(), "job_id": "other"})
    with pytest.raises(Exception, match="other"):
        fresh.restore(clash)
    assert "other" not in {r.job_id for r in fresh.jobs()}
    fresh.alloc.check_invariants()
    assert fresh.job(b).state is JobState.PLACED
