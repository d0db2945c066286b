"""The physical layer of buddy cell allocation: free lists and invariant (2)'s counts per chain.

``reserved[chain][k]`` is r_k (preassigned cells of all VCs at level k) and
``bound_count[chain][k]`` is a_k (those bound now). Binding a VC cell takes a
physical cell by Algorithm 1 (lowest non-empty level, split down); it may
split a higher cell to avoid bad or vetoed hardware only while invariant (2)
still holds after the split (HiveD, OSDI '20, §3.3, Theorem 1).
"""
from __future__ import annotations

from ..cells import Cell, CellTree
from ..spec import ClusterSpec, first_violation
from .buckets import Buckets, level_lists
from .buddy import NodeOk, free_key, split_take, usable


class PhysicalCluster:
    def __init__(self, spec: ClusterSpec, tree: CellTree):
        self.spec = spec
        self.tree = tree
        self.free: dict[str, list[Buckets]] = {c: level_lists(True, c, ch.top_level) for c, ch in spec.chains.items()}
        self.reserved: dict[str, list[int]] = {c: [0] * (ch.top_level + 1) for c, ch in spec.chains.items()}
        self.bound_count: dict[str, list[int]] = {c: [0] * (ch.top_level + 1) for c, ch in spec.chains.items()}
        for vs in spec.vcs.values():
            for (c, k), n in vs.cells.items():
                self.reserved[c][k] += n
        self._list_free_cells()

    def _list_free_cells(self) -> None:
        """List the maximal cells holding no pinned cell (pinned cells are never free)."""
        def walk(cell: Cell) -> bool:
            if cell.pinned_id is not None:
                return True
            flags = [walk(ch) for ch in cell.children]
            if any(flags):
                for ch, f in zip(cell.children, flags):
                    if not f:
                        self.free[ch.chain][ch.level].add(ch, 0)
                return True
            return False

        for chain, roots in self.tree.roots.items():
            for root in roots:
                if not walk(root):
                    self.free[chain][root.level].add(root, 0)

    def free_counts(self, chain: str) -> list[int]:
        return [len(b) for b in self.free[chain]]

    def split_safe(self, chain: str, k: int, j: int) -> bool:
        """Would splitting a free level-j cell down to a bound level-k cell keep invariant (2)?"""
        ch = self.spec.chains[chain]
        free = self.free_counts(chain)
        free[j] -= 1
        for lvl in range(j - 1, k - 1, -1):
            free[lvl] += ch.children_per_level[lvl] - 1
        alloc = list(self.bound_count[chain])
        alloc[k] += 1
        return first_violation(ch, free, self.reserved[chain], alloc) is None

    def take(self, chain: str, k: int, level: int, node_ok: NodeOk, gpus: int) -> Cell | None:
        """Algorithm 1 ALLOCATECELL for a level-k cell that must hold a usable level-``level`` cell.

        Plain Algorithm 1 takes the lowest non-empty level. To avoid unhealthy
        or vetoed cells it may split a higher cell instead, but only when that
        keeps invariant (2); otherwise it takes the bad cell (to be bound doomed).
        """
        lists = self.free[chain]
        top = self.spec.chains[chain].top_level
        plain = next((j for j in range(k, top + 1) if len(lists[j])), None)
        if plain is None:
            return None
        for j in range(plain, top + 1):
            if not len(lists[j]):
                continue
            first = lists[j].first()
            cand: Cell | None
            if first is not None and first.bad_gpus == 0 and node_ok is None:
                cand = first
            else:
                cand = next((c for c in lists[j].ordered() if usable(c, level, node_ok, gpus)), None)
            if cand is not None:
                if j == plain or self.split_safe(chain, k, j):
                    return split_take(lists, cand, k, node_ok, gpus, need=level)
                break
        # no healthy choice that keeps sharing safety: fall back to the bad cell (doomed)
        for c in lists[plain].ordered():
            if usable(c, level, node_ok, gpus, healthy=False):
                return split_take(lists, c, k, node_ok, gpus, healthy=False, need=level)
        return None

    def release(self, c: Cell) -> None:
        """Algorithm 1 RELEASECELL: merge with free buddies as far up as possible."""
        lists = self.free[c.chain]
        while c.parent is not None and c.parent.phys_free_children == len(c.parent.children) - 1:
            p = c.parent
            for s in p.children:
                if s is not c:
                    lists[s.level].remove(s)
            c = p
        lists[c.level].add(c, free_key(c))
