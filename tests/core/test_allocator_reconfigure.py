"""Reconfiguration (``Allocator.reconfigure``) with victims and carried cells (issue 24).

Racks of two 8-GPU nodes; levels GPU(1) / PCIe switch(2) / socket(3) / node(4) / rack(5).
"""
import pytest
from core_helpers import rack_alloc, rack_doc, victim_setup

from hived.core.allocator import BindingConflict
from hived.core.spec import load_spec

SHRUNK_A = {"A": {"GPU": 1}, "B": {"NODE": 1}}    # A loses its node: g no longer fits


def test_a_victim_of_a_downgraded_job_stays_held_until_it_leaves():
    a = victim_setup()
    assert a.reconfigure(load_spec(rack_doc(1, SHRUNK_A))) == ["g"]
    g = a.grant_of("g")
    assert g.opportunistic and g.downgraded and g.cells == ["n0"] and g.victims == {"o1"}
    o1 = a.grant_of("o1")
    assert o1 is not None and o1.cells == ["n0/0", "n0/1"]      # still running (its grace): still held
    a.check_invariants()
    a.release("g")                                                # the downgraded job gives up its GPUs
    assert a.free_gpus() == 0                                     # o1 and o2 still run on all 16
    h = a.place("h", "B", [2])                                    # whatever GPUs it gets, it preempts someone
    assert h is not None and h.victims
    assert a.grant_of("o1") is not None
    a.check_invariants()


def test_a_downgraded_job_stops_waiting_once_its_victim_leaves():
    a = victim_setup()
    a.reconfigure(load_spec(rack_doc(1, SHRUNK_A)))
    a.release("o1")
    assert a.grant_of("g").victims == set()
    assert a.free_gpus() == 0                                     # g itself now holds n0
    a.check_invariants()
    a.release("g")
    assert a.free_gpus() == 8
    a.check_invariants()


def test_a_guaranteed_job_over_a_downgraded_job_and_its_victim_preempts_both():
    a = victim_setup()
    a.reconfigure(load_spec(rack_doc(1, SHRUNK_A)))
    h = a.place("h", "B", [8])                                    # B binds a node: both run opportunistic work
    assert h is not None
    assert h.victims == ({"g", "o1"} if h.cells == ["n0"] else {"o2"})
    a.check_invariants()


def test_reconfiguring_twice_keeps_the_victim_held():
    a = victim_setup()
    a.reconfigure(load_spec(rack_doc(1, SHRUNK_A)))
    assert a.reconfigure(load_spec(rack_doc(1, SHRUNK_A))) == []     # g was downgraded already
    assert a.grant_of("g").victims == {"o1"} and a.grant_of("o1") is not None
    a.check_invariants()


def test_shrunk_sequence_place_reconfigure_place_reconfigure():
    """The checker's shrunk sequence: place opp; reconfigure; place g on opp's GPUs; reconfigure downgrading g."""
    vcs = {"A": {"NODE": 1}, "B": {"NODE": 1}}
    a = rack_alloc(1, vcs)
    a.place("opp", "B", [8], opportunistic=True)
    a.place("opp2", "B", [8], opportunistic=True)
    assert a.reconfigure(load_spec(rack_doc(1, vcs))) == []
    g = a.place("g", "A", [8])
    victim = next(iter(g.victims))
    assert a.reconfigure(load_spec(rack_doc(1, SHRUNK_A))) == ["g"]
    assert set(a.grants()) == {"opp", "opp2", "g"}
    assert a.grant_of("g").victims == {victim}
    a.check_invariants()


def _bound(a):
    return sorted(c.id for vc in a.vcs.values() for c in vc.bound_cells())


def test_a_downgraded_gang_leaves_no_carried_cell_bound():
    # a gang of two switches in A's socket; the new spec gives A one switch: one pod's cell is carried, the
    # gang no longer fits and is downgraded, and the carried switch must not stay bound to A
    a = rack_alloc(1, {"A": {"SOCK": 1}, "B": {"SW": 2}})
    assert a.place("g", "A", [2, 2]).cells == ["n0/0.0", "n0/0.1"]
    assert a.reconfigure(load_spec(rack_doc(1, {"A": {"SW": 1}, "B": {"SOCK": 2}}))) == ["g"]
    assert _bound(a) == []
    a.check_invariants()
    a.release("g")
    assert _bound(a) == []
    assert a.place("h", "A", [2]) is not None                     # A's one switch is still there to bind


