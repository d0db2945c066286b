"""Allocator faults found by a held-out randomized checker (issue 15), each with its exact cells.

Racks of two 8-GPU nodes unless said otherwise; levels GPU(1) / PCIe switch(2) /
socket(3) / node(4) / rack(5) (core_helpers.py).
"""
from core_helpers import free_counts, rack_alloc

from hived.core.allocator import Allocator
from hived.core.spec import load_spec


def _state(a):
    """Everything a failed placement must leave as it found it."""
    lists = {c: [sorted(x.id for x in b.cells()) for b in per[1:]] for c, per in a.physical.free.items()}
    vlists = {(vc, c): [sorted(x.id for x in b.cells()) for b in per[1:]]
              for vc, v in a.vcs.items() for c, per in v.free.items()}
    bound = {vc: {k: sorted(x.id for x in d) for k, d in v.bound.items() if d} for vc, v in a.vcs.items()}
    return lists, vlists, bound, {c: list(v) for c, v in a.physical.bound_count.items()}, sorted(a.grants())


# ------------------------------------------------------------------ within_level on a doomed cell
def test_within_level_gang_refused_on_a_doomed_node_changes_nothing():
    a = rack_alloc(1, {"A": {"NODE": 1}, "B": {"NODE": 1}})
    a.set_health("n0", 7, False)
    assert a.place("b", "B", [8]).cells == ["n1"]        # B takes the healthy node
    before = _state(a)
    # A's only choice is n0 (doomed: GPU 7 is bad). Socket 0 holds a 4-GPU pod, socket 1 does not:
    assert a.place("g", "A", [4, 4], within_level=4) is None
    a.check_invariants()
    lists, vlists, bound, alloc_counts, grants = _state(a)
    # the doomed binding stays (as after a plain refusal), nothing else moved
    assert bound == {"A": {("RACK", 4): ["n0"]}, "B": {("RACK", 4): ["n1"]}}
    assert vlists[("A", "RACK")] == [[], [], [], ["n0"], []]
    assert lists == {"RACK": [[], [], [], [], []]} and before[0] == {"RACK": [[], [], [], ["n0"], []]}
    assert grants == before[4] == ["b"]
    # after the repair A has one node again, and only one
    a.set_health("n0", 7, True)
    assert a.tree.cell("n0").bound_vc is None and free_counts(a) == [0, 0, 0, 0, 1, 0]
    assert a.place("a1", "A", [8]).cells == ["n0"]
    assert a.place("a2", "A", [8]) is None
    a.release("b")
    assert a.place("b2", "B", [8]).cells == ["n1"]       # B's guaranteed node is still B's
    a.check_invariants()


def test_within_level_gang_refused_on_a_doomed_top_cell_does_not_crash():
    # the node is the chain's top cell: the rollback used to walk to its (missing) parent
    doc = {"physicalCluster": {"cellTypes": {"SW": {"childCellType": "GPU", "childCellNumber": 2},
                                             "SOCK": {"childCellType": "SW", "childCellNumber": 2},
                                             "NODE": {"childCellType": "SOCK", "childCellNumber": 2,
                                                      "isNodeLevel": True}},
                               "physicalCells": [{"cellType": "NODE", "cellAddress": "n0"},
                                                 {"cellType": "NODE", "cellAddress": "n1"}]},
           "virtualClusters": {"A": {"virtualCells": [{"cellType": "NODE.NODE", "cellNumber": 1}]},
                               "B": {"virtualCells": [{"cellType": "NODE.NODE", "cellNumber": 1}]}}}
    a = Allocator(load_spec(doc))
    a.set_health("n0", 7, False)
    assert a.place("b", "B", [8]).cells == ["n1"]
    assert a.place("g", "A", [4, 4], within_level=3) is None     # a 4+4 gang never fits one socket
    assert a.place("g", "A", [4, 4], within_level=4) is None
    a.check_invariants()
    a.set_health("n0", 7, True)
    assert a.place("a1", "A", [4, 4], within_level=4).cells == ["n0/0", "n0/1"]
    assert a.place("a2", "A", [1]) is None
    a.check_invariants()


