"""LRTP and RAND, the PreemptionPolicy hooks over a ClusterView, and the combined order."""
import random
from types import SimpleNamespace as NS

import pytest

from hived.core.jobs import JobClass, JobRequest, JobState, PodGroup
from hived.core.policies import lrtp, preemption_order, rand
from hived.core.policies.fitgpp import Candidate, FitGppPolicy, size
from hived.core.policies.lrtp import LRTPPolicy
from hived.core.policies.rand import RandPolicy

CAP = (32.0, 256.0, 8.0)
Q = (8.0, 64.0, 2.0)


def _c(jid, node, rem, demand=Q, pre=0, gp=60.0):
    return Candidate(jid, {node: demand}, size(demand, CAP), gp, pre, rem)


def test_lrtp_longest_remaining_first_until_it_fits():
    cands = [_c("long", "n1", 500), _c("mid", "n2", 300), _c("short", "n2", 10), _c("n2b", "n2", 200)]
    free = {"n1": (0.0, 0.0, 0.0), "n2": (0.0, 0.0, 0.0)}
    te = (8.0, 64.0, 4.0)  # needs two Q-sized jobs on one node
    ch = lrtp.choose([te], cands, free)
    # long (n1) alone is not enough; mid frees 2 on n2; n2b completes 4 on n2
    assert ch.victims == ["long", "mid", "n2b"]
    assert "longest remaining" in ch.reason


def test_lrtp_respects_cap_and_refuses_in_vain():
    cands = [_c("long", "n1", 500, pre=1), _c("mid", "n1", 300)]
    free = {"n1": (8.0, 64.0, 0.0)}
    assert lrtp.choose([(8.0, 64.0, 2.0)], cands, free).victims == ["mid"]
    ch = lrtp.choose([(8.0, 64.0, 6.0)], cands, free)
    assert ch.victims == [] and "still not make room" in ch.reason


def test_rand_is_seeded_and_stops_once_it_fits():
    cands = [_c(f"j{i}", f"n{i % 4}", 0) for i in range(16)]
    free = {f"n{i}": (0.0, 0.0, 0.0) for i in range(4)}
    te = (8.0, 64.0, 4.0)
    a = rand.choose([te], cands, free, rng=random.Random(7)).victims
    b = rand.choose([te], cands, free, rng=random.Random(7)).victims
    assert a == b and len(a) >= 2
    # stops at the first moment some node has 4 free GPUs
    per_node = {}
    for v in a[:-1]:
        n = f"n{int(v[1:]) % 4}"
        per_node[n] = per_node.get(n, 0) + 1
    assert max(per_node.values(), default=0) < 2
    assert len({tuple(rand.choose([te], cands, free, rng=random.Random(s)).victims) for s in range(10)}) > 1


# --- the hooks, fed the documented ClusterView / JobRecord shapes -------------------

def _node(gf, cf, mf):
    return NS(chain="FG", gpus_total=8, gpus_free=gf, cpus_total=32, cpus_free=cf,
              memory_total_gb=256, memory_free_gb=mf)


def _rec(jid, cls, gpus, grace=0.0, pre=0, cpus=None, mem=None, duration=None, started=None):
    req = JobRequest(user="u", vc="vc0", job_class=cls, groups=[PodGroup(1, gpus, cpus=cpus, memory_gb=mem)],
                     grace_period=grace, duration=duration)
    return NS(job_id=jid, request=req, preemptions=pre, state=JobState.RUNNING, started=started)


def _view():
    # n1: jobs a and c (4 GPUs, 16 CPUs, 128 GB each), nothing free.
    # n2: job b (2 GPUs, 8 CPUs, 128 GB); 6 GPUs and 24 CPUs free but no RAM.
    return NS(nodes={"n1": _node(0, 0, 0), "n2": _node(6, 24, 0)},
              usage={"a": {"n1": (4, 16, 128)}, "b": {"n2": (2, 8, 128)}, "c": {"n1": (4, 16, 128)}})


