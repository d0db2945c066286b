"""The minute-tick simulator on a hand-made workload: grace period, head-of-queue requeue, progress kept."""
import pytest

from hived.core.sim import fitgpp_experiment as E
from hived.core.sim.fitgpp_workload import SynthJob

# one node (32 CPUs, 256 GB, 8 GPUs)
JOBS = [
    SynthJob(0, False, 100, 32, 256, 8, 3, 0),   # BE A: the whole node, 100 min, grace 3 min
    SynthJob(1, False, 10, 4, 32, 1, 0, 1),      # BE B: small, queued behind A
    SynthJob(2, True, 5, 4, 32, 4, 0, 5),        # TE T: arrives at minute 5, needs half the node
]


@pytest.mark.parametrize("policy", ["fitgpp", "lrtp", "rand"])
def test_victim_holds_the_node_for_its_grace_then_requeues_at_the_head(policy):
    r = E.simulate(JOBS, policy, nodes=1)
    # T: signal at 5, A leaves at 8 (grace 3), T runs 8-13 -> slowdown 1 + 3/5
    assert r.te_slowdown == [pytest.approx(1.6)]
    # A goes back ahead of B, restarts at 13 with 95 min left (progress kept) and ends at 108;
    # B waits behind it (strict FIFO, no backfill) and ends at 118
    assert r.be_slowdown == [pytest.approx(1 + 8 / 100), pytest.approx(1 + 107 / 10)]
    assert r.intervals_min == [8] and r.preempted_jobs == 1 and r.preemptions == 1
    assert r.makespan_min == 118


def test_fifo_never_preempts_and_te_waits_in_line():
    r = E.simulate(JOBS, "fifo", nodes=1)
    assert r.preemptions == 0 and r.intervals_min == []
    assert r.te_slowdown == [pytest.approx(1 + 95 / 5)]     # starts at 100 with B
    assert r.be_slowdown == [pytest.approx(1.0), pytest.approx(1 + 99 / 10)]


def test_cap_zero_means_no_preemption():
    r = E.simulate(JOBS, "fitgpp", nodes=1, cap=0)
    assert r.preemptions == 0 and r.te_slowdown[0] > 10
