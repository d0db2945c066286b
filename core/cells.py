"""Physical cell trees, one forest per chain.

A cell is a set of affinitized GPUs; a level-k cell splits into
``children_per_level[k-1]`` level-(k-1) buddies. Leaves (level 1) are GPUs
with the node they sit on and their index on that node.

Cell ids are unique in the cluster:
- node-level and higher cells: their address (``node-3``, ``rack-0``);
- cells between GPU and node: ``<node>/<addr>.<addr>`` (addresses from the
  node down, e.g. ``node-3/1.0`` = socket 1, PCIe switch 0);
- GPUs: ``<node>/gpu<index>``.

Each cell also carries the counters the allocator keeps up to date (pods,
bound GPUs, unhealthy GPUs, free-list membership); keeping them on the cell
(with ``__slots__``) is what keeps a 65,536-GPU cluster small and fast.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from .spec import CellSpec, Chain, ClusterSpec


class FreeList(Protocol):
    """What a cell knows of the free list holding it (``alloc.buckets.Buckets``, which sets
    ``Cell.free_list``): named here so that the cell does not import the allocator's lists."""

    physical: bool

    def remove(self, cell: Cell) -> None: ...

    def rekey(self, cell: Cell, key: int) -> None: ...

_LEAF_COUNTS: list[int] = []   # shared by all GPUs: a leaf has no children to count


class Cell:
    __slots__ = (
        "id", "chain", "level", "parent", "children", "index", "node", "gpu_index", "gpus", "pinned_id",
        "free_list", "free_key", "phys_free_children", "vc_free_children", "bound_vc", "doomed",
        "guaranteed_owner", "opportunistic_owner", "waiting_owner", "opportunistic_gpus", "guaranteed_gpus",
        "bound_gpus", "bad_gpus", "clean_level", "clean_children",
    )

    def __init__(self, cid: str, chain: str, level: int, parent: Cell | None, index: int,
                 node: str | None, gpus: int, pinned_id: str | None):
        self.id = cid                      # unique in the cluster (see the module docstring)
        self.chain = chain                 # the chain (cell type tree) it belongs to
        self.level = level                 # 1 = GPU
        self.parent = parent               # None for a top cell
        self.children: list[Cell] = []    # its buddies one level down, in spec order
        self.index = index                 # position among its siblings
        self.node = node                   # node it lies in (None above node level)
        self.gpu_index = -1                # a GPU's index on its node (-1 for other cells)
        self.gpus = gpus                   # GPUs inside
        self.pinned_id = pinned_id         # the spec's pinned-cell id, when it is one
        # allocator state
        self.free_list: FreeList | None = None  # the free list holding this cell, or None
        self.free_key = 0                  # its key in that list
        self.phys_free_children = 0        # children in the physical free lists (O(1) buddy-merge test)
        self.vc_free_children = 0          # children in a VC's free lists
        self.bound_vc: str | None = None   # VC this cell is bound to (a preassigned or pinned VC cell)
        self.doomed = False                # bound only because its VC had no healthy choice (HiveD, OSDI '20, §4)
        self.guaranteed_owner: str | None = None     # owner of the guaranteed pod on exactly this cell
        self.opportunistic_owner: str | None = None  # owner of the opportunistic pod on exactly this cell
        # a downgraded job's pod on exactly this cell, waiting for its victim (``opportunistic_owner``) to leave
        self.waiting_owner: str | None = None
        self.opportunistic_gpus = 0        # GPUs under opportunistic pods at or below this cell
        self.guaranteed_gpus = 0           # GPUs under guaranteed pods at or below this cell
        self.bound_gpus = 0                # GPUs inside bound VC cells at or below this cell
        self.bad_gpus = 0                  # unhealthy GPUs below (a GPU: 1 if unhealthy)
        self.clean_level = level           # highest level of a sub-cell with no pod and no bad GPU (0: none)
        # clean_children[l] = children whose clean_level is l
        self.clean_children = [0] * level if level > 1 else _LEAF_COUNTS

    def __repr__(self) -> str:
        return f"Cell({self.id!r}, L{self.level})"

    def ancestors(self) -> Iterator[Cell]:
        c = self.parent
        while c is not None:
            yield c
            c = c.parent

    def leaves(self) -> Iterator[Cell]:
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

    def contains(self, other: Cell) -> bool:
        c: Cell | None = other
        while c is not None and c.level <= self.level:
            if c is self:
                return True
            c = c.parent
        return False


class CellTree:
    """All physical cells of a spec: per chain the top cells, plus lookups by id and node."""

    def __init__(self, spec: ClusterSpec):
        self.spec = spec
        self.roots: dict[str, list[Cell]] = {}       # chain -> its top cells
        self.by_id: dict[str, Cell] = {}
        self.nodes: dict[str, Cell] = {}             # node name -> node cell
        self.node_chain: dict[str, str] = {}         # node name -> chain
        self.pinned: dict[str, Cell] = {}            # pinned-cell id -> cell
        for name, chain in spec.chains.items():
            self.roots[name] = [self._build(chain, cs, None, i, None, None) for i, cs in enumerate(chain.cells)]

    def _build(self, chain: Chain, cs: CellSpec, parent: Cell | None, index: int,
               node: str | None, prefix: str | None) -> Cell:
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
                    chain.gpus_per_level[level - 1], cs.pinned_id)
        if level == 1:
            assert cs.gpu_index is not None, f"GPU cell {cid} has no index"
            cell.gpu_index = cs.gpu_index
        else:
            cell.clean_children[level - 1] = len(cs.children)  # all children fully clean at start
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
        node_level = self.spec.chains[cell.chain].node_level
        if cell.level <= node_level:
            c = cell
            while c.level < node_level:
                assert c.parent is not None
                c = c.parent
            return [c]
        out, stack = [], [cell]
        while stack:
            c = stack.pop()
            if c.level == node_level:
                out.append(c)
            else:
                stack.extend(reversed(c.children))
        return out

    def lca(self, cells: list[Cell]) -> Cell:
        """Smallest cell holding all of ``cells`` (same chain)."""
        anc = cells[0]
        for c in cells[1:]:
            while not anc.contains(c):
                if anc.parent is None:
                    raise ValueError("cells are in different trees")
                anc = anc.parent
        return anc
