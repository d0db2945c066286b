"""Binding VC cells to physical cells, and taking and freeing cells in a VC's view.

Two layers, as in HiveD: a pod asks its VC for a cell of the smallest level
holding its GPUs, and the VC runs Algorithm 1 on its own free lists (bound
cells first, then still-unbound preassigned cells). When the VC needs one of
its preassigned level-k cells, that cell is bound to a physical level-k cell
(legal because a_k < r_k, so Theorem 1 says one exists); in dynamic mode it
is unbound again when the VC no longer uses any of it, and buddies merge back.

``fresh`` lists the cells bound since a placement began, so that a placement
that fails can undo exactly its own bindings.
"""
from __future__ import annotations

from ..cells import Cell
from ..grant import BindingConflict
from .buddy import NodeOk, carve_to, free_key, listed_ancestor, split_take, usable
from .physical import PhysicalCluster
from .virtual_cluster import VirtualCluster


class Binder:
    def __init__(self, physical: PhysicalCluster, vcs: dict[str, VirtualCluster], binding: str):
        if binding not in ("dynamic", "static"):
            raise ValueError(f"binding must be 'dynamic' or 'static', got {binding!r}")
        self.physical = physical
        self.vcs = vcs
        self.binding = binding       # "dynamic": bind at first use, unbind when idle; "static": bind all up front
        self.fresh: list[Cell] = []  # cells bound since the current placement began (undone if it fails)

    # ------------------------------------------------------------ binding
    def bind(self, vc: VirtualCluster, cell: Cell, pinned: bool = False, doomed: bool = False) -> None:
        cell.bound_vc = vc.name
        cell.doomed = doomed
        x: Cell | None = cell
        while x is not None:
            x.bound_gpus += cell.gpus
            x = x.parent
        if not pinned:
            vc.bound.setdefault((cell.chain, cell.level), {})[cell] = None
            self.physical.bound_count[cell.chain][cell.level] += 1
            self.fresh.append(cell)

    def unbind(self, cell: Cell) -> None:
        assert cell.bound_vc is not None, f"{cell.id} is not bound"
        del self.vcs[cell.bound_vc].bound[(cell.chain, cell.level)][cell]
        self.physical.bound_count[cell.chain][cell.level] -= 1
        cell.bound_vc = None
        cell.doomed = False
        x: Cell | None = cell
        while x is not None:
            x.bound_gpus -= cell.gpus
            x = x.parent
        self.physical.release(cell)

    def bind_pinned(self) -> None:
        for vc in self.vcs.values():
            for cell in vc.pinned:
                self.bind(vc, cell, pinned=True)
                vc.free[cell.chain][cell.level].add(cell, free_key(cell))

    def bind_all_static(self) -> None:
        """Static binding: every preassigned cell is bound up front, highest levels first."""
        for name in sorted(self.vcs):
            vc = self.vcs[name]
            for (chain, k) in sorted(vc.quota, key=lambda x: (x[0], -x[1])):
                while vc.unbound(chain, k) > 0:
                    cell = self.physical.take(chain, k, k, None, 0)
                    if cell is None:  # pragma: no cover - the spec was checked feasible
                        raise RuntimeError(f"static binding failed for {name} {chain} level {k}")
                    self.bind(vc, cell)
                    vc.free[chain][k].add(cell, free_key(cell))

    # ------------------------------------------------------------ the VC's view
    def take(self, vc: VirtualCluster, chain: str, level: int, node_ok: NodeOk, gpus: int,
             within: Cell | None = None) -> Cell | None:
        """Algorithm 1 on the VC's own view: a free VC cell of ``level`` (bound cells, then unbound quota)."""
        lists = vc.free[chain]
        top = len(lists) - 1
        for k in range(level, top + 1):
            bl = lists[k]
            if len(bl):
                first = bl.first()
                if within is None and first is not None and first.bad_gpus == 0 and node_ok is None:
                    return split_take(lists, first, level, node_ok, gpus)
                for c in bl.ordered():
                    if (within is None or within.contains(c)) and usable(c, level, node_ok, gpus):
                        return split_take(lists, c, level, node_ok, gpus)
            if within is None:
                while vc.unbound(chain, k) > 0:
                    cell = self.physical.take(chain, k, level, node_ok, gpus)
                    if cell is None:
                        break
                    self.bind(vc, cell, doomed=cell.bad_gpus > 0)
                    if usable(cell, level, node_ok, gpus):
                        bl.add(cell, free_key(cell))
                        return split_take(lists, cell, level, node_ok, gpus)
                    bl.add(cell, free_key(cell))  # doomed: visible in the VC view, try the next one
        return None

    def free(self, vc: VirtualCluster, c: Cell, unbind: bool = True) -> None:
        """Release inside the VC's view; merge up to the bound cell, then unbind it (dynamic mode).

        ``unbind=False`` (rolling back a failed placement) keeps the bound
        cell listed in the VC's view; ``drop_fresh`` decides what to unbind.
        """
        lists = vc.free[c.chain]
        while c.bound_vc != vc.name:
            p = c.parent
            assert p is not None, f"{c.id} is outside VC {vc.name}'s cells"
            if p.vc_free_children != len(p.children) - 1:
                break
            for s in p.children:
                if s is not c:
                    lists[s.level].remove(s)
            c = p
        if unbind and c.bound_vc == vc.name and self.binding == "dynamic" and c.pinned_id is None:
            self.unbind(c)
        else:
            lists[c.level].add(c, free_key(c))

    def drop_fresh(self, mark: int, keep_doomed: bool = True) -> None:
        """Undo the bindings made since ``mark`` by a placement that failed.

        Their cells hold no pod any more, so each is one listed cell of its
        VC's view. Cells bound to bad hardware stay bound as doomed (HiveD, OSDI '20, §4),
        as they do after any refusal: the VC's view shows the hardware it
        lacks, and the repair unbinds them.
        """
        for cell in reversed(self.fresh[mark:]):
            if (cell.doomed and keep_doomed) or cell.pinned_id is not None:
                continue
            assert cell.free_list is not None
            cell.free_list.remove(cell)
            self.unbind(cell)
        del self.fresh[mark:]

    # ------------------------------------------------------------ exact cells (restore, reconfigure)
    def carry(self, vc_name: str, cid: str, chain: str, level: int) -> bool:
        """Bind physical cell ``cid`` to ``vc_name`` at ``level`` again, if the spec and invariant (2) allow it."""
        c = self.physical.tree.by_id.get(cid)
        vc = self.vcs.get(vc_name)
        if c is None or vc is None or c.chain != chain or c.level != level:
            return False
        if vc.unbound(chain, level) <= 0:
            return False
        y = listed_ancestor(c)
        if y is None or y.free_list is None or not y.free_list.physical \
                or not self.physical.split_safe(chain, level, y.level):
            return False
        carve_to(self.physical.free[chain], y, c)
        _unlist(c)
        self.bind(vc, c, doomed=c.bad_gpus > 0)
        vc.free[chain][level].add(c, free_key(c))
        return True

    def take_exact(self, owner: str, vc: VirtualCluster, c: Cell, widest: bool = False) -> None:
        """Take cell ``c`` for a guaranteed pod of ``owner``, binding a VC cell around it if needed.

        The VC cell bound is the smallest (``widest``: the largest) level the
        VC has room for that keeps invariant (2); raises BindingConflict
        (having changed nothing) when there is none.
        """
        if c.guaranteed_gpus or any(a.guaranteed_owner for a in c.ancestors()):
            raise BindingConflict(f"{owner}: a GPU of cell {c.id} is already bound to a guaranteed job")
        root = next((a for a in [c, *c.ancestors()] if a.bound_vc is not None), None)
        lists = vc.free[c.chain]
        if root is not None:
            if root.bound_vc != vc.name:
                raise BindingConflict(f"{owner}: cell {c.id} lies in {root.id}, bound to VC {root.bound_vc}")
            y = listed_ancestor(c)
            if y is None or y.free_list is None or y.free_list.physical:
                raise BindingConflict(f"{owner}: cell {c.id} is not free in VC {vc.name}")
            carve_to(lists, y, c)
            _unlist(c)
            return
        top = len(lists) - 1
        y = listed_ancestor(c)
        if y is None or y.free_list is None or not y.free_list.physical:
            raise BindingConflict(f"{owner}: cell {c.id} is not free in the physical cluster")
        levels = range(c.level, y.level + 1)
        for k in (reversed(levels) if widest else levels):
            if vc.unbound(c.chain, k) <= 0:
                continue
            a = c
            while a.level < k:
                assert a.parent is not None
                a = a.parent
            if not self.physical.split_safe(c.chain, k, y.level):
                continue
            carve_to(self.physical.free[c.chain], y, a)
            _unlist(a)
            self.bind(vc, a)
            lists[k].add(a, free_key(a))
            carve_to(lists, a, c)
            _unlist(c)
            return
        raise BindingConflict(f"{owner}: VC {vc.name} has no unbound {c.chain} cell of level {c.level}.."
                              f"{top} left to hold {c.id}")


def _unlist(c: Cell) -> None:
    assert c.free_list is not None, f"{c.id} is not listed"
    c.free_list.remove(c)
