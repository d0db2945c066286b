"""FitGppPolicy's numpy path (fitgpp_vector) agrees with the hand-checked tuple code.

Random clusters in the engine's own ClusterView and JobRecord classes; the
policy (vector path, cache warm across calls) must name the same victim as
``fitgpp.choose`` on the same inputs, including after jobs finish and start.
"""
import random

import pytest

from hived.core.engine_records import JobRecord
from hived.core.engine_view import ClusterView
from hived.core.jobs import JobClass, JobRequest, JobState, PodGroup
from hived.core.policies import fitgpp
from hived.core.policies.fitgpp import FitGppPolicy, candidates_from, node_vectors
from hived.core.policies.lrtp import LRTPPolicy, remaining_from_record


def _cluster(rng, nodes=30, jobs=120, chains=("A",)):
    view = ClusterView()
    recs = []
    for i in range(nodes):
        view.add_node(f"n{i}", chains[i % len(chains)], 8, 32, 256)
    k = 0
    for _ in range(jobs):
        node = f"n{rng.randrange(nodes)}"
        st = view.nodes[node]
        if st.gpus_free < 1:
            continue
        g = rng.randint(1, int(st.gpus_free))
        c = min(st.cpus_free, rng.choice([1, 2, 4, 8, 16]))
        m = min(st.memory_free_gb, rng.choice([8, 16, 32, 64, 128]))
        jid = f"b{k:03d}"
        k += 1
        view.bind(jid, {node: (g, c, m)}, guaranteed=True)
        req = JobRequest(user="u", vc="vc0", job_class=JobClass.BE, groups=[PodGroup(1, g, cpus=c, memory_gb=m)],
                         grace_period=rng.choice([0, 30, 60, 120, 600]))
        recs.append(JobRecord(jid, req, state=JobState.RUNNING, preemptions=int(rng.random() < 0.2),
                              pod_demands=[(float(c), float(m), float(g))], pod_gpus=[g]))
    return view, recs


def _te(rng, chain=None):
    g = rng.choice([1, 2, 4, 8])
    req = JobRequest(user="u", vc="vc0", job_class=JobClass.TE, groups=[PodGroup(1, g)], chain=chain)
    return JobRecord("te", req, pod_demands=[(4.0 * g, 32.0 * g, float(g))], pod_gpus=[g])


def _reference(te, recs, view, s=fitgpp.DEFAULT_S, cap=1):
    free, capacity = node_vectors(view)
    cands = candidates_from(recs, view, capacity, 0.0)
    return fitgpp.choose([te.pod_demands[0]], cands, free, s=s, cap=cap)


@pytest.mark.parametrize("seed", range(6))
def test_vector_path_names_the_same_victim(seed):
    rng = random.Random(seed)
    view, recs = _cluster(rng)
    pol = FitGppPolicy(seed=seed, cap=1)
    fits = 0
    for _ in range(25):
        te = _te(rng)
        ref = _reference(te, recs, view)
        victims, reason = pol.choose(te, recs, view, 0.0)
        if not ref.fallback:
            assert victims == ref.victims and reason == ref.reason
            fits += bool(victims)
        else:
            assert "fallback" in reason and "no single BE job fits" in reason
        # churn: a job finishes, another starts (new usage objects), the cache must follow
        gone = recs.pop(rng.randrange(len(recs)))
        view.unbind(gone.job_id, guaranteed=True)
        node = gone.placement.pods[0].node if gone.placement else next(iter(view.nodes))
        st = view.nodes[node]
        if st.gpus_free >= 1:
            g = int(st.gpus_free)
            view.bind(gone.job_id + "x", {node: (g, 1.0, 8.0)}, guaranteed=True)
            req = JobRequest(user="u", vc="vc0", job_class=JobClass.BE, groups=[PodGroup(1, g, cpus=1, memory_gb=8)])
            recs.append(JobRecord(gone.job_id + "x", req, state=JobState.RUNNING,
                                  pod_demands=[(1.0, 8.0, float(g))], pod_gpus=[g]))
    assert fits > 0


