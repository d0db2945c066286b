"""Backfill with a reservation for a blocked VC head (core/engine_backfill.py, docs/engine.md)."""
from __future__ import annotations

import heapq
import random

import pytest
from engine_helpers import eight_gpu_spec, fig2_spec, kinds, quota_engine, req, run

from hived.core.allocator import Allocator
from hived.core.engine import Engine, EngineConfig
from hived.core.exchange import Cells, give_back
from hived.core.jobs import Affinity, DecisionKind, JobClass, JobState, PodGroup
from hived.core.spec import load_spec


def test_a_head_that_no_longer_fits_its_vc_after_a_loan_lets_later_jobs_start():
    """Issue 26, item 3: the borrower's gang goes back to the head of a VC that now holds
    one node; the VC's later job starts on that node instead of waiting for good."""
    alloc = Allocator(load_spec(fig2_spec()))
    eng = Engine(alloc, preemption_policy="none")
    alloc.transfer("A", "B", "NODE", 3, 1)                 # B borrows A's node
    eng.on_capacity_changed(["A", "B"], [], 0.0)
    gang = eng.submit(req("B", 4, pods=2, cls=JobClass.BE, user="bob"), 0.0, job_id="gang")
    assert kinds(run(eng, 0.0)) == [("start", gang)]
    down = give_back(alloc, "B", "A", Cells("NODE", 3, 1))   # the loan ends under the gang
    eng.on_capacity_changed(["A", "B"], down, 10.0)
    eng.submit(req("A", 4), 10.0, job_id="lender")          # the lender takes its node back
    assert kinds(run(eng, 10.0)) == [("preempt", "gang")]
    eng.on_preempted("gang", 11.0)
    assert kinds(run(eng, 11.0)) == [("start", "lender")]
    assert eng.head("B", 11.0).job_id == "gang"
    assert "cannot fit its VC's current cells" in eng.job("gang").wait_reason
    eng.submit(req("B", 2, cls=JobClass.BE, user="bob"), 12.0, job_id="later")
    assert kinds(run(eng, 12.0)) == [("start", "later")]
    assert not eng.job("later").opportunistic and eng.job("gang").state is JobState.QUEUED
    eng.submit(req("B", 4, cls=JobClass.BE, user="bob"), 13.0, job_id="wide")
    assert run(eng, 13.0) == []
    assert "behind gang" in eng.job("wide").wait_reason and "cannot fit" in eng.job("wide").wait_reason
    alloc.check_invariants()


def _reserved(estimates="hint"):
    """VC A (8 GPUs, quota allocator): r runs on 4 GPUs until t=100 by its estimate; big (8 GPUs)
    heads A's queue from t=1."""
    eng = quota_engine(eight_gpu_spec(2, {"A": 8, "B": 8}), config=EngineConfig(backfill_estimates=estimates))
    eng.submit(req("A", 4, estimate=100.0), 0.0, job_id="r")
    run(eng, 0.0)
    eng.submit(req("A", 8), 1.0, job_id="big")
    return eng


def test_later_jobs_start_when_they_end_before_the_reservation_and_wait_when_they_would_delay_it():
    eng = _reserved()
    eng.submit(req("A", 2, estimate=50.0), 1.0, job_id="short")     # ends at 51 <= 100
    eng.submit(req("A", 2, estimate=500.0), 1.0, job_id="long")     # would hold 2 GPUs past 100
    eng.submit(req("A", 1), 1.0, job_id="unknown")                  # no estimate: preemptible
    assert kinds(run(eng, 1.0)) == [("start", "short"), ("start", "unknown")]
    assert eng.job("long").state is JobState.QUEUED
    assert "after the reservation of big at t=100" in eng.job("long").wait_reason
    assert "holds a reservation" in eng.job("big").wait_reason and "t=100" in eng.job("big").wait_reason
    eng.on_finished("short", 51.0, 0)
    assert run(eng, 51.0) == []                                      # long still cannot pass big
    eng.on_finished("r", 100.0, 0)
    assert kinds(run(eng, 100.0)) == [("preempt", "unknown")]        # big takes its GPU back
    eng.on_preempted("unknown", 100.0)
    assert kinds(run(eng, 100.0)) == [("start", "big")]
    assert eng.queue("A") == ["unknown", "long"]                     # the victim requeued behind big
    assert eng.job("unknown").preemptions == 1


