"""One example test per allocator rule (HiveD 001 §3.2-§4, 000 §3.1-§3.2).

The cluster in most tests: racks of two 8-GPU nodes; levels GPU(1) /
PCIe switch(2) / socket(3) / node(4) / rack(5) (see core_helpers.py).
"""
import pytest
from core_helpers import free_counts, rack_alloc, rack_doc

from hived.core.alloc.opportunistic import weighted_max_min
from hived.core.allocator import Allocator, BindingConflict
from hived.core.spec import load_spec


# ------------------------------------------------------------------ buddy split / merge
def test_split_from_above_and_merge_back():
    a = rack_alloc(2, {"A": {"NODE": 1}, "B": {"SOCK": 2, "SW": 1}})
    assert free_counts(a) == [0, 0, 0, 0, 0, 2]          # two free racks
    g = a.place("j1", "A", [1])
    # A binds a node: rack0 splits into n0 (bound) and n1 (free)
    assert g.cells == ["n0/gpu0"] and g.victims == set()
    assert free_counts(a) == [0, 0, 0, 0, 1, 1]
    g2 = a.place("j2", "B", [1])
    # B's lowest unbound level is the switch: n1 splits into socket + switch + the bound switch
    assert g2.cells == ["n1/gpu0"]
    assert free_counts(a) == [0, 0, 1, 1, 0, 1]
    a.check_invariants()
    a.release("j1")
    assert free_counts(a) == [0, 0, 1, 1, 1, 1]
    a.release("j2")                                        # buddies merge all the way to the rack
    assert free_counts(a) == [0, 0, 0, 0, 0, 2]
    a.check_invariants()


def test_vc_view_splits_its_own_cell_before_binding_another():
    a = rack_alloc(2, {"A": {"NODE": 2}})
    cells = [a.place(f"j{i}", "A", [1]).cells[0] for i in range(8)]
    assert {c.split("/")[0] for c in cells} == {"n0"}      # one bound node filled first
    assert len(a.vcs["A"].bound[("RACK", 4)]) == 1
    assert a.place("j8", "A", [1]).cells == ["n1/gpu0"]    # then the second node cell
    a.check_invariants()


def test_pod_gets_smallest_cell_holding_its_gpus():
    a = rack_alloc(1, {"A": {"NODE": 2}})
    g = a.place("j", "A", [3, 2, 1])
    # 3 GPUs -> a socket (4), 2 -> a switch, 1 -> a GPU
    assert g.cells == ["n0/0", "n0/1.0", "n0/gpu6"]
    lv = [a.tree.cell(c).level for c in g.cells]
    assert lv == [3, 2, 1]
    assert [p.gpus for p in g.pods][0] == (0, 1, 2)      # 3 of the socket's 4 GPUs
    assert g.gpus == 6


# ------------------------------------------------------------------ legality r_{t,k}
def test_legality_per_vc_and_level():
    a = rack_alloc(2, {"A": {"NODE": 1}, "B": {"SOCK": 2}})
    assert a.place("a1", "A", [8]) is not None
    assert a.place("a2", "A", [1]) is None                 # A's only node is full; the other 3 are not A's
    assert a.allocate("b1", "B", 4) is None                # B has no node-level cell at all
    assert a.place("b2", "B", [4]) is not None
    assert a.place("b3", "B", [4]) is not None
    assert a.place("b4", "B", [1]) is None                 # two sockets, both used
    assert a.free_gpus() == 32 - 16
    a.check_invariants()


def test_allocate_whole_cell_of_a_level():
    a = rack_alloc(2, {"A": {"RACK": 1}, "B": {"NODE": 2}})
    g = a.allocate("r", "A", 5)
    assert a.tree.cell(g.cells[0]).level == 5 and g.gpus == 16
    assert a.allocate("r2", "A", 5) is None
    assert g.cells == ["rack0"]
    assert a.allocate("n", "B", 4).cells == ["n2"]
    a.check_invariants()