def test_chain_restricts_eq2_to_the_te_jobs_chain():
    view = ClusterView()
    view.add_node("a0", "A", 8, 32, 256)
    view.add_node("b0", "B", 8, 32, 256)
    view.bind("small_a", {"a0": (8, 32, 256)}, guaranteed=True)
    view.bind("tiny_b", {"b0": (8, 32, 256)}, guaranteed=True)
    recs = [JobRecord("small_a", JobRequest(user="u", vc="vc0", job_class=JobClass.BE, grace_period=600),
                      state=JobState.RUNNING, pod_demands=[(32.0, 256.0, 8.0)]),
            JobRecord("tiny_b", JobRequest(user="u", vc="vc0", job_class=JobClass.BE, grace_period=0),
                      state=JobState.RUNNING, pod_demands=[(32.0, 256.0, 8.0)])]
    te = JobRecord("te", JobRequest(user="u", vc="vc0", chain="A"), pod_demands=[(4.0, 32.0, 1.0)])
    # without the chain, tiny_b (grace 0) wins; on chain A only small_a can make room
    assert FitGppPolicy().choose(JobRecord("te2", JobRequest(user="u", vc="vc0"), pod_demands=[(4.0, 32.0, 1.0)]),
                                 recs, view, 0.0)[0] == ["tiny_b"]
    assert FitGppPolicy().choose(te, recs, view, 0.0)[0] == ["small_a"]
    # the tuple path (a gang TE job) obeys the chain as well
    gang = JobRecord("g", JobRequest(user="u", vc="vc0", chain="A", groups=[PodGroup(2, 1)]),
                     pod_demands=[(4.0, 32.0, 1.0)] * 2)
    assert FitGppPolicy().choose(gang, recs, view, 0.0)[0] == ["small_a"]


def test_multi_node_candidates_use_the_tuple_path():
    view = ClusterView()
    for n in ("n0", "n1"):
        view.add_node(n, "A", 8, 32, 256)
    view.bind("wide", {"n0": (4, 16, 128), "n1": (4, 16, 128)}, guaranteed=True)
    view.bind("narrow", {"n0": (4, 16, 128)}, guaranteed=True)
    view.bind("other", {"n1": (4, 16, 128)}, guaranteed=True)
    mk = lambda j, gp, pods: JobRecord(j, JobRequest(user="u", vc="vc0", job_class=JobClass.BE, grace_period=gp),  # noqa: E731
                                       state=JobState.RUNNING, pod_demands=pods)
    recs = [mk("wide", 0, [(16.0, 128.0, 4.0)] * 2), mk("narrow", 300, [(16.0, 128.0, 4.0)]),
            mk("other", 300, [(16.0, 128.0, 4.0)])]
    te = JobRecord("te", JobRequest(user="u", vc="vc0"), pod_demands=[(16.0, 128.0, 4.0)])
    victims, reason = FitGppPolicy().choose(te, recs, view, 0.0)
    assert victims == ["wide"] and "fits alone" in reason


def test_empty_candidates_and_name():
    pol = FitGppPolicy()
    assert pol.name == "fitgpp" and LRTPPolicy().name == "lrtp"
    assert pol.choose(_te(random.Random(0)), [], ClusterView(), 0.0) == ([], "fitgpp: no running BE job to preempt")


def test_lrtp_remaining_counts_the_current_run():
    req = JobRequest(user="u", vc="vc0", job_class=JobClass.BE, duration=1000.0)
    rec = JobRecord("b", req, state=JobState.RUNNING, started=400.0, run_time=300.0)
    # 300 s in earlier runs, 100 s in this one
    assert remaining_from_record(rec, 500.0) == pytest.approx(600.0)
    rec.state = JobState.QUEUED
    assert remaining_from_record(rec, 500.0) == pytest.approx(700.0)
    assert remaining_from_record(JobRecord("x", JobRequest(user="u", vc="vc0")), 0.0) == 0.0


