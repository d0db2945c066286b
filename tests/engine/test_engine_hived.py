"""Engine behaviour under HiveD's cell allocator (core/allocator.py)."""
import pytest

from engine_helpers import fig2_spec, kinds, req, run
from hived.core.allocator import Allocator
from hived.core.engine import Engine
from hived.core.jobs import DecisionKind, JobState
from hived.core.spec import load_spec


def hived_engine(spec_dict, binding="dynamic"):
    return Engine(Allocator(load_spec(spec_dict), binding=binding), preemption_policy="none")


def _figure2_prefix(eng, allow):
    """The sequence of 000 Figure 2: A fills a node with four 1-GPU jobs, two end,
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
