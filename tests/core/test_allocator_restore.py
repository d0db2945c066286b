"""Restore, reconfigure and transfer edges found by a held-out checker (issue 15), with exact cells.

Racks of two 8-GPU nodes; levels GPU(1) / PCIe switch(2) / socket(3) / node(4) / rack(5).
"""
import pytest
from core_helpers import rack_alloc, rack_doc, victim_setup

from hived.core.allocator import BindingConflict
from hived.core.spec import load_spec


def _grants(a):
    return {o: (g.cells, g.opportunistic, sorted(g.victims)) for o, g in a.grants().items()}


def test_reloading_the_same_spec_downgrades_nobody():
    vcs = {"A": {"NODE": 1, "SW": 1}, "B": {"SOCK": 1, "GPU": 2}, "C": {"NODE": 1}}
    a = rack_alloc(2, vcs)
    assert a.place("y0", "A", [2]).cells == ["n0/0.0"]    # A's switch cell
    assert a.place("q1", "C", [1]).cells == ["n1/gpu0"]
    assert a.place("p2", "A", [4]).cells == ["n2/0"]      # A's node cell: n2
    assert a.place("d3", "A", [1]).cells == ["n2/gpu4"]   # inside n2 as well
    before = _grants(a)
    # restoring by owner name put d3 first and bound the switch around n2/gpu4, so p2 no longer had a node
    assert a.reconfigure(load_spec(rack_doc(2, vcs))) == []
    assert _grants(a) == before
    assert a.tree.cell("n2").bound_vc == "A" and a.tree.cell("n0/0.0").bound_vc == "A"
    a.check_invariants()


def test_restore_of_a_just_released_gang():
    a = rack_alloc(2, {"A": {"NODE": 1, "SW": 1}, "B": {"SOCK": 1, "GPU": 2}, "C": {"NODE": 1}})
    g = a.place("j0", "A", [2, 2], within_level=4)
    assert g.cells == ["n0/0.0", "n0/0.1"]                 # both switches inside A's node cell n0
    data = g.to_dict()
    a.release("j0")
    a.restore(data)                                         # used to bind n0/0.0 as A's switch, then find no node
    assert a.grant_of("j0").cells == ["n0/0.0", "n0/0.1"] and a.tree.cell("n0").bound_vc == "A"
    a.check_invariants()
    # without the record of its VC cells (pod annotations only) the restore still finds a way
    a.release("j0")
    data.pop("bound")
    a.restore(data)
    assert a.grant_of("j0").cells == ["n0/0.0", "n0/0.1"]
    a.check_invariants()


def test_reconfigure_keeps_victims_of_a_guaranteed_job():
    a = victim_setup()
    before = _grants(a)
    assert a.reconfigure(load_spec(rack_doc(1, {"A": {"NODE": 1}, "B": {"NODE": 1}}))) == []
    assert _grants(a) == before                             # g still waits for o1; nothing else moved
    a.check_invariants()


def test_reconfigure_downgrading_a_job_that_still_waits_for_its_victim():
    a = victim_setup()
    # A loses its node: g no longer fits and must become opportunistic while o1 still holds its GPUs
    down = a.reconfigure(load_spec(rack_doc(1, {"A": {"GPU": 1}, "B": {"NODE": 1}})))
    assert down == ["g"]
    g = a.grant_of("g")
    assert g.opportunistic and g.downgraded and g.cells == ["n0"] and g.victims == {"o1"}
    assert a.grant_of("o1").cells == ["n0/0", "n0/1"]      # being preempted for g, still held until it leaves
    assert a.grant_of("o2").cells == ["n1/0", "n1/1"]
    a.check_invariants()
    a.release("o1")                                         # gone: g holds the whole node now
    assert a.grant_of("g").victims == set() and a.free_gpus() == 0
    a.check_invariants()


def test_reconfigure_drops_opportunistic_demand_of_removed_vcs():
    a = rack_alloc(1, {"A": {"NODE": 1}, "B": {"NODE": 1}})
    a.set_opportunistic_demand("B", 16)
    a.set_opportunistic_demand("A", 4)
    a.reconfigure(load_spec(rack_doc(1, {"A": {"NODE": 1}})))
    assert {n: v.opportunistic_demand for n, v in a.vcs.items()} == {"A": 4}
    # B's old demand used to take its share, so A's opportunistic pod was refused on an idle node
    assert a.place("o", "A", [4], opportunistic=True) is not None


def test_transfer_through_a_third_vc_never_lends_a_negative_count():
    a = rack_alloc(2, {"A": {"NODE": 2}, "B": {"NODE": 1}, "C": {"NODE": 1}})
    a.transfer("A", "B", "RACK", 4, 1)
    a.transfer("B", "C", "RACK", 4, 1)                      # B passes A's node on to C
    views = {vc: a.vc_view(vc).levels[("RACK", 4)] for vc in "ABC"}
    assert {vc: (v.total, v.lent, v.borrowed) for vc, v in views.items()} == \
        {"A": (1, 1, 0), "B": (1, 1, 1), "C": (2, 0, 1)}
    assert all(v >= 0 for vc in a.vcs.values() for d in (vc.lent, vc.borrowed) for v in d.values())
    a.transfer("C", "B", "RACK", 4, 1)                      # C pays B back, B pays A back
    a.transfer("B", "A", "RACK", 4, 1)
    assert all(vc.lent == {} and vc.borrowed == {} for vc in a.vcs.values())
    assert a.loans == {}


def test_restore_refuses_opportunistic_overlap_even_when_forced():
    a = victim_setup()
    data = a.grant_of("g").to_dict()
    a.release("g")
    with pytest.raises(BindingConflict, match=r"^g: cell n0 already runs opportunistic work$"):
        a.restore(data, force_opportunistic=True)           # o1 holds sockets of n0
    assert a.grant_of("g") is None
    a.restore(data)
    assert a.grant_of("g").victims == {"o1"}                # the victims come back with the grant
    a.check_invariants()