def _full_cluster(rng, nodes=12):
    """Every node's 8 GPUs split at random among 1-4 BE jobs: an 8-GPU TE job never fits alone
    beside a job, so only nodes held by one job satisfy eq. 4 and the rest need the fallback."""
    view = ClusterView()
    recs = []
    for i in range(nodes):
        node = f"n{i:02d}"
        view.add_node(node, "A", 8, 32, 256)
        cnt = rng.randint(2, 4)
        split = [1] * cnt
        for _ in range(8 - cnt):
            split[rng.randrange(cnt)] += 1
        for g in split:
            jid = f"b{len(recs):03d}"
            view.bind(jid, {node: (g, 4 * g, 32 * g)}, guaranteed=True)
            req = JobRequest(user="u", vc="vc0", job_class=JobClass.BE, groups=[PodGroup(1, g)],
                             grace_period=rng.choice([0, 30, 60, 120, 600]))
            recs.append(JobRecord(jid, req, state=JobState.RUNNING, preemptions=int(rng.random() < 0.3),
                                  pod_demands=[(4.0 * g, 32.0 * g, float(g))], pod_gpus=[g]))
    return view, recs


@pytest.mark.parametrize("seed", range(5))
def test_vector_fallback_keeps_the_papers_rule(seed):
    """The numpy fallback: one node, a first victim drawn at random, then that node's other
    eligible jobs in ascending eq. 3 score, stopping as soon as the TE job fits there."""
    rng = random.Random(seed)
    view, recs = _full_cluster(rng)
    te = JobRecord("te", JobRequest(user="u", vc="vc0"), pod_demands=[(32.0, 256.0, 8.0)], pod_gpus=[8])
    ref = _reference(te, recs, view)
    assert ref.fallback
    pol = FitGppPolicy(seed=seed, cap=1)
    free, capacity = node_vectors(view)
    cands = {c.job_id: c for c in candidates_from(recs, view, capacity, 0.0)}
    score = dict(zip(cands, fitgpp.scores([c.size for c in cands.values()],
                                          [c.grace_period for c in cands.values()])))
    firsts = set()
    for _ in range(20):
        victims, reason = pol.choose(te, recs, view, 0.0)
        assert "fallback" in reason and "no single BE job fits" in reason and ", ".join(victims) in reason
        nodes = {n for v in victims for n in cands[v].usage}
        assert len(nodes) == 1
        (node,) = nodes
        assert all(cands[v].preemptions < 1 for v in victims)
        rest = victims[1:]
        assert rest == sorted(rest, key=lambda v: (score[v], v))
        # it fits after the last victim, not before it
        room = fitgpp.Room([te.pod_demands[0]], free)
        for k, v in enumerate(victims):
            room.add(cands[v].usage)
            assert fitgpp.fits(te.pod_demands[0], (0.0, 0.0, 0.0), room.avail(node)) == (k == len(victims) - 1)
        firsts.add(victims[0])
    assert len(firsts) > 1   # the first victim is drawn at random


def test_vector_fallback_says_when_nothing_can_make_room():
    view = ClusterView()
    view.add_node("n0", "A", 8, 32, 256)
    view.bind("capped", {"n0": (4, 16, 128)}, guaranteed=True)
    view.bind("ok", {"n0": (4, 16, 128)}, guaranteed=True)
    mk = lambda j, p: JobRecord(j, JobRequest(user="u", vc="vc0", job_class=JobClass.BE),  # noqa: E731
                                state=JobState.RUNNING, preemptions=p, pod_demands=[(16.0, 128.0, 4.0)])
    te = JobRecord("te", JobRequest(user="u", vc="vc0"), pod_demands=[(32.0, 256.0, 8.0)], pod_gpus=[8])
    victims, reason = FitGppPolicy(cap=1).choose(te, [mk("capped", 1), mk("ok", 0)], view, 0.0)
    assert victims == [] and "would still not make room" in reason
    victims, reason = FitGppPolicy(cap=1).choose(te, [mk("capped", 1), mk("ok", 1)], view, 0.0)
    assert victims == [] and "every running BE job reached the preemption cap P=1" in reason