def test_jobs_fitting_the_gpus_the_head_will_not_need_start_and_are_not_preempted():
    eng = quota_engine(eight_gpu_spec(2, {"A": 8, "B": 8}), config=EngineConfig(soft_wait=0.0))
    eng.submit(req("A", 4, estimate=100.0), 0.0, job_id="r")
    run(eng, 0.0)
    # six 1-GPU pods anywhere: GPU counts decide where it fits; at t=100 8 free, 2 to spare
    eng.submit(req("A", 1, groups=[PodGroup(6, 1)], affinity=Affinity.SOFT), 1.0, job_id="big")
    eng.submit(req("A", 2, estimate=900.0), 1.0, job_id="spare")
    eng.submit(req("A", 1, estimate=900.0), 1.0, job_id="more")      # the 2 spare GPUs are taken
    assert kinds(run(eng, 1.0)) == [("start", "spare")]
    eng.on_finished("r", 100.0, 0)
    assert kinds(run(eng, 100.0)) == [("start", "big")]
    assert eng.job("spare").state is JobState.RUNNING


def test_with_no_estimates_every_backfilled_job_is_preemptible_and_backfill_can_be_turned_off():
    eng = _reserved(estimates="none")
    eng.submit(req("A", 2, estimate=5.0), 1.0, job_id="a")
    assert kinds(run(eng, 1.0)) == [("start", "a")]
    assert "end times unknown" in eng.job("big").wait_reason
    eng.on_finished("r", 7.0, 0)
    assert kinds(run(eng, 7.0)) == [("preempt", "a")]
    off = quota_engine(eight_gpu_spec(2, {"A": 8, "B": 8}), config=EngineConfig(backfill=False))
    off.submit(req("A", 4), 0.0, job_id="r")
    run(off, 0.0)
    off.submit(req("A", 8), 1.0, job_id="big")
    off.submit(req("A", 1), 1.0, job_id="small")
    assert run(off, 1.0) == [] and "nothing passes it" in off.job("small").wait_reason
    with pytest.raises(ValueError, match="backfill_estimates"):
        quota_engine(eight_gpu_spec(2), config=EngineConfig(backfill_estimates="guess"))


def test_backfill_never_takes_other_vcs_cells_or_runs_opportunistically():
    eng = Engine(fig2_spec(), preemption_policy="none")
    eng.submit(req("A", 4), 0.0, job_id="r")
    run(eng, 0.0)
    eng.submit(req("A", 4), 1.0, job_id="big")
    eng.submit(req("A", 1, allow_opportunistic=True), 1.0, job_id="small")
    assert run(eng, 1.0) == []        # B's node is idle, but backfill stays in A's cells
    assert eng.job("small").state is JobState.QUEUED


# ---------------------------------------------------------------- property: the head never starts later

def _replay(seed: int, estimates: str) -> tuple[dict[str, float], dict[str, float], int, int]:
    """A random single-VC workload of gangs of 1-GPU pods (GPU counts are exact there) replayed
    with the test's own event loop. Returns (job -> start, head -> latest start without backfill
    from the state in which it became the head, preemptions, jobs that passed an earlier one)."""
    rng = random.Random(seed)
    nodes = 2
    total = nodes * 8
    # soft affinity relaxed at once: a gang of 1-GPU pods fits wherever enough GPUs are free
    eng = quota_engine(eight_gpu_spec(nodes, {"A": total}),
                       config=EngineConfig(backfill_estimates=estimates, soft_wait=0.0))
    jobs = []
    t = 0.0
    for k in range(40):
        t += rng.choice((0.0, 0.0, 5.0, 20.0))
        dur = float(rng.randint(1, 60))
        jobs.append((t, f"j{k:02d}", rng.choice((1, 1, 2, 3, 8, 12, 16)), dur))
    dur = {jid: d for _, jid, _, d in jobs}
    gpus = {jid: g for _, jid, g, _ in jobs}
    ran = {jid: 0.0 for jid in dur}
    events: list[tuple[float, int, str, str]] = []      # (time, seq, "end" | "gone", job)
    seq = 0
    running: dict[str, tuple[float, int]] = {}          # job -> (start of this run, token)
    start: dict[str, float] = {}
    bound: dict[str, float] = {}
    preemptions = 0
    i = 0
    while i < len(jobs) or events:
        now = min(([jobs[i][0]] if i < len(jobs) else []) + ([events[0][0]] if events else []))
        while i < len(jobs) and jobs[i][0] <= now:
            _, jid, g, d = jobs[i]
            eng.submit(req("A", 1, groups=[PodGroup(g, 1)], estimate=d, affinity=Affinity.SOFT), now, job_id=jid)
            i += 1
        while events and events[0][0] <= now:
            _, _, kind, jid = heapq.heappop(events)
            if jid not in running:
                continue
            began, _ = running.pop(jid)
            ran[jid] += now - began
            if kind == "end":
                eng.on_finished(jid, now, 0)
            else:
                eng.on_preempted(jid, now)
        for d in eng.step(now):
            if d.kind is DecisionKind.START:
                eng.on_started(d.job_id, now)
                start.setdefault(d.job_id, now)
                running[d.job_id] = (now, seq)
                heapq.heappush(events, (now + dur[d.job_id] - ran[d.job_id], seq, "end", d.job_id))
                seq += 1
            elif d.kind is DecisionKind.PREEMPT:
                preemptions += 1
                heapq.heappush(events, (now, seq, "gone", d.job_id))   # grace period 0
                seq += 1
        head = eng.head("A", now)
        if head is not None and head.state is JobState.QUEUED and head.job_id not in bound:
            # strict FIFO from this state: nothing else starts; the head waits for the running jobs
            leaving = {e[3] for e in events if e[2] == "gone"}
            ends = sorted((now if jid in leaving else b + dur[jid] - ran[jid], gpus[jid])
                          for jid, (b, _) in running.items())
            free = total - sum(g for _, g in ends)
            when = now
            for end, g in ends:
                if free >= gpus[head.job_id]:
                    break
                free += g
                when = end
            bound[head.job_id] = when
    order = sorted(start, key=lambda j: (start[j], j))
    passed = sum(1 for a in order for b in dur if b < a and start.get(b, 1e18) > start[a])
    assert set(start) == set(dur)                        # everything ran
    return start, bound, preemptions, passed


