"""One grant type for place, allocate, grants and restore (core/grant.py).

Racks of two 8-GPU nodes; levels GPU(1) / PCIe switch(2) / socket(3) / node(4) / rack(5).
"""
import json

import pytest
from core_helpers import rack_alloc

from hived.core.allocator import BindingConflict, Grant
from hived.core.jobs import PodPlacement

VCS = {"A": {"NODE": 1, "SW": 1}, "B": {"SOCK": 1, "GPU": 2}, "C": {"NODE": 1}}


def test_place_allocate_and_grants_hand_out_the_same_type():
    a = rack_alloc(2, VCS)
    placed = a.place("p", "A", [2])
    whole = a.allocate("w", "C", level=4)
    opp = a.place("o", "B", [1], opportunistic=True)
    assert all(type(g) is Grant for g in (placed, whole, opp, *a.grants().values()))
    assert whole.cells == ["n1"] and whole.gpus == 8 and [p.node for p in whole.pods] == ["n1"]


def test_restore_takes_a_grant_from_another_allocator():
    a = rack_alloc(2, VCS)
    g = a.place("j0", "A", [2, 2], within_level=4)
    b = rack_alloc(2, VCS)
    b.restore(g)                                     # the object itself, not its dict form
    got = b.grant_of("j0")
    assert got is not g and type(got) is Grant
    assert got.cells == g.cells == ["n0/0.0", "n0/0.1"] and got.pods == g.pods
    assert b.tree.cell("n0").bound_vc == "A"         # the same VC cell, from the grant's bound_in
    assert g.owner in a.grants()                     # the source allocator is untouched
    b.check_invariants()


def test_a_grant_rebuilt_from_stored_pods_restores_exactly():
    a = rack_alloc(2, VCS)
    pods = a.place("j", "A", [4]).pods
    stored = json.loads(json.dumps(a.grant_of("j").to_dict()))
    a.release("j")
    from_pods = Grant("j", "A", "RACK", False, 1,
                      [PodPlacement(p["rank"], p["node"], tuple(p["gpus"])) for p in stored["pods"]])
    a.restore(from_pods)                             # pods only: the smallest cell holding each pod's GPUs
    assert a.grant_of("j").pods == pods and a.grant_of("j").priority == 1
    a.check_invariants()
    a.release("j")
    assert Grant.from_dict(stored).to_dict() == stored
    a.restore(Grant.from_dict(stored))
    assert a.grant_of("j").to_dict() == stored
    a.check_invariants()


def test_a_malformed_stored_grant_is_refused_with_the_pod_named():
    a = rack_alloc(2, VCS)
    with pytest.raises(BindingConflict, match=r"^j: pod 0 is not a \{'node', 'gpus'\} mapping"):
        a.restore({"owner": "j", "vc": "A", "chain": "RACK", "pods": [{"gpus": [0]}]})
    with pytest.raises(BindingConflict, match="needs 'owner' and 'vc'"):
        a.restore({"vc": "A", "pods": [{"node": "n0", "gpus": [0]}]})
    assert a.grants() == {} and a.free_gpus() == 32
    a.check_invariants()
