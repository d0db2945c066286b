"""The allocator at the edges of its rules: a split safe or unsafe by exactly one cell
(invariant (2), HiveD 001 §3.3), a node veto of the first listed cell, a level whose
every cell holds a bad GPU.

The cluster: racks of two 8-GPU nodes; levels GPU(1) / PCIe switch(2) / socket(3) /
node(4) / rack(5) (see core_helpers.py). Each test reaches a state where the lowest free
level holds only a bad or vetoed cell, so the allocator must choose between splitting a
higher cell and taking the bad one (bound doomed).
"""
from core_helpers import free_counts, rack_alloc, rack_doc

from hived.core.allocator import Allocator
from hived.core.spec import load_spec


def _bad_free_socket(vcs: dict):
    """D binds node n0 and B a socket of n1; the other socket of n1 (GPUs 4-7) goes bad.
    Free then: that bad socket and the whole rack1 (level 4 is empty)."""
    a = rack_alloc(2, vcs)
    assert a.place("d1", "D", [8]).cells == ["n0"]
    assert a.place("b1", "B", [4]).cells == ["n1/0"]
    a.set_health("n1", 4, False)
    assert free_counts(a) == [0, 0, 0, 1, 0, 1]
    return a


def test_a_split_short_by_one_node_is_refused_and_the_bad_socket_is_bound_doomed():
    """D reserves 3 nodes, B 2 sockets: the whole cluster. Splitting rack1 for B's second
    socket would leave D's two unbound nodes one node of supply: the allocator binds the
    bad socket (doomed) instead and keeps rack1 whole for D."""
    a = _bad_free_socket({"D": {"NODE": 3}, "B": {"SOCK": 2}})
    assert a.place("b2", "B", [4]) is None
    assert {b["cell"] for b in a.vc_view("B").bound_cells if b["doomed"]} == {"n1/1"}
    assert free_counts(a)[5] == 1                              # rack1 not split
    assert [a.place(f"d{i}", "D", [8]).cells for i in (2, 3)] == [["n2"], ["n3"]]
    a.check_invariants()


def test_a_split_safe_with_no_cell_to_spare_is_taken_over_the_bad_socket():
    """D reserves 2 nodes, B 4 sockets: the whole cluster again, but now splitting rack1
    down to a socket (across the empty node level) keeps every reservation: B gets a
    healthy socket of rack1 (binding no doomed cell on the way), and everyone still gets
    their cells afterwards."""
    a = _bad_free_socket({"D": {"NODE": 2}, "B": {"SOCK": 4}})
    g = a.place("b2", "B", [4])
    assert g is not None and g.cells[0].split("/")[0] in ("n2", "n3")
    assert not a.tree.cell(g.cells[0]).doomed
    assert not [b["cell"] for b in a.vc_view("B").bound_cells if b["doomed"]]   # n1/1 not bound on the way
    a.check_invariants()
    d2 = a.place("d2", "D", [8])
    assert d2 is not None and d2.cells[0] in ("n2", "n3") and d2.cells[0] != g.cells[0].split("/")[0]
    assert a.place("b3", "B", [4]) is not None                 # the other socket of that rack1 node
    assert a.place("b4", "B", [4]) is None                     # only the bad socket is left
    a.check_invariants()


def _pinned_first_node(extra: dict | None = None) -> Allocator:
    """n0 is pinned to A: free are n1 (level 4, listed first) and rack1."""
    vcs = {"A": {"pinnedCells": [{"pinnedCellId": "pa"}]}, "B": {"NODE": 1}, **(extra or {})}
    return Allocator(load_spec(rack_doc(2, vcs, pinned={"n0": "pa"})))


def test_a_node_veto_of_the_first_listed_cell_splits_a_higher_cell_when_safe():
    """The only free node n1 is healthy but vetoed (CPU or memory short): the job gets a
    node split from rack1, not the vetoed n1."""
    a = _pinned_first_node()
    g = a.place("b", "B", [8], node_ok=lambda node, gpus: node != "n1")
    assert g is not None and g.cells == ["n2"]
    assert not a.tree.cell("n2").doomed
    a.check_invariants()


def test_a_node_veto_of_the_first_listed_cell_picks_the_next_allowed_one():
    """Two free nodes at the lowest level (n1 listed first, n3): a veto of n1 gives n3."""
    vcs = {"A": {"pinnedCells": [{"pinnedCellId": "pa"}, {"pinnedCellId": "pb"}]}, "B": {"NODE": 1}}
    a = Allocator(load_spec(rack_doc(2, vcs, pinned={"n0": "pa", "n2": "pb"})))
    g = a.place("b", "B", [8], node_ok=lambda node, gpus: node != "n1")
    assert g is not None and g.cells == ["n3"]
    a.check_invariants()


def test_a_node_veto_never_splits_a_cell_another_vc_reserves():
    """As above, but C reserves a whole rack: splitting rack1 is unsafe, n1 is vetoed, so
    nothing is placed and nothing is bound."""
    a = _pinned_first_node({"C": {"RACK": 1}})
    assert a.place("b", "B", [8], node_ok=lambda node, gpus: node != "n1") is None
    assert free_counts(a)[4:] == [1, 1]
    assert a.place("c", "C", [8, 8]) is not None                # C's rack is still whole
    a.check_invariants()


def test_when_every_node_holds_a_bad_gpu_the_doomed_cell_is_on_an_allowed_node():
    """One rack, both nodes with a bad GPU, n0 vetoed: the 8-GPU job cannot run, and the
    node cell B binds (doomed) is n1, where the job may run once it heals, never n0."""
    a = rack_alloc(1, {"B": {"NODE": 1}})
    a.set_health("n0", 0, False)
    a.set_health("n1", 0, False)
    assert a.place("b", "B", [8], node_ok=lambda node, gpus: node != "n0") is None
    assert {b["cell"] for b in a.vc_view("B").bound_cells if b["doomed"]} == {"n1"}
    a.set_health("n1", 0, True)
    g = a.place("b", "B", [8], node_ok=lambda node, gpus: node != "n0")
    assert g is not None and g.cells == ["n1"]
    a.check_invariants()