@pytest.mark.parametrize("estimates", ["hint", "none"])
def test_property_a_head_never_starts_later_than_strict_fifo_would_start_it(estimates):
    passed_any = 0
    for seed in range(25):
        start, bound, preemptions, passed = _replay(seed, estimates)
        late = {h: (start[h], b) for h, b in bound.items() if start[h] > b + 1e-9}
        assert late == {}, f"seed {seed}: heads started after their strict-FIFO time: {late}"
        if estimates == "hint":
            assert preemptions == 0, f"seed {seed}: exact estimates never need a backfilled job preempted"
        passed_any += passed
    assert passed_any > 0       # backfill did let later jobs pass


def test_a_whole_node_head_reserves_a_node_and_a_long_job_starts_on_another():
    """Issue 28: cell shapes, not counts, decide where a one-pod 8-GPU head fits, so it reserves
    the node that frees first (node 0 at t=50). A long job starts now on the other node, not on
    big's; before, it waited although node 1 had room, and those GPUs idled."""
    eng = quota_engine(eight_gpu_spec(2, {"A": 16}))
    eng.submit(req("A", 8, estimate=50.0), 0.0, job_id="r1")      # node 0 until t=50
    eng.submit(req("A", 2, estimate=500.0), 0.0, job_id="r2")     # node 1 until t=500
    run(eng, 0.0)
    eng.submit(req("A", 8), 1.0, job_id="big")
    eng.submit(req("A", 1, estimate=900.0), 1.0, job_id="long")
    eng.submit(req("A", 1, estimate=40.0), 1.0, job_id="short")
    assert kinds(run(eng, 1.0)) == [("start", "long"), ("start", "short")]
    assert eng.job("long").placement.pods[0].node == eng.job("r2").placement.pods[0].node
    r1_node = eng.job("r1").placement.pods[0].node
    assert f"holds a reservation on its VC's cells (node {r1_node}) from t=50" in eng.job("big").wait_reason
    eng.on_finished("short", 41.0, 0)
    eng.on_finished("r1", 50.0, 0)
    assert kinds(run(eng, 50.0)) == [("start", "big")]           # not a second later than without backfill


def _three_nodes(engine):
    """A's 24 GPUs on 3 nodes: r3 on all 8 GPUs of one node until t=600; r2a and r2b on 4 GPUs
    each of another, until t=30 and t=500; r1 on 4 GPUs of the third until t=50 (4 GPUs free
    there now). big (8 GPUs, one pod) heads the queue from t=1: r1's node frees first, at t=50."""
    eng = engine(eight_gpu_spec(3, {"A": 24}))
    for jid, g, est in (("r3", 8, 600.0), ("r2a", 4, 30.0), ("r2b", 4, 500.0), ("r1", 4, 50.0)):
        eng.submit(req("A", g, estimate=est), 0.0, job_id=jid)
    run(eng, 0.0)
    eng.submit(req("A", 8), 1.0, job_id="big")
    eng.submit(req("A", 1, estimate=900.0), 1.0, job_id="long")
    return eng