def test_a_downgraded_node_gang_leaves_no_carried_node_bound():
    a = rack_alloc(2, {"A": {"NODE": 2}, "B": {"SW": 1}})
    assert a.place("g", "A", [8, 8]).cells == ["n0", "n1"]
    assert a.reconfigure(load_spec(rack_doc(2, {"A": {"NODE": 1}, "B": {"NODE": 1}}))) == ["g"]
    assert _bound(a) == []
    a.release("g")
    assert _bound(a) == []
    a.check_invariants()


def test_static_binding_keeps_every_cell_bound_after_a_downgrade():
    a = rack_alloc(1, {"A": {"SOCK": 1}, "B": {"SW": 2}}, binding="static")
    a.place("g", "A", [2, 2])
    assert a.reconfigure(load_spec(rack_doc(1, {"A": {"SW": 1}, "B": {"SOCK": 2}}))) == ["g"]
    assert len(_bound(a)) == 3                                    # A's switch, B's two sockets
    a.check_invariants()


# ------------------------------------------------------------------ the Theorem 1 split check
SPLIT_VCS = {"A": {"NODE": 1}, "B": {"RACK": 1}, "C": {"NODE": 1}}   # 32 GPUs, all promised


def _one_rack_left():
    """C's job splits rack0: n1 is free at node level, rack1 is the one free rack, and B is promised a rack."""
    a = rack_alloc(2, SPLIT_VCS)
    assert a.place("c", "C", [8]).cells == ["n0"]
    return a


def test_a_bad_node_is_bound_doomed_rather_than_splitting_the_rack_another_vc_needs():
    a = _one_rack_left()
    a.set_health("n1", None, False)
    # A's only healthy choice would split rack1, which B still needs whole: A is bound to bad n1 instead
    assert a.place("x", "A", [8]) is None
    assert [(b["cell"], b["doomed"]) for b in a.vc_view("A").bound_cells] == [("n1", True)]
    a.check_invariants()
    b = a.allocate("b", "B", 5)
    assert b is not None and b.cells == ["rack1"]


def test_restore_refuses_a_cell_whose_split_would_take_another_vcs_rack():
    a = _one_rack_left()
    stored = {"owner": "x", "vc": "A", "chain": "RACK", "cells": ["n2"], "gpus": [8]}
    with pytest.raises(BindingConflict, match="no unbound RACK cell"):
        a.restore(stored)                         # n2 lies in rack1, the rack B is promised
    assert a.grant_of("x") is None
    a.check_invariants()
    a.restore({**stored, "cells": ["n1"]})        # the free node next to C's is fine
    assert a.allocate("b", "B", 5).cells == ["rack1"]


def test_reconfigure_does_not_carry_a_cell_whose_split_would_take_another_vcs_rack():
    a = rack_alloc(2, {"A": {"NODE": 2}, "C": {"NODE": 1}})
    assert a.place("c", "C", [8]).cells == ["n0"]
    assert a.place("x", "A", [8]).cells == ["n1"]
    assert a.place("y", "A", [8]).cells == ["n2"]
    a.release("x")                                # A keeps n2 in rack1; rack0 holds C's n0 and a free n1
    # the new spec promises B a whole rack: A's n2 may not stay bound in rack1, so its job is downgraded
    down = a.reconfigure(load_spec(rack_doc(2, SPLIT_VCS)))
    assert down == ["y"] and a.grant_of("y").opportunistic
    a.check_invariants()
    b = a.allocate("b", "B", 5)
    assert b is not None and b.cells == ["rack1"] and b.victims == {"y"}


def test_a_bad_gpu_under_a_waiting_downgraded_job_names_it():
    a = rack_alloc(1, {"A": {"SOCK": 1}, "B": {"NODE": 1}})
    assert a.place("o", "B", [4], opportunistic=True).cells == ["n0/0"]
    for i in range(3):                                     # every other socket runs opportunistic work
        assert a.place(f"f{i}", "B", [4], opportunistic=True) is not None
    g = a.place("g", "A", [4])
    victim = next(iter(g.victims))
    cell = g.cells[0]
    assert a.grant_of(victim).cells == [cell]              # the victim holds exactly g's socket
    assert a.reconfigure(load_spec(rack_doc(1, {"A": {"GPU": 1}, "B": {"NODE": 1}}))) == ["g"]
    node, gpu = a.grant_of("g").pods[0].node, a.grant_of("g").pods[0].gpus[0]
    assert a.set_health(node, gpu, False) == sorted({"g", victim})
    a.check_invariants()
    a.release(victim)                                      # g takes the socket over
    assert a.grant_of("g").victims == set() and a.free_gpus() == 0
    a.check_invariants()
