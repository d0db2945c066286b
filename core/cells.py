"""Physical cell trees, one forest per chain.

A cell is a set of affinitized GPUs; a level-k cell splits into
``children_per_level[k-1]`` level-(k-1) buddies. Leaves (level 1) are GPUs
with the node they sit on and their index on that node.

Cell ids are unique in the cluster:
- node-level and higher cells: their address (``node-3``, ``rack-0``);
- cells between GPU and node: ``<node>/<addr>.<addr>`` (addresses from the
  node down, e.g. ``node-3/1.0`` = socket 1, PCIe switch 0);
- GPUs: ``<node>/gpu<index>``.

Each cell also carries the mutable counters the allocator keeps up to date
(opportunistic GPUs, unhealthy GPUs, ...); keeping them on the cell (with
``__slots__``) is what keeps a 65,536-GPU cluster small and fast.
"""
from __future__ import annotations

from typing import Iterator, Optional

from .spec import CellSpec, Chain, ClusterSpec


class Cell:
    __slots__ = (
        "id", "chain", "level", "parent", "children", "index", "node", "gpu_index", "gpus", "pinned_id",
        # allocator state
        "flist",      # the free list (Buckets) holding this cell, or None
        "fkey",       # its key in that list
        "nfc",        # children held in the physical free lists (buddy merge test in O(1))
        "vfc",        # children held in a VC's free lists
        "bound_vc",   # VC name when this cell is a bound VC cell (a preassigned or pinned cell)
        "doomed",     # bound only because the VC had no healthy choice (001 §4)
        "gpod",       # owner of the guaranteed pod bound exactly to this cell
        "opod",       # owner of the opportunistic pod bound exactly to this cell
        "opp",        # GPUs under opportunistic pods at or below this cell
        "gp",         # GPUs under guaranteed pods at or below this cell
        "gb",         # GPUs inside bound VC cells at or below this cell
        "bad",        # unhealthy GPUs below (leaf: 1 if unhealthy)
        "ofree",      # highest level of a sub-cell with no pod and no bad GPU (0: none)
        "ocnt",       # ocnt[l] = children whose ofree == l
    )

    def __init__(self, cid: str, chain: str, level: int, parent: Optional["Cell"], index: int,
                 node: Optional[str], gpus: int, pinned_id: Optional[str], nlevels: int):
        self.id = cid
        self.chain = chain
        self.level = level
        self.parent = parent
        self.children: list[Cell] = []
        self.index = index
        self.node = node
        self.gpu_index: Optional[int] = None
        self.gpus = gpus
        self.pinned_id = pinned_id
        self.flist = None
        self.fkey = None
        self.nfc = 0
        self.vfc = 0
        self.bound_vc: Optional[str] = None
        self.doomed = False
        self.gpod: Optional[str] = None
        self.opod: Optional[str] = None
        self.opp = 0
        self.gp = 0
        self.gb = 0
        self.bad = 0
        self.ofree = level
        self.ocnt = [0] * (level) if level > 1 else None  # index l in 0..level-1

    def __repr__(self) -> str:
        return f"Cell({self.id!r}, L{self.level})"

    def ancestors(self) -> Iterator["Cell"]:
        c = self.parent
        while c is not None:
            yield c
            c = c.parent

    def leaves(self) -> Iterator["Cell"]:
        if self.level == 1:
            yield self
            return
        stack = [self]
        while stack:
            c = stack.pop()
            if c.level == 1:
                yield c
            else:
                stack.extend(reversed(c.children))

    def contains(self, other: "Cell") -> bool:
        c = other
        while c is not None and c.level <= self.level:
            if c is self:
                return True
            c = c.parent
        return False


class CellTree:
    """All physical cells of a spec: per chain the top cells, plus lookups by id and node."""

    def __init__(self, spec: ClusterSpec):
        self.spec = spec
        self.roots: dict[str, list[Cell]] = {}
        self.by_id: dict[str, Cell] = {}
        self.nodes: dict[str, Cell] = {}             # node name -> node cell
        self.node_chain: dict[str, str] = {}
        self.pinned: dict[str, Cell] = {}
        for name, chain in spec.chains.items():
            self.roots[name] = [self._build(chain, cs, None, i, None, None) for i, cs in enumerate(chain.cells)]

    def _build(self, chain: Chain, cs: CellSpec, parent: Optional[Cell], index: int,
               node: Optional[str], prefix: Optional[str]) -> Cell:
        level = cs.level
        if level > chain.node_level:
            cid = cs.address
        elif level == chain.node_level:
            cid = node = cs.address
            prefix = ""
        elif level == 1:
            cid = f"{node}/gpu{cs.gpu_index}"
        else:
            prefix = f"{prefix}.{cs.address}" if prefix else cs.address
            cid = f"{node}/{prefix}"
        cell = Cell(cid, chain.name, level, parent, index, node if level <= chain.node_level else None,
                    chain.gpus_per_level[level - 1], cs.pinned_id, chain.top_level)
        if level == 1:
            cell.gpu_index = cs.gpu_index
        else:
            cell.ocnt[level - 1] = len(cs.children)  # all children fully free at start
            for j, ch in enumerate(cs.children):
                cell.children.append(self._build(chain, ch, cell, j, node, prefix))
        self.by_id[cid] = cell
        if level == chain.node_level:
            self.nodes[cid] = cell
            self.node_chain[cid] = chain.name
        if cs.pinned_id is not None:
            self.pinned[cs.pinned_id] = cell
        return cell

    def cell(self, cid: str) -> Cell:
        return self.by_id[cid]

    def gpu(self, node: str, index: int) -> Cell:
        return self.by_id[f"{node}/gpu{index}"]

    def node_cells(self, cell: Cell) -> list[Cell]:
        """The node-level cells a cell covers (one, the node itself, for cells at or below node level)."""
        chain = self.spec.chains[cell.chain]
        if cell.level <= chain.node_level:
            c = cell
            while c.level < chain.node_level:
                c = c.parent
            return [c]
        out, stack = [], [cell]
        while stack:
            c = stack.pop()
            if c.level == chain.node_level:
                out.append(c)
            else:
                stack.extend(reversed(c.children))
        return out

    def lca(self, cells: list[Cell]) -> Cell:
        """Smallest cell holding all of ``cells`` (same chain)."""
        anc = cells[0]
        for c in cells[1:]:
            while not anc.contains(c):
                anc = anc.parent
                if anc is None:
                    raise ValueError("cells are in different trees")
        return anc
