"""AlloXPolicy driving the real Engine (through the GPU-quota allocator, which
speaks the same Allocator contract; the engine plays no favourites)."""
from hived.core.engine import Engine
from hived.core.jobs import DecisionKind, JobClass, JobRequest, PodGroup
from hived.core.policies.allox import AlloXPolicy
from hived.core.quota import QuotaAllocator
from hived.core.sim.cluster import node_spec
from hived.core.spec import load_spec


def engine(policy):
    spec = load_spec(node_spec(1, {"vc": 8}))
    return Engine(QuotaAllocator(spec), queue_policy=policy, preemption_policy="none")


def job(user="u", est=None, gpus=8, cls=JobClass.BE):
    return JobRequest(user=user, vc="vc", job_class=cls, groups=[PodGroup(1, gpus)], estimate=est)


def started(eng, now):
    out = [d.job_id for d in eng.step(now) if d.kind is DecisionKind.START]
    for j in out:
        eng.on_started(j, now)
    return out


def replay(policy):
    eng = engine(policy)
    eng.submit(job(est=50), 0.0, job_id="first")
    assert started(eng, 0.0) == ["first"]
    for jid, est in (("long", 300), ("short", 100), ("mid", 200)):
        eng.submit(job(est=est), 1.0, job_id=jid)
    assert started(eng, 1.0) == []
    order, now = [], 50.0
    running = "first"
    while True:
        eng.on_finished(running, now, 0)
        nxt = started(eng, now)
        if not nxt:
            return order
        order += nxt
        running = nxt[0]
        now += 10


def test_allox_starts_shortest_estimate_first_where_fifo_keeps_arrival_order():
    assert replay("allox") == ["short", "mid", "long"]
    assert replay("fifo") == ["long", "short", "mid"]


def test_alpha_lets_the_user_with_less_progress_go_first():
    for alpha, expect in ((0.5, "bob-long"), (1.0, "alice-short")):
        eng = engine(AlloXPolicy(alpha=alpha))
        eng.submit(job("alice", 500, gpus=4), 0.0, job_id="alice-running")
        eng.submit(job("bob", 50, gpus=4), 0.0, job_id="bob-running")
        assert sorted(started(eng, 0.0)) == ["alice-running", "bob-running"]
        eng.submit(job("alice", 10, gpus=4), 1.0, job_id="alice-short")
        eng.submit(job("bob", 500, gpus=4), 1.0, job_id="bob-long")
        assert started(eng, 1.0) == []
        # bob's job ends: alice still holds half the GPUs, bob none
        eng.on_finished("bob-running", 2.0, 0)
        assert started(eng, 2.0) == [expect], alpha
