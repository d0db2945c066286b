"""Buddy cell allocation (HiveD Algorithm 1) with VC views, priorities and health.

Two layers, as in HiveD:

* each VC sees a private cluster made of its cells (``r_{t,k}`` preassigned
  cells per chain and level, plus pinned cells). A pod asks its VC for a cell
  of the smallest level holding its GPUs; the VC runs Algorithm 1 on its own
  free lists (bound cells first, then still-unbound preassigned cells).
* when the VC needs one of its preassigned level-k cells, that cell is bound
  to a physical level-k cell by Algorithm 1 on the physical free lists
  (legal because ``a_{t,k} < r_{t,k}``, so Theorem 1 says one exists); when the
  VC no longer uses any of it, it is unbound and buddies merge back.

Whether a request fits therefore depends only on the VC's own state (sharing
safety); the physical layer only chooses *which* cell: the healthy one with
the fewest opportunistic GPUs. Opportunistic pods use any cell without
guaranteed pods, as far from guaranteed cells as possible; a guaranteed pod
that lands on them names them as victims.

Split over modules: alloc_lists.py (free lists), alloc_opportunistic.py
(low-priority placement and fair shares), alloc_admin.py (views, health,
restore, reconfigure, transfer, invariants).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

from .alloc_admin import AdminMixin, BindingConflict, LevelView, VCView  # noqa: F401 (re-exported)
from .alloc_lists import BAD, Buckets
from .alloc_opportunistic import OpportunisticMixin
from .cells import Cell, CellTree
from .jobs import Placement, PodPlacement
from .spec import ClusterSpec, first_violation, load_spec

NodeOk = Optional[Callable[[str, int], bool]]


class GangGrant:
    """The cells bound to one owner (a job), all pods in one chain."""

    __slots__ = ("owner", "vc", "chain", "opportunistic", "priority", "victims", "_pods", "_cells",
                 "_tree", "downgraded", "_bound")

    def __init__(self, owner, vc, chain, opportunistic, priority, pod_cells, tree, victims=None):
        self.owner = owner
        self.vc = vc
        self.chain = chain
        self.opportunistic = opportunistic
        self.priority = priority
        self.victims: set[str] = set(victims or ())
        self._cells: list[tuple[Cell, int]] = pod_cells  # (cell, GPUs used) per pod, by rank
        self._tree = tree
        self._pods = None
        self.downgraded = False
        # per pod: (id, level) of the VC cell it was bound in, so that a restore can bind exactly that cell
        # again (taken now: a released grant's cells are unbound)
        self._bound = None if opportunistic else [_bound_root(c) for c, _ in pod_cells]

    @property
    def cells(self) -> list[str]:
        return [c.id for c, _ in self._cells]

    @property
    def gpus(self) -> int:
        return sum(g for _, g in self._cells)

    @property
    def pods(self) -> list[PodPlacement]:
        if self._pods is None:
            out = []
            for c, g in self._cells:
                for node in self._tree.node_cells(c):
                    src = c if c.level <= node.level else node
                    leaves = list(src.leaves())[: g if src is c else None]
                    out.append(PodPlacement(rank=len(out), node=node.id,
                                            gpus=tuple(sorted(l.gpu_index for l in leaves)), cells=(src.id,)))
            self._pods = out
        return self._pods

    @property
    def placement(self) -> Placement:
        return Placement(chain=self.chain, pods=tuple(self.pods), opportunistic=self.opportunistic)

    def to_dict(self) -> dict:
        return {"owner": self.owner, "vc": self.vc, "chain": self.chain, "opportunistic": self.opportunistic,
                "priority": self.priority, "cells": self.cells, "gpus": [g for _, g in self._cells],
                "bound": [list(b) if b else None for b in self._bound] if self._bound else None,
                "pods": [{"rank": p.rank, "node": p.node, "gpus": list(p.gpus), "cells": list(p.cells)}
                         for p in self.pods]}

    def __repr__(self) -> str:
        kind = "opportunistic" if self.opportunistic else "guaranteed"
        return f"GangGrant({self.owner!r}, vc={self.vc!r}, {kind}, cells={self.cells}, victims={sorted(self.victims)})"


class Allocator(OpportunisticMixin, AdminMixin):
    """Buddy cell allocator; docs/allocator.md documents the API a cluster admin scripts against."""

    def __init__(self, spec, binding: str = "dynamic"):
        if not isinstance(spec, ClusterSpec):
            spec = load_spec(spec)
        if binding not in ("dynamic", "static"):
            raise ValueError(f"binding must be 'dynamic' or 'static', got {binding!r}")
        self.spec = spec
        self.binding = binding
        self.tree = CellTree(spec)
        self._grants: dict[str, GangGrant] = {}
        self._fresh: list[Cell] = []   # cells bound since the current placement began (undone if it fails)
        self.opp_demand: dict[str, int] = {}
        top = {c: ch.top_level for c, ch in spec.chains.items()}
        self.pfree = {c: [None] + [Buckets(True, f"{c}/L{k}") for k in range(1, top[c] + 1)] for c in spec.chains}
        self.r = {c: [0] * (top[c] + 1) for c in spec.chains}   # reserved (non-pinned) per level
        self.a = {c: [0] * (top[c] + 1) for c in spec.chains}   # bound (non-pinned) per level
        self.quota: dict[str, dict[tuple[str, int], int]] = {}
        self.bound: dict[str, dict[tuple[str, int], dict]] = {}
        self.lent: dict[str, dict[tuple[str, int], int]] = {}
        self.borrowed: dict[str, dict[tuple[str, int], int]] = {}
        self.loans: dict[tuple[str, str, tuple[str, int]], int] = {}  # (lender, borrower, (chain, level)) -> cells
        self.vfree: dict[str, dict[str, list]] = {}
        for vc, vs in spec.vcs.items():
            self.quota[vc] = dict(vs.cells)
            self.bound[vc] = {}
            self.lent[vc] = {}
            self.borrowed[vc] = {}
            self.vfree[vc] = {c: [None] + [Buckets(False, f"{vc}/{c}/L{k}") for k in range(1, top[c] + 1)]
                              for c in spec.chains}
            for (c, k), n in vs.cells.items():
                self.r[c][k] += n
        self._init_free()
        for vc, vs in spec.vcs.items():
            for pid in vs.pinned:
                cell = self.tree.pinned[pid]
                self._bind(vc, cell, pinned=True)
                self.vfree[vc][cell.chain][cell.level].add(cell, self._key(cell))
        if binding == "static":
            self._bind_all_static()
        self._fresh.clear()   # bindings made while building are not a placement's to undo

    # ------------------------------------------------------------ set-up
    def _init_free(self) -> None:
        def walk(cell: Cell) -> bool:
            if cell.pinned_id is not None:
                return True
            flags = [walk(ch) for ch in cell.children]
            if any(flags):
                for ch, f in zip(cell.children, flags):
                    if not f:
                        self.pfree[ch.chain][ch.level].add(ch, 0)
                return True
            return False

        for chain, roots in self.tree.roots.items():
            for root in roots:
                if not walk(root):
                    self.pfree[chain][root.level].add(root, 0)

    def _bind_all_static(self) -> None:
        """Static binding: every preassigned cell is bound up front, highest levels first."""
        for vc in sorted(self.quota):
            for (chain, k) in sorted(self.quota[vc], key=lambda x: (x[0], -x[1])):
                while self._unbound(vc, chain, k) > 0:
                    cell = self._phys_take(chain, k, k, None, 0)
                    if cell is None:  # pragma: no cover - the spec was checked feasible
                        raise RuntimeError(f"static binding failed for {vc} {chain} level {k}")
                    self._bind(vc, cell)
                    self.vfree[vc][chain][k].add(cell, self._key(cell))

    # ------------------------------------------------------------ small helpers
    def _chain(self, name):
        return self.spec.chains[name]

    def _unbound(self, vc: str, chain: str, k: int) -> int:
        return self.quota[vc].get((chain, k), 0) - len(self.bound[vc].get((chain, k), ()))

    def _opp_eff(self, c: Cell) -> int:
        for a in c.ancestors():
            if a.opod is not None:
                return c.gpus
        return c.opp

    def _key(self, c: Cell) -> int:
        return (BAD if c.bad else 0) + self._opp_eff(c)

    def _listed_ancestor(self, c: Cell) -> Optional[Cell]:
        x = c
        while x is not None:
            if x.flist is not None:
                return x
            x = x.parent
        return None

    def _rekey_around(self, c: Cell) -> None:
        """After a counter change at ``c``: re-sort the listed cell holding it (and any listed below it)."""
        x = self._listed_ancestor(c)
        if x is not None:
            x.flist.rekey(x, self._key(x))
            return
        stack = list(c.children)
        while stack:
            y = stack.pop()
            if y.flist is not None:
                y.flist.rekey(y, self._key(y))
            elif y.level > 1 and y.gpod is None:
                stack.extend(y.children)

    def _bind(self, vc: str, cell: Cell, pinned: bool = False, doomed: bool = False) -> None:
        cell.bound_vc = vc
        cell.doomed = doomed
        for x in [cell, *cell.ancestors()]:
            x.gb += cell.gpus
        if not pinned:
            self.bound[vc].setdefault((cell.chain, cell.level), {})[cell] = None
            self.a[cell.chain][cell.level] += 1
            self._fresh.append(cell)

    def _unbind(self, cell: Cell) -> None:
        vc = cell.bound_vc
        del self.bound[vc][(cell.chain, cell.level)][cell]
        self.a[cell.chain][cell.level] -= 1
        cell.bound_vc = None
        cell.doomed = False
        for x in [cell, *cell.ancestors()]:
            x.gb -= cell.gpus
        self._phys_free(cell)

    # ------------------------------------------------------------ usability tests
    def _usable(self, c: Cell, level: int, node_ok: NodeOk, gpus: int, healthy: bool = True) -> bool:
        """Does free cell ``c`` hold a level-``level`` cell that is healthy and on an allowed node?"""
        if c.level < level:
            return False
        if not healthy or c.bad == 0:
            if node_ok is None:
                return True
            if c.node is not None:
                return bool(node_ok(c.node, gpus))
            # above the nodes: some node inside must be allowed (the children are below ``level``
            # when ``level`` is c's own, e.g. a rack for a gang kept within one rack)
            return any(self._usable(ch, min(level, ch.level), node_ok, gpus, healthy) for ch in c.children)
        if c.level == level or c.bad == c.gpus:
            return False
        return any(self._usable(ch, level, node_ok, gpus, healthy) for ch in c.children)

    # ------------------------------------------------------------ Algorithm 1, generic split/merge
    def _split_take(self, lists, c: Cell, level: int, node_ok: NodeOk, gpus: int, healthy: bool = True,
                    need: Optional[int] = None) -> Cell:
        """Take listed cell ``c`` and split it down to ``level``; the unused buddies join the free lists.

        At each split the child kept is the usable one (holding a usable
        level-``need`` cell, default ``level``) with the fewest opportunistic GPUs.
        """
        need = level if need is None else need
        c.flist.remove(c)
        while c.level > level:
            best, best_key = None, None
            for ch in c.children:
                k = self._key(ch)
                if (best_key is None or k < best_key) and self._usable(ch, need, node_ok, gpus, healthy):
                    best, best_key = ch, k
            if best is None:  # pragma: no cover - callers check c is usable first
                best = min(c.children, key=self._key)
            for ch in c.children:
                if ch is not best:
                    lists[ch.level].add(ch, self._key(ch))
            c = best
        return c

    def _phys_free(self, c: Cell) -> None:
        """Algorithm 1 RELEASECELL: merge with free buddies as far up as possible."""
        lists = self.pfree[c.chain]
        while c.parent is not None and c.parent.nfc == len(c.parent.children) - 1:
            p = c.parent
            for s in p.children:
                if s is not c:
                    lists[s.level].remove(s)
            c = p
        lists[c.level].add(c, self._key(c))

    def _vc_free(self, vc: str, c: Cell, unbind: bool = True) -> None:
        """Release inside the VC's view; merge up to the bound cell, then unbind it (dynamic mode).

        ``unbind=False`` (rolling back a failed placement) keeps the bound
        cell listed in the VC's view; ``_drop_fresh`` decides what to unbind.
        """
        lists = self.vfree[vc][c.chain]
        while c.bound_vc != vc and c.parent.vfc == len(c.parent.children) - 1:
            p = c.parent
            for s in p.children:
                if s is not c:
                    lists[s.level].remove(s)
            c = p
        if unbind and c.bound_vc == vc and self.binding == "dynamic" and c.pinned_id is None:
            self._unbind(c)
        else:
            lists[c.level].add(c, self._key(c))

    def _drop_fresh(self, mark: int, keep_doomed: bool = True) -> None:
        """Undo the bindings made since ``mark`` by a placement that failed.

        Their cells hold no pod any more, so each is one listed cell of its
        VC's view. Cells bound to bad hardware stay bound as doomed (001 §4),
        as they do after any refusal: the VC's view shows the hardware it
        lacks, and the repair unbinds them.
        """
        for cell in reversed(self._fresh[mark:]):
            if (cell.doomed and keep_doomed) or cell.pinned_id is not None:
                continue
            cell.flist.remove(cell)
            self._unbind(cell)
        del self._fresh[mark:]

    def _split_safe(self, chain: str, k: int, j: int) -> bool:
        """Would splitting a free level-j cell down to a bound level-k cell keep invariant (2)?"""
        ch = self._chain(chain)
        free = [len(b) if b is not None else 0 for b in self.pfree[chain]]
        free[j] -= 1
        for lvl in range(j - 1, k - 1, -1):
            free[lvl] += ch.children_per_level[lvl] - 1
        alloc = list(self.a[chain])
        alloc[k] += 1
        return first_violation(ch, free, self.r[chain], alloc) is None

    def _phys_take(self, chain: str, k: int, level: int, node_ok: NodeOk, gpus: int) -> Optional[Cell]:
        """Algorithm 1 ALLOCATECELL for a level-k cell that must hold a usable level-``level`` cell.

        Plain Algorithm 1 takes the lowest non-empty level. To avoid unhealthy
        or vetoed cells it may split a higher cell instead, but only when that
        keeps invariant (2); otherwise it binds the bad cell (doomed).
        """
        lists = self.pfree[chain]
        top = self._chain(chain).top_level
        plain = next((j for j in range(k, top + 1) if len(lists[j])), None)
        if plain is None:
            return None
        for j in range(plain, top + 1):
            if not len(lists[j]):
                continue
            first = lists[j].first()
            if first.bad == 0 and node_ok is None:
                cand = first
            else:
                cand = next((c for c in lists[j].ordered() if self._usable(c, level, node_ok, gpus)), None)
            if cand is not None:
                if j == plain or self._split_safe(chain, k, j):
                    return self._split_take(lists, cand, k, node_ok, gpus, need=level)
                break
        # no healthy choice that keeps sharing safety: fall back to the bad cell (doomed)
        for c in lists[plain].ordered():
            if self._usable(c, level, node_ok, gpus, healthy=False):
                return self._split_take(lists, c, k, node_ok, gpus, healthy=False, need=level)
        return None

    def _vc_take(self, vc: str, chain: str, level: int, node_ok: NodeOk, gpus: int,
                 within: Optional[Cell] = None) -> Optional[Cell]:
        """Algorithm 1 on the VC's own view: a free VC cell of ``level`` (bound cells, then unbound quota)."""
        lists = self.vfree[vc][chain]
        top = self._chain(chain).top_level
        for k in range(level, top + 1):
            bl = lists[k]
            if len(bl):
                first = bl.first()
                if within is None and first.bad == 0 and node_ok is None:
                    return self._split_take(lists, first, level, node_ok, gpus)
                for c in bl.ordered():
                    if (within is None or within.contains(c)) and self._usable(c, level, node_ok, gpus):
                        return self._split_take(lists, c, level, node_ok, gpus)
            if within is None:
                while self._unbound(vc, chain, k) > 0:
                    cell = self._phys_take(chain, k, level, node_ok, gpus)
                    if cell is None:
                        break
                    self._bind(vc, cell, doomed=cell.bad > 0)
                    if self._usable(cell, level, node_ok, gpus):
                        bl.add(cell, self._key(cell))
                        return self._split_take(lists, cell, level, node_ok, gpus)
                    bl.add(cell, self._key(cell))  # doomed: visible in the VC view, try the next one
        return None

    # ------------------------------------------------------------ pods
    def _set_pod(self, c: Cell, owner: Optional[str], opportunistic: bool) -> None:
        delta = c.gpus if owner is not None else -c.gpus
        if opportunistic:
            c.opod = owner
            for x in [c, *c.ancestors()]:
                x.opp += delta
        else:
            c.gpod = owner
            for x in [c, *c.ancestors()]:
                x.gp += delta
        self._ofree_update(c)
        if opportunistic:
            self._rekey_around(c)

    def _ofree_calc(self, c: Cell) -> int:
        if c.gpod is not None or c.opod is not None:
            return 0
        if c.level == 1:
            return 0 if c.bad else 1
        cnt = c.ocnt
        if cnt[c.level - 1] == len(c.children):
            return c.level
        for lvl in range(c.level - 1, 0, -1):  # else: the best child's clean level
            if cnt[lvl]:
                return lvl
        return 0

    def _ofree_update(self, c: Cell) -> None:
        new = self._ofree_calc(c)
        while new != c.ofree:
            old, c.ofree = c.ofree, new
            p = c.parent
            if p is None:
                return
            p.ocnt[old] -= 1
            p.ocnt[new] += 1
            c, new = p, self._ofree_calc(p)

    def _victims(self, c: Cell) -> set[str]:
        out = {a.opod for a in [c, *c.ancestors()] if a.opod is not None}
        if c.opp:
            stack = list(c.children)
            while stack:
                x = stack.pop()
                if x.opp:
                    if x.opod is not None:
                        out.add(x.opod)
                    stack.extend(x.children)
        return out

    # ------------------------------------------------------------ public API
    def place(self, owner: str, vc: str, pod_gpus: list[int], *, opportunistic: bool = False, priority: int = 0,
              chain: Optional[str] = None, within_level: Optional[int] = None,
              node_ok: NodeOk = None) -> Optional[GangGrant]:
        """Bind cells for a gang, all or nothing; None when it does not fit now."""
        if owner in self._grants:
            raise ValueError(f"owner {owner!r} already holds cells; release it first")
        if vc not in self.quota:
            raise KeyError(f"unknown VC {vc!r}")
        if not pod_gpus or any((not isinstance(g, int)) or g < 1 for g in pod_gpus):
            raise ValueError(f"pod_gpus must be a non-empty list of positive integers, got {pod_gpus!r}")
        if node_ok is not None:
            node_ok = _memo(node_ok)
        self._fresh.clear()
        try:
            for cname in self._chains_for(vc, chain, opportunistic):
                if opportunistic:
                    grant = self._place_opportunistic(owner, vc, cname, pod_gpus, priority, within_level, node_ok)
                else:
                    grant = self._place_guaranteed(owner, vc, cname, pod_gpus, priority, within_level, node_ok)
                if grant is not None:
                    self._grants[owner] = grant
                    return grant
            return None
        finally:
            self._fresh.clear()

    def _chains_for(self, vc: str, chain: Optional[str], opportunistic: bool) -> list[str]:
        if chain is not None:
            if chain not in self.spec.chains:
                raise KeyError(f"unknown chain {chain!r}")
            return [chain]
        if opportunistic:
            return sorted(self.spec.chains)
        have = {c for (c, _), n in self.quota[vc].items() if n > 0}
        have |= {self.tree.pinned[p].chain for p in self.spec.vcs[vc].pinned}
        have |= {c for (c, _), d in self.bound[vc].items() if d}
        return sorted(have)

    def _pod_levels(self, chain: str, pod_gpus: list[int]) -> Optional[list[int]]:
        ch = self._chain(chain)
        levels = [ch.level_for_gpus(g) for g in pod_gpus]
        if any(lv is None or lv > ch.node_level for lv in levels):
            return None
        return levels

    def _place_guaranteed(self, owner, vc, chain, pod_gpus, priority, within_level, node_ok):
        levels = self._pod_levels(chain, pod_gpus)
        if levels is None:
            return None
        order = sorted(range(len(pod_gpus)), key=lambda i: -levels[i])  # big pods first
        if within_level is None:
            cells = self._take_pods(vc, chain, levels, pod_gpus, order, node_ok, None)
        else:
            cells = self._take_within(vc, chain, levels, pod_gpus, order, node_ok, within_level)
        if cells is None:
            return None
        victims: set[str] = set()
        for i, c in enumerate(cells):
            victims |= self._victims(c)
            self._set_pod(c, owner, False)
        return GangGrant(owner, vc, chain, False, priority, [(c, g) for c, g in zip(cells, pod_gpus)],
                         self.tree, victims)

    def _take_pods(self, vc, chain, levels, pod_gpus, order, node_ok, within) -> Optional[list[Cell]]:
        """One cell per pod, all or nothing: a failure leaves the free lists and bindings as they were."""
        mark = len(self._fresh)
        cells: list[Optional[Cell]] = [None] * len(levels)
        for i in order:
            c = self._vc_take(vc, chain, levels[i], node_ok, pod_gpus[i], within)
            if c is None:
                for j in order:  # roll back, buddies merge again
                    if cells[j] is not None:
                        self._vc_free(vc, cells[j], unbind=False)
                self._drop_fresh(mark)
                return None
            cells[i] = c
        return cells

    def _take_within(self, vc, chain, levels, pod_gpus, order, node_ok, w) -> Optional[list[Cell]]:
        """All pods inside one level-``w`` cell: try partly used cells, then free ones, then new bindings."""
        ch = self._chain(chain)
        if w < max(levels) or w > ch.top_level or sum(ch.gpus_per_level[lv - 1] for lv in levels) > ch.gpus_per_level[w - 1]:
            return None
        lists = self.vfree[vc][chain]
        candidates: list[Cell] = []
        for (c, k), cellset in self.bound[vc].items():
            if c == chain and k >= w:
                candidates += [x for x in cellset]
        candidates += [self.tree.pinned[p] for p in self.spec.vcs[vc].pinned
                       if self.tree.pinned[p].chain == chain and self.tree.pinned[p].level >= w]
        tried = set()
        for root in candidates:  # partly used level-w cells inside bound cells
            for x in _cells_at(root, w):
                if x.flist is None and x.gpod is None and x not in tried:
                    tried.add(x)
                    got = self._take_pods(vc, chain, levels, pod_gpus, order, node_ok, x)
                    if got is not None:
                        return got
        for k in range(w, ch.top_level + 1):  # fully free VC cells at level >= w
            for y in list(lists[k].ordered()):
                if self._usable(y, max(levels), node_ok, max(pod_gpus)):
                    x = self._carve(lists, y, w)
                    got = self._take_pods(vc, chain, levels, pod_gpus, order, node_ok, x)
                    if got is not None:
                        return got
                    self._uncarve(vc, x)
        for k in range(w, ch.top_level + 1):  # bind a new preassigned cell
            if self._unbound(vc, chain, k) > 0:
                mark = len(self._fresh)
                cell = self._phys_take(chain, k, w, node_ok, max(pod_gpus))
                if cell is None:
                    continue
                self._bind(vc, cell, doomed=cell.bad > 0)
                lists[k].add(cell, self._key(cell))
                x = self._carve(lists, cell, w)
                got = self._take_pods(vc, chain, levels, pod_gpus, order, node_ok, x)
                if got is not None:
                    return got
                self._uncarve(vc, x)
                self._drop_fresh(mark)
                return None
        return None

    def _carve(self, lists, y: Cell, w: int) -> Cell:
        """Split listed cell ``y`` down to a level-``w`` cell that stays listed; returns it."""
        x = y
        while x.level > w:
            lists[x.level].remove(x)
            best = min(x.children, key=self._key)
            for ch in x.children:
                lists[ch.level].add(ch, self._key(ch))
            x = best
        return x

    def _uncarve(self, vc: str, x: Cell) -> None:
        """Undo ``_carve`` after a failed try: merge the listed buddies back.

        When pods were placed and rolled back, their release already merged
        ``x`` into the cell it was carved from; then there is nothing left to do.
        """
        if x.flist is self.vfree[vc][x.chain][x.level]:
            x.flist.remove(x)
            self._vc_free(vc, x, unbind=False)

    def allocate(self, owner: str, vc: str, level: int, chain: Optional[str] = None) -> Optional[GangGrant]:
        """Admin API: one whole guaranteed cell of ``level`` (any level, e.g. a rack) for the VC."""
        if owner in self._grants:
            raise ValueError(f"owner {owner!r} already holds cells; release it first")
        self._fresh.clear()
        for cname in self._chains_for(vc, chain, False):
            if not 1 <= level <= self._chain(cname).top_level:
                continue
            c = self._vc_take(vc, cname, level, None, 0)
            self._fresh.clear()
            if c is not None:
                victims = self._victims(c)
                self._set_pod(c, owner, False)
                g = GangGrant(owner, vc, cname, False, 0, [(c, c.gpus)], self.tree, victims)
                self._grants[owner] = g
                return g
        return None

    def release(self, owner: str) -> None:
        """Free all cells of ``owner``; buddies merge back. Unknown owners are ignored."""
        grant = self._grants.pop(owner, None)
        if grant is None:
            return
        for c, _ in grant._cells:
            if grant.opportunistic:
                self._set_pod(c, None, True)
                for g in self._guaranteed_over(c):  # a victim that left no longer holds anyone up
                    held = self._grants[g]
                    held.victims = held.victims - {owner}  # a new set: callers may be iterating the old one
            else:
                self._set_pod(c, None, False)
                self._vc_free(grant.vc, c)

    def grant_of(self, owner: str) -> Optional[GangGrant]:
        return self._grants.get(owner)

    def grants(self) -> dict[str, GangGrant]:
        return dict(self._grants)


def _bound_root(c: Cell) -> Optional[tuple[str, int]]:
    x = c
    while x is not None:
        if x.bound_vc is not None:
            return x.id, x.level
        x = x.parent
    return None


def _cells_at(root: Cell, level: int):
    if root.level == level:
        yield root
        return
    stack = [root]
    while stack:
        c = stack.pop()
        if c.level == level:
            yield c
        elif c.level > level and c.flist is None and c.gpod is None:
            stack.extend(reversed(c.children))


def _memo(fn):
    cache: dict = {}

    def wrapped(node, gpus):
        key = (node, gpus)
        if key not in cache:
            cache[key] = bool(fn(node, gpus))
        return cache[key]
    return wrapped