def test_vc_cells_stay_available_whatever_others_do():
    # B fills the rest of the cluster with 1-GPU jobs; A's node cell is still a whole node (sharing safety)
    a = rack_alloc(2, {"A": {"NODE": 1}, "B": {"NODE": 1, "SOCK": 2, "SW": 4}})
    i = 0
    while a.place(f"b{i}", "B", [1]) is not None:
        i += 1
    assert i == 8 + 8 + 8
    g = a.place("a", "A", [8])
    assert g is not None and g.victims == set()
    a.check_invariants()


# ------------------------------------------------------------------ pinned cells
def test_pinned_cell_is_the_vcs_only():
    doc = rack_doc(2, {"A": {"pinnedCells": [{"pinnedCellId": "pin-a"}]}, "B": {"NODE": 3}},
                   pinned={"n2": "pin-a"})
    a = Allocator(load_spec(doc))
    got = [a.place(f"b{i}", "B", [8]).cells[0] for i in range(3)]
    assert "n2" not in got and a.place("b3", "B", [8]) is None
    g = a.place("a", "A", [8])
    assert g.cells == ["n2"]
    a.release("a")
    assert a.tree.cell("n2").bound_vc == "A"                # pinned cells stay bound after release
    view = a.vc_view("A")
    assert view.levels[("RACK", 4)].total == 1
    a.check_invariants()


# ------------------------------------------------------------------ several chains
def _two_chain_doc():
    doc = rack_doc(1, {})
    doc["physicalCluster"]["cellTypes"].update({"T4-NODE": {"childCellType": "T4", "childCellNumber": 4,
                                                             "isNodeLevel": True}})
    doc["physicalCluster"]["physicalCells"] += [{"cellType": "T4-NODE", "cellAddress": "t0"},
                                                {"cellType": "T4-NODE", "cellAddress": "t1"}]
    doc["virtualClusters"] = {
        "A": {"virtualCells": [{"cellType": "RACK.NODE", "cellNumber": 1},
                               {"cellType": "T4-NODE.T4-NODE", "cellNumber": 1}]},
        "B": {"virtualCells": [{"cellType": "T4-NODE.T4-NODE", "cellNumber": 1},
                               {"cellType": "RACK.NODE", "cellNumber": 1}]},
    }
    return doc


def test_multi_chain_placement():
    a = Allocator(load_spec(_two_chain_doc()))
    assert set(a.spec.chains) == {"RACK", "T4-NODE"}
    g = a.place("x", "A", [2], chain="T4-NODE")
    assert g.chain == "T4-NODE" and g.pods[0].node in ("t0", "t1")
    g2 = a.place("y", "A", [8])                             # only RACK nodes hold 8 GPUs
    assert g2.chain == "RACK"
    assert a.place("z", "A", [4], chain="T4-NODE") is None  # A's T4 node holds x already
    assert a.place("w", "B", [4], chain="T4-NODE").chain == "T4-NODE"
    # no 2-GPU level in this chain: x's pod holds a whole 4-GPU node cell (uses GPUs 0 and 1 of it)
    assert a.grant_of("x").pods[0].gpus == (0, 1) and a.grant_of("x").gpus == 2
    assert a.free_gpus("T4-NODE") == 0
    with pytest.raises(KeyError, match="unknown chain"):
        a.place("v", "A", [1], chain="V100")
    a.check_invariants()


# ------------------------------------------------------------------ priorities: two views over the same cells
def test_guaranteed_binding_picks_cell_with_fewest_opportunistic_gpus():
    a = rack_alloc(2, {"A": {"NODE": 2}, "B": {"NODE": 2}})
    a.place("o1", "A", [8], opportunistic=True)
    a.place("o2", "A", [4], opportunistic=True)
    a.place("o3", "A", [2], opportunistic=True)
    assert [a.grant_of(o).cells for o in ("o1", "o2", "o3")] == [["n0"], ["n1/0"], ["n1/1.0"]]
    # rack1 holds no opportunistic GPU: B's two nodes come from there, no victims
    assert a.place("g1", "B", [8]).victims == set()
    assert a.place("g2", "B", [8]).victims == set()
    # A must now take rack0: n1 (6 opportunistic GPUs) before n0 (8)
    g3 = a.place("g3", "A", [8])
    assert g3.cells == ["n1"] and g3.victims == {"o2", "o3"}
    g4 = a.place("g4", "A", [8])
    assert g4.cells == ["n0"] and g4.victims == {"o1"}
    a.check_invariants()


