"""Random event sequences: the engine's books agree with the allocator's after every step."""
import random

import pytest
from engine_helpers import eight_gpu_spec, quota_engine

from hived.core.engine import RequestError
from hived.core.jobs import Affinity, DecisionKind, JobClass, JobRequest, JobState, PodGroup

HOLD = (JobState.PLACED, JobState.RUNNING, JobState.PREEMPTING)


def check_books(eng):
    eng.alloc.check_invariants()
    bound = {}
    for rec in eng.jobs():
        if rec.state in HOLD:
            assert rec.placement is not None, rec.job_id
            assert eng.alloc.grant_of(rec.job_id) is not None, rec.job_id
            for node, (g, _, _) in eng.view.usage[rec.job_id].items():
                bound[node] = bound.get(node, 0) + g
        else:
            assert rec.job_id not in eng.view.usage and eng.alloc.grant_of(rec.job_id) is None
    for node, st in eng.view.nodes.items():
        assert st.gpus_total - st.gpus_free == bound.get(node, 0)
    for vc in eng.spec.vcs:
        q = eng.queue(vc)
        assert all(eng.job(j).state is JobState.QUEUED for j in q)
        assert len(q) == len(eng.jobs(vc=vc, state="queued"))


@pytest.mark.parametrize("seed", range(12))
def test_random_sequences_keep_books(seed):
    rng = random.Random(seed)
    eng = quota_engine(eight_gpu_spec(4, {"A": 8, "B": 16, "C": 8}),
                       preemption_policy=rng.choice(["none", "fitgpp"]))
    now = 0.0
    preempting = {}
    for _ in range(250):
        now += rng.choice([0.0, 1.0, 5.0, 30.0])
        r = rng.random()
        if r < 0.4:
            vc = rng.choice("ABC")
            g = rng.choice([1, 1, 2, 4, 8])
            pods = 1 if g > 1 else rng.choice([1, 1, 2, 4])
            req = JobRequest(user="u", vc=vc, job_class=rng.choice([JobClass.TE, JobClass.BE, JobClass.OPPORTUNISTIC]),
                             groups=[PodGroup(pods, g)], affinity=rng.choice(list(Affinity)),
                             allow_opportunistic=rng.random() < 0.7, grace_period=rng.choice([0.0, 10.0]))
            try:
                eng.submit(req, now)
            except RequestError:
                pass
        elif r < 0.75:
            running = eng.jobs(state="running")
            if running:
                j = rng.choice(running)
                eng.on_finished(j.job_id, now, rng.choice([0, 0, 0, 1, 137]),
                                rng.choice(["", "NCCL error", "SyntaxError"]))
        elif r < 0.85:
            qd = eng.jobs(state="queued")
            if qd:
                eng.cancel(rng.choice(qd).job_id, now, "u")
        for jid, until in list(preempting.items()):
            if until <= now and eng.job(jid).state is JobState.PREEMPTING:
                eng.on_preempted(jid, now)
                del preempting[jid]
        for d in eng.step(now):
            if d.kind is DecisionKind.START:
                eng.on_started(d.job_id, now)
            elif d.kind is DecisionKind.PREEMPT:
                preempting[d.job_id] = now + d.grace_period
        check_books(eng)
