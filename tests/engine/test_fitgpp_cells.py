"""FitGpp under HiveD's cells: a TE job preempts only BE jobs whose cells, once free, hold its pods.

One 8-GPU node (two 4-GPU sockets of two 2-GPU PCIe pairs, ``node_spec``). The buddy
allocator puts a 2-GPU BE job on GPUs 0-1, a 1-GPU TE job on GPU 2 and a second 2-GPU BE
job on GPUs 4-5. A 4-GPU TE job needs a whole free socket. By GPU count either BE job
"fits alone" (3 free + 2 >= 4), but only the one on socket 1 frees a socket.
"""
from engine_helpers import kinds, req, run

from hived.core.allocator import Allocator
from hived.core.engine import Engine
from hived.core.jobs import DecisionKind, JobClass, JobState
from hived.core.sim.cluster import node_spec
from hived.core.spec import load_spec


def _engine() -> Engine:
    return Engine(Allocator(load_spec(node_spec(1, {"A": 8}))), preemption_policy="fitgpp")


def _gpus(eng: Engine, jid: str) -> list[int]:
    return sorted(g for p in eng.job(jid).placement.pods for g in p.gpus)


def _fill(eng: Engine, second_te: bool = False) -> tuple[str, str, str]:
    be1 = eng.submit(req("A", 2, cls=JobClass.BE), 0.0)
    run(eng, 0.0)
    te1 = eng.submit(req("A", 1), 1.0)
    run(eng, 1.0)
    be2 = eng.submit(req("A", 2, cls=JobClass.BE), 2.0)
    run(eng, 2.0)
    assert _gpus(eng, be1) == [0, 1] and _gpus(eng, te1) == [2] and _gpus(eng, be2) == [4, 5]
    if second_te:   # a 1-GPU BE job on GPU 3, then a 1-GPU TE job on GPU 6
        be3 = eng.submit(req("A", 1, cls=JobClass.BE), 3.0)
        run(eng, 3.0)
        te2 = eng.submit(req("A", 1), 4.0)
        run(eng, 4.0)
        assert _gpus(eng, be3) == [3] and _gpus(eng, te2) == [6]
    return be1, te1, be2


def test_te_job_preempts_the_be_job_whose_socket_it_then_gets():
    eng = _engine()
    be1, _te1, be2 = _fill(eng)
    head = eng.submit(req("A", 4), 5.0)
    ds = run(eng, 5.0)
    assert kinds(ds) == [("preempt", be2)]          # not be1: GPUs 0, 1, 3 are no socket
    assert f"fitgpp: preempt {be2} (score" in ds[0].reason
    assert "fits alone: its cells, once free, hold the TE job's pods" in ds[0].reason
    assert eng.job(be1).state is JobState.RUNNING
    eng.on_preempted(be2, 6.0)
    ds = run(eng, 6.0)
    assert ("start", head) in kinds(ds) and _gpus(eng, head) == [4, 5, 6, 7]
    eng.alloc.check_invariants()


def test_no_preemption_when_no_be_victims_free_a_cell_the_job_fits():
    """A 1-GPU TE job on each socket: no set of BE jobs frees a socket (by count, all three
    would leave 6 GPUs free). Nothing is preempted and the TE job's reason says why."""
    eng = _engine()
    be1, _te1, be2 = _fill(eng, second_te=True)
    head = eng.submit(req("A", 4), 5.0)
    ds = run(eng, 5.0)
    assert not [d for d in ds if d.kind is DecisionKind.PREEMPT]
    assert eng.job(be1).state is JobState.RUNNING and eng.job(be2).state is JobState.RUNNING
    assert eng.job(head).state is JobState.QUEUED
    assert "cell" in eng.job(head).policy_note


def test_a_gang_preempts_nothing_on_half_nodes_it_cannot_use_then_a_whole_node_once_one_can_be_freed():
    """Two nodes; 1-GPU TE jobs on both sockets of n0000 and on socket 0 of n0001. A TE gang of
    two 4-GPU pods with hard affinity needs two free sockets of one node. By GPU count, BE jobs
    on both nodes' halves "make room" (the count-based choice preempted four of them, on two
    nodes, and the gang still could not start); by cells no node can be freed, so nothing is
    preempted. Once the TE job on n0001 ends, n0001's two BE jobs go and the gang starts there."""
    eng = Engine(Allocator(load_spec(node_spec(2, {"A": 16}))), preemption_policy="fitgpp")
    ids = []
    for t, (g, cls) in enumerate([(2, JobClass.BE), (1, JobClass.TE), (2, JobClass.BE), (1, JobClass.BE),
                                  (1, JobClass.TE), (1, JobClass.BE), (2, JobClass.BE), (1, JobClass.TE),
                                  (2, JobClass.BE)], start=1):
        ids.append(eng.submit(req("A", g, cls=cls), float(t)))
        run(eng, float(t))
    where = {j: (eng.job(j).placement.pods[0].node, _gpus(eng, j)) for j in ids}
    assert [where[j] for j in ids] == [("n0000", [0, 1]), ("n0000", [2]), ("n0000", [4, 5]), ("n0000", [3]),
                                       ("n0000", [6]), ("n0000", [7]), ("n0001", [0, 1]), ("n0001", [2]),
                                       ("n0001", [4, 5])]
    gang = eng.submit(req("A", 4, pods=2), 20.0)
    ds = run(eng, 20.0)
    assert not [d for d in ds if d.kind is DecisionKind.PREEMPT]
    assert "frees cells" in eng.job(gang).policy_note
    eng.on_finished(ids[7], 30.0, 0)                 # the TE job on n0001
    ds = run(eng, 30.0)
    victims = sorted(j for k, j in kinds(ds) if k == "preempt")
    assert victims == sorted([ids[6], ids[8]])        # n0001's BE jobs, nothing on n0000
    for v in victims:
        eng.on_preempted(v, 31.0)
    assert ("start", gang) in kinds(run(eng, 31.0))
    assert sorted((p.node, tuple(p.gpus)) for p in eng.job(gang).placement.pods) == [
        ("n0001", (0, 1, 2, 3)), ("n0001", (4, 5, 6, 7))]
    eng.alloc.check_invariants()