def test_opportunistic_goes_far_from_guaranteed_cells():
    a = rack_alloc(2, {"A": {"NODE": 2}, "B": {"NODE": 2}})
    a.place("g", "A", [1])                                  # binds n0 in rack0
    got = [a.place(f"o{i}", "B", [2], opportunistic=True).cells[0] for i in range(3)]
    assert all(c.startswith("n2/") for c in got)            # rack1, and packed into one node
    assert not any(c.startswith(("n0", "n1")) for c in got)
    a.check_invariants()


def test_exact_victims_returned_and_kept_until_released():
    a = rack_alloc(1, {"A": {"NODE": 2}})
    for i in range(4):
        a.place(f"o{i}", "A", [2], opportunistic=True)     # packed: all of n0
    a.place("o4", "A", [1], opportunistic=True)            # n0 full, so n1/gpu0
    assert a.grant_of("o4").cells == ["n1/gpu0"]
    g = a.place("g", "A", [4])                             # socket with fewest opportunistic GPUs: n1/1
    assert g.cells == ["n1/1"] and g.victims == set()
    g2 = a.place("g2", "A", [4])                           # n1/0 holds o4
    assert g2.cells == ["n1/0"] and g2.victims == {"o4"}
    g3 = a.place("g3", "A", [2, 2])                        # both switches of one n0 socket
    assert g3.victims in ({"o0", "o1"}, {"o2", "o3"})
    assert a.grant_of("o0").cells                          # victims keep their GPUs until released
    for v in g3.victims:
        a.release(v)
    a.check_invariants()


def test_opportunistic_never_shares_gpus():
    a = rack_alloc(1, {"A": {"NODE": 2}})
    assert a.place("o", "A", [8, 8], opportunistic=True) is not None
    assert a.place("p", "A", [1], opportunistic=True) is None
    a.release("o")
    assert a.free_gpus() == 16


# ------------------------------------------------------------------ weighted max-min shares
def test_weighted_max_min_water_filling():
    assert weighted_max_min({"a": 10, "b": 10}, {"a": 1, "b": 3}, 8) == {"a": 2.0, "b": 6.0}
    # a small demand is met in full, the rest is split by weight
    assert weighted_max_min({"a": 1, "b": 10, "c": 10}, {"a": 1, "b": 1, "c": 1}, 9) == {"a": 1.0, "b": 4.0, "c": 4.0}
    assert weighted_max_min({"a": 0, "b": 3}, {"a": 5, "b": 1}, 8) == {"a": 0.0, "b": 3.0}


def test_opportunistic_share_enforced_when_demand_is_known():
    # weights default to the VC's GPU count: 8 (A) and 24 (B)
    a = rack_alloc(2, {"A": {"NODE": 1}, "B": {"NODE": 3}})
    assert a.spec.vcs["A"].weight == 8 and a.spec.vcs["B"].weight == 24
    a.set_opportunistic_demand("A", 32)
    a.set_opportunistic_demand("B", 32)
    shares = a.opportunistic_shares()
    assert shares == {"A": 8.0, "B": 24.0}
    n = 0
    while a.place(f"a{n}", "A", [1], opportunistic=True) is not None:
        n += 1
    assert n == 8                                           # A stops at its share
    assert a.place("b", "B", [8, 8], opportunistic=True) is not None
    a.set_opportunistic_demand("B", 0)                      # B leaves: A may take the rest
    assert a.place("a-more", "A", [1], opportunistic=True) is not None