@pytest.mark.parametrize("engine", [quota_engine, lambda spec: Engine(load_spec(spec), preemption_policy="none")],
                         ids=["quota", "hived"])
def test_a_long_job_never_takes_the_node_a_whole_node_head_reserved(engine):
    """The only free GPUs are on node 0, which big reserved: long waits though GPUs are free
    (it would hold one past t=50), starts on node 1 once r2a leaves, and big starts at t=50."""
    eng = _three_nodes(engine)
    node = {j: eng.job(j).placement.pods[0].node for j in ("r1", "r2a", "r2b", "r3")}
    assert node["r2a"] == node["r2b"] and len({node["r1"], node["r2a"], node["r3"]}) == 3
    r1_node = node["r1"]
    assert run(eng, 1.0) == []
    assert eng.job("long").state is JobState.QUEUED
    eng.on_finished("r2a", 30.0, 0)
    assert kinds(run(eng, 30.0)) == [("start", "long")]
    assert eng.job("long").placement.pods[0].node != r1_node
    eng.on_finished("r1", 50.0, 0)
    assert kinds(run(eng, 50.0)) == [("start", "big")]
    assert eng.job("big").placement.pods[0].node == r1_node


def test_time_limits_bound_end_times_when_no_estimate_exists():
    """Issue 28: with no estimates, a run's time limit is an upper bound of its end. r holds 4 of
    A's 8 GPUs with a limit of 99 s from t=1, so big's reservation is at t=100; a later job whose
    limit ends it by then starts as an ordinary job, one whose limit ends it later waits, and
    one with neither estimate nor limit starts as a job big may preempt."""
    eng = quota_engine(eight_gpu_spec(2, {"A": 8, "B": 8}))
    eng.submit(req("A", 4, time_limit=99.0), 1.0, job_id="r")
    run(eng, 1.0)
    eng.submit(req("A", 8), 1.0, job_id="big")
    eng.submit(req("A", 1, time_limit=50.0), 1.0, job_id="limited")           # ends by 51
    eng.submit(req("A", 1, estimate=500.0, time_limit=60.0), 1.0, job_id="capped")  # the limit is earlier
    eng.submit(req("A", 1, time_limit=500.0), 1.0, job_id="late")             # could run past 100
    eng.submit(req("A", 1), 1.0, job_id="unknown")
    assert kinds(run(eng, 1.0)) == [("start", "limited"), ("start", "capped"), ("start", "unknown")]
    assert eng.job("late").state is JobState.QUEUED
    assert "after the reservation of big at t=100" in eng.job("late").wait_reason
    marks = eng._backfill.preemptible.get("A", {})
    assert "unknown" in marks and "limited" not in marks and "capped" not in marks


def test_a_time_limit_longer_than_the_estimate_does_not_replace_it():
    eng = quota_engine(eight_gpu_spec(2, {"A": 8, "B": 8}))
    eng.submit(req("A", 4, estimate=100.0, time_limit=10_000.0), 0.0, job_id="r")
    run(eng, 0.0)
    eng.submit(req("A", 8), 1.0, job_id="big")
    eng.submit(req("A", 2, estimate=50.0, time_limit=5_000.0), 1.0, job_id="short")
    assert kinds(run(eng, 1.0)) == [("start", "short")]
    assert "t=100" in eng.job("big").wait_reason



def test_a_job_off_the_reserved_node_still_leaves_the_vc_the_gpus_its_head_needs():
    """GPU quotas A 8, B 16 on three nodes: r1 holds 4 of A's GPUs on one node until t=50; B's
    b1 fills the second node and b2 takes 6 GPUs of the third. big (8 GPUs) reserves r1's
    node at t=50, when A has exactly 8 GPUs free: a long 1-GPU job of A may not start on the
    third node either (2 GPUs free there), or big would find 7 at t=50."""
    eng = quota_engine(eight_gpu_spec(3, {"A": 8, "B": 16}))
    eng.submit(req("A", 4, estimate=50.0), 0.0, job_id="r1")
    eng.submit(req("B", 8, estimate=900.0), 0.0, job_id="b1")
    eng.submit(req("B", 6, estimate=900.0), 0.0, job_id="b2")
    run(eng, 0.0)
    assert len({eng.job(j).placement.pods[0].node for j in ("r1", "b1", "b2")}) == 3
    eng.submit(req("A", 8), 1.0, job_id="big")
    eng.submit(req("A", 1, estimate=900.0), 1.0, job_id="long")
    assert run(eng, 1.0) == []
    assert "t=50" in eng.job("big").wait_reason
    eng.on_finished("r1", 50.0, 0)
    assert kinds(run(eng, 50.0)) == [("start", "big")]


