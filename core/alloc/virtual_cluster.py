"""One VC's private cluster (hivedscheduler's virtual cells).

A VC holds ``quota[(chain, level)]`` preassigned cells (r_{t,k}: the spec's
cells, moved by exchange transfers) plus its pinned cells. A preassigned cell
is bound to a physical cell only while the VC uses it (dynamic binding);
``free`` is the VC's own Algorithm-1 free lists over its bound cells.
"""
from __future__ import annotations

from ..cells import Cell, CellTree
from ..spec import ClusterSpec
from .buckets import Buckets, level_lists

LevelKey = tuple[str, int]   # (chain, level)


class VirtualCluster:
    __slots__ = ("name", "weight", "quota", "pinned", "bound", "free", "lent", "borrowed", "opportunistic_demand")

    def __init__(self, spec: ClusterSpec, tree: CellTree, name: str):
        vs = spec.vcs[name]
        self.name = name
        self.weight = vs.weight                               # its weight in the opportunistic max-min shares
        self.quota: dict[LevelKey, int] = dict(vs.cells)      # preassigned cells it holds now
        self.pinned: list[Cell] = [tree.pinned[p] for p in vs.pinned]   # pinned cells, always bound
        self.bound: dict[LevelKey, dict[Cell, None]] = {}     # preassigned cells bound now (ordered set)
        self.free: dict[str, list[Buckets]] = {               # its private cluster's free lists per chain
            c: level_lists(False, f"{name}/{c}", ch.top_level) for c, ch in spec.chains.items()}
        self.lent: dict[LevelKey, int] = {}                   # cells lent to other VCs by exchange
        self.borrowed: dict[LevelKey, int] = {}               # cells borrowed from other VCs
        self.opportunistic_demand = 0                         # GPUs its queue wants opportunistically

    def __repr__(self) -> str:
        return f"VirtualCluster({self.name!r})"

    def unbound(self, chain: str, level: int) -> int:
        """Preassigned cells of a level not bound yet (can go negative only transiently in a transfer)."""
        return self.quota.get((chain, level), 0) - len(self.bound.get((chain, level), ()))

    def chains(self) -> list[str]:
        """Chains it holds any cell of (for guaranteed placement), sorted."""
        have = {c for (c, _), n in self.quota.items() if n > 0}
        have |= {cell.chain for cell in self.pinned}
        have |= {c for (c, _), d in self.bound.items() if d}
        return sorted(have)

    def bound_cells(self) -> list[Cell]:
        return [c for d in self.bound.values() for c in d]