# ------------------------------------------------------------------ health
def test_unhealthy_cells_avoided_while_healthy_choice_exists():
    a = rack_alloc(2, {"A": {"NODE": 2}, "B": {"NODE": 2}})
    a.set_health("n0", None, False)
    a.set_health("n1", 3, False)
    assert a.place("g1", "A", [8]).cells == ["n2"]
    assert a.place("g2", "A", [8]).cells == ["n3"]
    assert a.unhealthy() == [f"n0/gpu{i}" for i in range(8)] + ["n1/gpu3"]
    a.check_invariants()


def test_doomed_bad_cell_binding_and_recovery():
    a = rack_alloc(2, {"A": {"NODE": 2}, "B": {"NODE": 2}})
    a.set_health("n0", None, False)
    a.set_health("n1", 3, False)
    a.place("g1", "A", [8])
    a.place("g2", "A", [8])
    # B has no healthy node left: its cells are bound to the bad ones so its view shows them
    assert a.place("g3", "B", [8]) is None
    view = a.vc_view("B")
    assert view.levels[("RACK", 4)].unhealthy == 2
    assert {b["cell"] for b in view.bound_cells if b["doomed"]} == {"n0", "n1"}
    g4 = a.place("g4", "B", [1])                            # healthy GPUs of a doomed cell are usable
    assert g4.pods[0].node == "n1" and g4.pods[0].gpus != (3,)
    a.set_health("n0", None, True)                          # healed and idle: unbound again
    assert a.tree.cell("n0").bound_vc is None
    assert a.set_health("n2", 0, False) == ["g1"]           # owners hit by a failure are named
    a.check_invariants()


def test_set_health_bad_input():
    a = rack_alloc(1, {"A": {"NODE": 1}})
    with pytest.raises(KeyError, match="unknown node 'nx'"):
        a.set_health("nx", None, False)
    with pytest.raises(KeyError, match="node n0 has no GPU 9"):
        a.set_health("n0", 9, False)


# ------------------------------------------------------------------ static binding
def test_static_binding_binds_everything_up_front():
    a = rack_alloc(2, {"A": {"NODE": 2}, "B": {"SOCK": 3, "SW": 2}}, binding="static")
    vb = a.vc_view("B")
    assert vb.levels[("RACK", 3)].used == 3 and vb.levels[("RACK", 2)].used == 2
    assert a.vc_view("A").levels[("RACK", 4)].used == 2
    for x in ("x", "y", "z"):
        assert a.place(x, "B", [4]) is not None
    assert a.place("w", "B", [4]) is None                   # switches cannot hold 4 GPUs
    a.release("x")
    assert a.vc_view("B").levels[("RACK", 3)].used == 3     # stays bound after release
    a.check_invariants()
    with pytest.raises(ValueError, match="binding must be"):
        rack_alloc(1, {"A": {"NODE": 1}}, binding="lazy")


# ------------------------------------------------------------------ reconfiguration
def test_reconfigure_downgrades_what_no_longer_fits():
    a = rack_alloc(2, {"A": {"NODE": 2}, "B": {"NODE": 2}})
    a.place("g1", "A", [8])
    a.place("g2", "A", [2, 2])
    a.place("g3", "B", [4])
    a.place("o", "B", [1], opportunistic=True)
    before = {o: g.cells for o, g in a.grants().items()}
    down = a.reconfigure(load_spec(rack_doc(2, {"A": {"NODE": 1}, "B": {"NODE": 3}})))
    assert down == ["g2"]
    after = a.grants()
    assert {o: g.cells for o, g in after.items()} == before  # nothing lost, same GPUs
    assert after["g2"].opportunistic and after["g2"].downgraded
    assert not after["g1"].opportunistic
    # B's new nodes: n3 (1 opportunistic GPU) first, then n1 where the downgraded job is a victim
    g4 = a.place("g4", "B", [8])
    assert g4.cells == ["n3"] and g4.victims == {"o"}
    g5 = a.place("g5", "B", [8])
    assert g5.cells == ["n1"] and g5.victims == {"g2"}
    a.check_invariants()