def test_fitgpp_hook_reads_view_and_defaults_cpu_ram_from_the_node_share():
    te = _rec("t", JobClass.TE, 4)          # defaults: 16 CPUs, 128 GB (half a node)
    cands = [_rec("a", JobClass.BE, 4, grace=300), _rec("b", JobClass.BE, 2, grace=0),
             _rec("c", JobClass.BE, 4, grace=600)]
    victims, reason = FitGppPolicy().choose(te, cands, _view(), now=0.0)
    # b has the lowest score (no grace) and frees 128 GB on n2 where 6 GPUs are free
    assert victims == ["b"] and "fitgpp: preempt b" in reason
    te_ram = _rec("t", JobClass.TE, 4, mem=100.0)   # explicit RAM is used as given
    assert FitGppPolicy().choose(te_ram, cands, _view(), 0.0)[0] == ["b"]
    # 8 GPUs -> 32 CPUs, 256 GB by default: no single job frees that; only a and c together (n1)
    te_gpu = _rec("t", JobClass.TE, 8)
    v, r = FitGppPolicy(seed=3).choose(te_gpu, cands, _view(), 0.0)
    assert set(v) >= {"a", "c"} and "fallback" in r


def test_lrtp_hook_uses_remaining_time_from_the_record():
    te = _rec("t", JobClass.TE, 2)
    cands = [_rec("a", JobClass.BE, 4, duration=1000, started=0), _rec("c", JobClass.BE, 4, duration=5000, started=0)]
    view = NS(nodes={"n1": _node(0, 0, 0)}, usage={"a": {"n1": (4, 16, 128)}, "c": {"n1": (4, 16, 128)}})
    assert LRTPPolicy().choose(te, cands, view, now=100.0)[0] == ["c"]
    assert RandPolicy(seed=1).choose(te, cands, view, now=100.0)[0][0] in ("a", "c")


def test_combined_order_strict_priority_first_then_policy():
    te = _rec("t", JobClass.TE, 4)
    be = _rec("a", JobClass.BE, 4)
    other_vc = _rec("x", JobClass.BE, 4)
    other_vc.request.vc = "vc1"
    capped = _rec("c", JobClass.BE, 4, pre=1)
    preempting = _rec("p", JobClass.BE, 4)
    preempting.state = JobState.PREEMPTING
    running = [be, other_vc, capped, preempting, _rec("t2", JobClass.TE, 1)]
    assert preemption_order.policy_candidates(te, running, cap=1) == [be]
    p = preemption_order.plan(te, opportunistic_victims=["opp2", "opp1"], fits_without_policy=False,
                              running=running, view=_view(), policy=FitGppPolicy())
    assert [s.name for s in p.stages] == [preemption_order.STAGE_STRICT, preemption_order.STAGE_POLICY]
    assert p.victims[:2] == ["opp1", "opp2"] and p.victims[2:] == ["a"]
    # once the opportunistic jobs leave room, FitGpp is not asked at all
    p2 = preemption_order.plan(te, opportunistic_victims=["opp1"], fits_without_policy=True,
                               running=running, view=_view(), policy=FitGppPolicy())
    assert p2.victims == ["opp1"]
    # a BE job never gets to preempt BE jobs
    p3 = preemption_order.plan(_rec("b2", JobClass.BE, 4), fits_without_policy=False, running=running,
                               view=_view(), policy=FitGppPolicy())
    assert p3.victims == []


@pytest.mark.parametrize("pre,vic,same,ok", [
    (JobClass.TE, JobClass.BE, True, True), (JobClass.TE, JobClass.BE, False, False),
    (JobClass.BE, JobClass.BE, True, False), (JobClass.TE, JobClass.TE, True, False),
    (JobClass.BE, JobClass.OPPORTUNISTIC, False, True), (JobClass.OPPORTUNISTIC, JobClass.BE, True, False),
])
def test_may_preempt_table(pre, vic, same, ok):
    assert preemption_order.may_preempt(pre, vic, same) is ok


def test_requeue_position_after_te_before_be():
    T, B = JobClass.TE, JobClass.BE
    assert preemption_order.requeue_position([T, T, B, B]) == 2
    assert preemption_order.requeue_position([B, T]) == 0
    assert preemption_order.requeue_position([]) == 0
