"""Small spec builders shared by the core tests."""
from __future__ import annotations

from hived.core.allocator import Allocator
from hived.core.spec import load_spec

# GPU / PCIe switch (2) / socket (4) / node (8) / rack
RACK_TYPES = {
    "SW": {"childCellType": "GPU", "childCellNumber": 2},
    "SOCK": {"childCellType": "SW", "childCellNumber": 2},
    "NODE": {"childCellType": "SOCK", "childCellNumber": 2, "isNodeLevel": True},
    "RACK": {"childCellType": "NODE", "childCellNumber": 2},
}
# a second, small chain: 4-GPU nodes of another GPU model
SMALL_TYPES = {
    "T4-NODE": {"childCellType": "T4", "childCellNumber": 4, "isNodeLevel": True},
}


def rack_doc(racks: int, vcs: dict, nodes_prefix: str = "n", pinned: dict | None = None) -> dict:
    """``racks`` racks of 2 eight-GPU nodes named n0, n1, ...; vcs: name -> {"TYPE": count} or a raw dict."""
    cells = []
    pinned = pinned or {}
    for r in range(racks):
        kids = []
        for j in range(2):
            name = f"{nodes_prefix}{2 * r + j}"
            kid = {"cellAddress": name}
            if name in pinned:
                kid["pinnedCellId"] = pinned[name]
            kids.append(kid)
        cells.append({"cellType": "RACK", "cellAddress": f"rack{r}", "cellChildren": kids})
    return {"physicalCluster": {"cellTypes": dict(RACK_TYPES), "physicalCells": cells},
            "virtualClusters": {name: _vc(v) for name, v in vcs.items()}}


def _vc(v: dict) -> dict:
    if "virtualCells" in v or "pinnedCells" in v:
        return v
    return {"virtualCells": [{"cellType": t if "." in t else f"RACK.{t}", "cellNumber": n} for t, n in v.items()]}


def rack_alloc(racks: int, vcs: dict, binding: str = "dynamic", **kw) -> Allocator:
    return Allocator(load_spec(rack_doc(racks, vcs, **kw)), binding=binding)


def free_counts(alloc: Allocator, chain: str = "RACK") -> list[int]:
    """Physical free list lengths per level (index = level, 0 unused)."""
    return [0] + [len(b) for b in alloc.physical.free[chain][1:]]


def victim_setup() -> Allocator:
    """A guaranteed job ``g`` of A placed over an opportunistic job ``o1`` of B that has not
    left yet (``o2`` of B fills the other node: every GPU busy)."""
    a = rack_alloc(1, {"A": {"NODE": 1}, "B": {"NODE": 1}})
    assert a.place("o1", "B", [4, 4], opportunistic=True).cells == ["n0/0", "n0/1"]
    assert a.place("o2", "B", [4, 4], opportunistic=True).cells == ["n1/0", "n1/1"]
    g = a.place("g", "A", [8])
    assert g.cells == ["n0"] and g.victims == {"o1"}
    return a