def test_reconfigure_refuses_to_drop_a_busy_vc_and_keeps_bad_hardware():
    a = rack_alloc(2, {"A": {"NODE": 2}, "B": {"NODE": 2}})
    a.place("b1", "B", [1])
    a.set_health("n3", 1, False)
    with pytest.raises(BindingConflict, match=r"reconfiguration refused: VC 'B' is not in the new spec but still "
                                              r"holds b1 \(release them first\)"):
        a.reconfigure(load_spec(rack_doc(2, {"A": {"NODE": 4}})))
    assert a.grant_of("b1").vc == "B" and a.spec.vcs.keys() == {"A", "B"}    # nothing changed
    a.release("b1")
    assert a.reconfigure(load_spec(rack_doc(2, {"A": {"NODE": 4}}))) == []
    assert a.unhealthy() == ["n3/gpu1"] and set(a.spec.vcs) == {"A"}
    a.check_invariants()


def test_restore_refuses_double_binding():
    a = rack_alloc(1, {"A": {"NODE": 2}})
    g = a.place("g", "A", [8])
    data = g.to_dict()
    b = rack_alloc(1, {"A": {"NODE": 2}})
    b.restore(data)
    assert b.grant_of("g").cells == ["n0"]
    data2 = dict(data, owner="h")
    with pytest.raises(BindingConflict, match="h: a GPU of cell n0 is already bound"):
        b.restore(data2)
    b.check_invariants()


# ------------------------------------------------------------------ API bad input
def test_place_bad_input_changes_nothing():
    a = rack_alloc(1, {"A": {"NODE": 1}})
    with pytest.raises(KeyError, match="unknown VC 'Z'"):
        a.place("x", "Z", [1])
    with pytest.raises(ValueError, match="pod_gpus"):
        a.place("x", "A", [0])
    a.place("x", "A", [1])
    with pytest.raises(ValueError, match="already holds cells"):
        a.place("x", "A", [1])
    assert a.place("big", "A", [16]) is None
    assert "larger than a RACK node" in a.why_never("A", [16])
    assert a.why_never("A", [4, 4]) is None
    assert "holds 8 RACK GPUs" in a.why_never("A", [4, 4, 4])
    a.check_invariants()


# ------------------------------------------------------------------ gang options
def test_within_level_keeps_the_gang_in_one_cell():
    a = rack_alloc(2, {"A": {"NODE": 2}})
    assert a.place("g", "A", [2, 2, 2], within_level=3) is None   # 6 GPUs do not fit one socket
    g = a.place("g2", "A", [4, 4], within_level=4)
    assert g.cells == ["n0/0", "n0/1"]
    assert a.place("g3", "A", [4, 4, 4], within_level=4) is None
    assert a.why_never("A", [4, 4, 4], within_level=4) == "the gang needs 12 GPUs in cells, one NODE cell holds 8"
    g4 = a.place("g4", "A", [2, 2], within_level=3)                # a socket of A's second node
    assert {c.split("/")[0] for c in g4.cells} == {"n1"} and len({c[:4] for c in g4.cells}) == 1
    a.check_invariants()


def test_node_veto_is_respected():
    a = rack_alloc(2, {"A": {"NODE": 2}})
    a.place("g", "A", [4])                                          # binds n0
    g = a.place("g2", "A", [1], node_ok=lambda node, gpus: node != "n0")
    assert g.pods[0].node == "n1"
    assert a.place("g3", "A", [8], node_ok=lambda node, gpus: False) is None
    assert a.grant_of("g3") is None
    a.check_invariants()


# ------------------------------------------------------------------ exchange transfers
def test_transfer_moves_unbound_cells_safely():
    a = rack_alloc(2, {"A": {"NODE": 2}, "B": {"NODE": 2}})
    a.place("a1", "A", [8])
    with pytest.raises(ValueError, match="unsafe transfer: VC A holds 2 RACK.NODE cells, 1 of them in use, "
                                         "so it cannot lend 2"):
        a.transfer("A", "B", "RACK", 4, 2)
    a.transfer("A", "B", "RACK", 4, 1)
    vb = a.vc_view("B").levels[("RACK", 4)]
    assert (vb.total, vb.borrowed) == (3, 1) and a.vc_view("A").levels[("RACK", 4)].lent == 1
    assert all(a.place(f"b{i}", "B", [8]) is not None for i in range(3))
    assert a.place("a2", "A", [1]) is None
    a.check_invariants()
    for i in range(3):
        a.release(f"b{i}")
    a.transfer("B", "A", "RACK", 4, 1)                              # paying back clears the loan
    assert a.vc_view("B").levels[("RACK", 4)].borrowed == 0 and a.vc_view("A").levels[("RACK", 4)].lent == 0
    with pytest.raises(ValueError, match="level 9 is not a level of chain RACK"):
        a.transfer("A", "B", "RACK", 9, 1)