# ------------------------------------------------------------------ NotReady in one rack, cordoned in the other
def _racks_of_four():
    doc = {"physicalCluster": {
        "cellTypes": {"SW": {"childCellType": "GPU", "childCellNumber": 2},
                      "SOCK": {"childCellType": "SW", "childCellNumber": 2},
                      "NODE": {"childCellType": "SOCK", "childCellNumber": 2, "isNodeLevel": True},
                      "RACK": {"childCellType": "NODE", "childCellNumber": 4}},
        "physicalCells": [{"cellType": "RACK", "cellAddress": f"rack{r}",
                           "cellChildren": [{"cellAddress": f"n{4 * r + j}"} for j in range(4)]} for r in range(2)]},
        "virtualClusters": {"A": {"virtualCells": [{"cellType": "RACK.RACK", "cellNumber": 2}]}}}
    return Allocator(load_spec(doc))


def test_rack_gang_with_a_bad_node_and_a_cordoned_node_is_refused_then_placed():
    a = _racks_of_four()
    a.set_health("n1", None, False)                       # NotReady in rack0
    cordoned = {"n5"}                                     # cordoned in rack1
    before = _state(a)
    ok = lambda node, gpus: node not in cordoned          # noqa: E731
    assert a.place("big", "A", [8, 8, 8, 8], within_level=5, node_ok=ok) is None
    a.check_invariants()
    assert _state(a) == before
    cordoned.clear()                                      # uncordoned: rack1 is idle and whole
    g = a.place("big", "A", [8, 8, 8, 8], within_level=5, node_ok=ok)
    assert g is not None and sorted(g.cells) == ["n4", "n5", "n6", "n7"]
    a.check_invariants()


def test_both_racks_unhealthy_gang_refused_then_placed_once_one_heals():
    a = _racks_of_four()
    a.set_health("n1", None, False)                       # NotReady in rack0
    a.set_health("n5", None, False)                       # cordoned in rack1 (a bad node to the allocator)
    before_free = [len(b) for b in a.physical.free["RACK"][1:]]
    # neither rack has four healthy nodes: rack0 is bound doomed, the gang refused, nothing else moves
    assert a.place("big", "A", [8, 8, 8, 8], within_level=5) is None
    a.check_invariants()
    assert {c.id for c in a.vcs["A"].bound[("RACK", 5)]} == {"rack0"} and a.tree.cell("rack0").doomed
    assert [len(b) for b in a.physical.free["RACK"][1:]] == [0, 0, 0, 0, before_free[4] - 1]
    a.set_health("n5", None, True)                        # uncordoned: rack1 is idle and whole
    g = a.place("big", "A", [8, 8, 8, 8], within_level=5)
    assert g is not None and sorted(g.cells) == ["n4", "n5", "n6", "n7"]
    a.check_invariants()


def test_engine_step_with_a_bad_node_in_each_rack_keeps_going():
    from hived.core.engine import Engine
    from hived.core.jobs import JobRequest, JobState, PodGroup
    a = _racks_of_four()
    eng = Engine(a, preemption_policy="none")
    eng.set_health("n1", None, False, 0.0)
    eng.set_health("n5", None, False, 0.0)
    jid = eng.submit(JobRequest(user="u", vc="A", groups=[PodGroup(4, 8)]), 0.0)
    assert eng.step(1.0) == []                            # used to raise AttributeError ... 'vfc'
    assert eng.job(jid).state is JobState.QUEUED
    eng.set_health("n5", None, True, 2.0)
    starts = [d.job_id for d in eng.step(3.0) if d.kind.value == "start"]
    assert starts == [jid]
    assert sorted(p.node for p in eng.job(jid).placement.pods) == ["n4", "n5", "n6", "n7"]
