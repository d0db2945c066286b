"""Guaranteed placement: every pod of a gang in a cell of its VC, all or nothing.

Pods are taken biggest first from the VC's view (``Binder.take``); a gang
kept ``within_level`` goes into one level-w cell (partly used cells first,
then free ones, then a newly bound one). A failure rolls back every split and
binding it made, so a refused gang changes nothing but cells bound doomed to
bad hardware (HiveD, OSDI '20, §4).
"""
from __future__ import annotations

from collections.abc import Iterator

from ..cells import Cell, CellTree
from ..grant import Grant
from ..spec import ClusterSpec
from .binder import Binder
from .buckets import Buckets
from .buddy import NodeOk, carve, free_key, pod_levels, usable
from .pod_marks import set_pod, victims_under
from .virtual_cluster import VirtualCluster


class GuaranteedPlacer:
    def __init__(self, spec: ClusterSpec, tree: CellTree, binder: Binder):
        self.spec = spec
        self.tree = tree
        self.binder = binder

    def place(self, owner: str, vc: VirtualCluster, chain: str, pod_gpus: list[int], priority: int,
              within_level: int | None, node_ok: NodeOk) -> Grant | None:
        levels = pod_levels(self.spec.chains[chain], pod_gpus)
        if levels is None:
            return None
        order = sorted(range(len(pod_gpus)), key=lambda i: -levels[i])  # big pods first
        if within_level is None:
            cells = self._take_pods(vc, chain, levels, pod_gpus, order, node_ok, None)
        else:
            cells = self._take_within(vc, chain, levels, pod_gpus, order, node_ok, within_level)
        if cells is None:
            return None
        return self._grant(owner, vc, chain, priority, cells, pod_gpus)

    def allocate(self, owner: str, vc: VirtualCluster, chain: str, level: int) -> Grant | None:
        """One whole cell of ``level`` (any level, e.g. a rack)."""
        c = self.binder.take(vc, chain, level, None, 0)
        if c is None:
            return None
        return self._grant(owner, vc, chain, 0, [c], [c.gpus])

    def _grant(self, owner: str, vc: VirtualCluster, chain: str, priority: int, cells: list[Cell],
               pod_gpus: list[int]) -> Grant:
        victims: set[str] = set()
        for c in cells:
            victims |= victims_under(c)
            set_pod(c, owner, False)
        return Grant(owner, vc.name, chain, False, priority, None, victims,
                     held=[(c.id, g) for c, g in zip(cells, pod_gpus)],
                     bound_in=[bound_root(c) for c in cells], tree=self.tree)

    def _take_pods(self, vc: VirtualCluster, chain: str, levels: list[int], pod_gpus: list[int],
                   order: list[int], node_ok: NodeOk, within: Cell | None) -> list[Cell] | None:
        """One cell per pod, all or nothing: a failure leaves the free lists and bindings as they were."""
        binder = self.binder
        mark = len(binder.fresh)
        cells: list[Cell | None] = [None] * len(levels)
        for i in order:
            c = binder.take(vc, chain, levels[i], node_ok, pod_gpus[i], within)
            if c is None:
                for j in order:  # roll back, buddies merge again
                    got = cells[j]
                    if got is not None:
                        binder.free(vc, got, unbind=False)
                binder.drop_fresh(mark)
                return None
            cells[i] = c
        return [c for c in cells if c is not None]

    def _take_within(self, vc: VirtualCluster, chain: str, levels: list[int], pod_gpus: list[int],
                     order: list[int], node_ok: NodeOk, w: int) -> list[Cell] | None:
        """All pods inside one level-``w`` cell: try partly used cells, then free ones, then new bindings."""
        ch = self.spec.chains[chain]
        if w < max(levels) or w > ch.top_level or \
                sum(ch.gpus_per_level[lv - 1] for lv in levels) > ch.gpus_per_level[w - 1]:
            return None
        lists = vc.free[chain]
        candidates: list[Cell] = []
        for (c, k), cellset in vc.bound.items():
            if c == chain and k >= w:
                candidates += list(cellset)
        candidates += [p for p in vc.pinned if p.chain == chain and p.level >= w]
        tried = set()
        for root in candidates:  # partly used level-w cells inside bound cells
            for x in cells_at(root, w):
                if x.free_list is None and x.guaranteed_owner is None and x not in tried:
                    tried.add(x)
                    got = self._take_pods(vc, chain, levels, pod_gpus, order, node_ok, x)
                    if got is not None:
                        return got
        for k in range(w, ch.top_level + 1):  # fully free VC cells at level >= w
            for y in list(lists[k].ordered()):
                if usable(y, max(levels), node_ok, max(pod_gpus)):
                    x = carve(lists, y, w)
                    got = self._take_pods(vc, chain, levels, pod_gpus, order, node_ok, x)
                    if got is not None:
                        return got
                    self._uncarve(vc, lists, x)
        binder = self.binder
        for k in range(w, ch.top_level + 1):  # bind a new preassigned cell
            if vc.unbound(chain, k) > 0:
                mark = len(binder.fresh)
                cell = binder.physical.take(chain, k, w, node_ok, max(pod_gpus))
                if cell is None:
                    continue
                binder.bind(vc, cell, doomed=cell.bad_gpus > 0)
                lists[k].add(cell, free_key(cell))
                x = carve(lists, cell, w)
                got = self._take_pods(vc, chain, levels, pod_gpus, order, node_ok, x)
                if got is not None:
                    return got
                self._uncarve(vc, lists, x)
                binder.drop_fresh(mark)
                return None
        return None

    def _uncarve(self, vc: VirtualCluster, lists: list[Buckets], x: Cell) -> None:
        """Undo ``carve`` after a failed try: merge the listed buddies back.

        When pods were placed and rolled back, their release already merged
        ``x`` into the cell it was carved from; then there is nothing left to do.
        """
        if x.free_list is lists[x.level]:
            x.free_list.remove(x)
            self.binder.free(vc, x, unbind=False)


def bound_root(c: Cell) -> tuple[str, int] | None:
    """(id, level) of the bound VC cell holding ``c``, or None."""
    x: Cell | None = c
    while x is not None:
        if x.bound_vc is not None:
            return x.id, x.level
        x = x.parent
    return None


def cells_at(root: Cell, level: int) -> Iterator[Cell]:
    """Level-``level`` cells inside ``root`` not under a listed cell or a guaranteed pod."""
    if root.level == level:
        yield root
        return
    stack = [root]
    while stack:
        c = stack.pop()
        if c.level == level:
            yield c
        elif c.level > level and c.free_list is None and c.guaranteed_owner is None:
            stack.extend(reversed(c.children))