def test_restore_from_pod_annotations():
    a = rack_alloc(1, {"A": {"NODE": 2}})
    a.restore({"owner": "j", "vc": "A", "pods": [{"node": "n1", "gpus": [2, 3]}]})
    g = a.grant_of("j")
    assert g.cells == ["n1/0.1"] and g.pods[0].gpus == (2, 3)      # socket 0, switch 1
    assert a.tree.cell("n1").bound_vc == "A"
    with pytest.raises(BindingConflict, match=r"k: node 'n9' GPUs \[0\] do not exist in this spec"):
        a.restore({"owner": "k", "vc": "A", "pods": [{"node": "n9", "gpus": [0]}]})
    a.check_invariants()


def test_cli_console_script_runs(tmp_path):
    import subprocess
    import sys
    from pathlib import Path
    exe = Path(sys.executable).with_name("hived")
    broken = Path(__file__).parent / "broken_specs" / "02_cycle.yaml"
    p = subprocess.run([str(exe), "spec", "check", str(broken)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert p.stderr.strip() == ("hived spec check: physicalCluster.cellTypes.C.childCellType: "
                                "cell type cycle: A -> B -> C -> A")


# ------------------------------------------------------------------ free list order
def test_a_released_cell_queues_behind_the_cells_free_since_the_start():
    """Clean free cells rank alike, whether listed at the start or after a release: among
    them the one free longest is taken first (a fresh cell is not ranked as if it carried
    opportunistic work). Both ways a cell is first listed: a child of a partly pinned rack,
    and a root of a chain whose roots are nodes."""
    pinned = {"A": {"pinnedCells": [{"pinnedCellId": "pa"}, {"pinnedCellId": "pb"}]}, "B": {"NODE": 2}}
    a = Allocator(load_spec(rack_doc(2, pinned, pinned={"n0": "pa", "n2": "pb"})))
    taken = []
    for i in range(3):
        taken.append(a.place(f"g{i}", "B", [8]).cells[0])
        a.release(f"g{i}")
    assert taken == ["n1", "n3", "n1"]
    a = Allocator(load_spec(_two_chain_doc()))
    taken = []
    for i in range(3):
        taken.append(a.place(f"t{i}", "A", [4], chain="T4-NODE").pods[0].node)
        a.release(f"t{i}")
    assert taken == ["t0", "t1", "t0"]
    a.check_invariants()


def test_a_bad_node_is_passed_over_for_a_cell_split_safely_and_never_for_a_reserved_one():
    """The only free node holds a bad GPU: the job takes a healthy node split from the other
    rack when that keeps invariant (2); when another VC reserves that whole rack it must not."""
    vcs = {"A": {"pinnedCells": [{"pinnedCellId": "pa"}]}, "B": {"NODE": 1}}
    a = Allocator(load_spec(rack_doc(2, vcs, pinned={"n0": "pa"})))
    a.set_health("n1", 0, False)
    g = a.place("b", "B", [8])
    assert g.cells == ["n2"] and not a.tree.cell("n2").doomed
    a.check_invariants()
    a = Allocator(load_spec(rack_doc(2, {**vcs, "C": {"RACK": 1}}, pinned={"n0": "pa"})))
    a.set_health("n1", 0, False)
    g = a.place("b", "B", [8])
    assert g is None or g.cells == ["n1"]      # never a node of the rack C reserves
    a.check_invariants()