# ------------------------------------------- property: whole-node heads on HiveD cells

def _replay_nodes(seed: int) -> tuple[dict[str, float], dict[str, float], int]:
    """A random single-VC workload on HiveD cells (3 nodes of 8 GPUs) mixing gangs of 1-GPU
    pods (GPU counts are exact for them) with jobs of one or two whole-node pods (free nodes
    are exact for them), exact estimates, replayed with the test's own event loop. Returns
    (job -> start, head -> latest start strict FIFO would give it from the state in which it
    became the head, jobs that passed an earlier one)."""
    rng = random.Random(seed)
    nodes, size = 3, 8
    eng = Engine(load_spec(eight_gpu_spec(nodes, {"A": nodes * size})), preemption_policy="none",
                 config=EngineConfig(soft_wait=0.0))
    jobs = []
    t = 0.0
    for k in range(40):
        t += rng.choice((0.0, 0.0, 5.0, 20.0))
        shape = rng.choice(("g1", "g1", "g2", "g3", "node", "node", "nodes2"))
        jobs.append((t, f"j{k:02d}", shape, float(rng.randint(1, 60))))
    dur = {jid: d for _, jid, _, d in jobs}
    shape_of = {jid: s for _, jid, s, _ in jobs}
    events: list[tuple[float, int, str]] = []
    seq = 0
    running: dict[str, float] = {}      # job -> its end
    start: dict[str, float] = {}
    bound: dict[str, float] = {}
    i = 0
    while i < len(jobs) or events:
        now = min(([jobs[i][0]] if i < len(jobs) else []) + ([events[0][0]] if events else []))
        while i < len(jobs) and jobs[i][0] <= now:
            _, jid, shape, d = jobs[i]
            if shape.startswith("g"):
                r = req("A", 1, groups=[PodGroup(int(shape[1]), 1)], estimate=d, affinity=Affinity.SOFT)
            else:
                r = req("A", size, pods=2 if shape == "nodes2" else 1, estimate=d)
            eng.submit(r, now, job_id=jid)
            i += 1
        while events and events[0][0] <= now:
            _, _, jid = heapq.heappop(events)
            running.pop(jid)
            eng.on_finished(jid, now, 0)
        for d in eng.step(now):
            assert d.kind is DecisionKind.START, f"seed {seed}: {d.kind} {d.job_id}: exact estimates need no preemption"
            eng.on_started(d.job_id, now)
            start[d.job_id] = now
            running[d.job_id] = now + dur[d.job_id]
            heapq.heappush(events, (now + dur[d.job_id], seq, d.job_id))
            seq += 1
        eng.alloc.check_invariants()
        head = eng.head("A", now)
        if head is not None and head.state is JobState.QUEUED and head.job_id not in bound:
            shape = shape_of[head.job_id]
            if shape.startswith("g"):        # strict FIFO: free GPUs cover it when enough jobs end
                free = nodes * size - sum(eng.job(j).gpus for j in running)
                when = now
                for end, g in sorted((e, eng.job(j).gpus) for j, e in running.items()):
                    if free >= int(shape[1]):
                        break
                    free += g
                    when = end
            else:                            # strict FIFO: enough nodes free of every job
                node_end = {f"n{n:04d}": now for n in range(nodes)}
                for j, e in running.items():
                    for p in eng.job(j).placement.pods:
                        node_end[p.node] = max(node_end[p.node], e)
                when = sorted(node_end.values())[(2 if shape == "nodes2" else 1) - 1]
            bound[head.job_id] = when
    assert set(start) == set(dur)
    order = sorted(start, key=lambda j: (start[j], j))
    passed = sum(1 for a in order for b in dur if b < a and start[b] > start[a])
    return start, bound, passed


def test_property_whole_node_heads_never_start_later_than_strict_fifo_would_start_them():
    passed_any = 0
    for seed in range(30):
        start, bound, passed = _replay_nodes(seed)
        late = {h: (start[h], b) for h, b in bound.items() if start[h] > b + 1e-9}
        assert late == {}, f"seed {seed}: heads started after their strict-FIFO time: {late}"
        passed_any += passed
    assert passed_any > 0
