"""The Allocator's admin side: views, free GPUs, why-never, health, invariants.

Restore, reconfiguration and exchange transfers live in alloc_reconfig.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from .alloc_reconfig import BindingConflict, ReconfigMixin  # noqa: F401 (re-exported)
from .spec import invariant_violation


@dataclass
class LevelView:
    cell_type: str
    gpus_per_cell: int
    total: int          # cells the VC holds at this level (quota + pinned + borrowed - lent)
    used: int           # of those, bound to physical cells now
    free: int           # total - used
    opportunistic: int  # GPUs inside this VC's bound cells used by opportunistic pods (lent while idle)
    borrowed: int
    lent: int
    unhealthy: int      # bound cells holding a bad GPU (doomed or failed under a job)


@dataclass
class VCView:
    vc: str
    levels: dict[tuple[str, int], LevelView] = field(default_factory=dict)
    free_cells: dict[tuple[str, int], int] = field(default_factory=dict)  # the VC's private-cluster free list
    gpus_total: int = 0
    gpus_used: int = 0           # GPUs under the VC's guaranteed pods
    opportunistic_gpus: int = 0  # GPUs the VC runs opportunistically elsewhere
    bound_cells: list[dict] = field(default_factory=list)

    def render(self) -> str:
        lines = [f"VC {self.vc}: {self.gpus_used}/{self.gpus_total} GPUs used by guaranteed jobs, "
                 f"{self.opportunistic_gpus} opportunistic"]
        for (chain, k), lv in sorted(self.levels.items(), key=lambda x: (x[0][0], -x[0][1])):
            extra = "".join(f", {n} {w}" for n, w in ((lv.borrowed, "borrowed"), (lv.lent, "lent"),
                                                      (lv.unhealthy, "unhealthy"),
                                                      (lv.opportunistic, "GPUs lent opportunistically")) if n)
            lines.append(f"  {chain}.{lv.cell_type} (level {k}, {lv.gpus_per_cell} GPUs): "
                         f"{lv.total} cell{'' if lv.total == 1 else 's'}, {lv.used} bound, {lv.free} free{extra}")
        if self.free_cells:
            free = ", ".join(f"{n} x L{k}" for (_, k), n in sorted(self.free_cells.items(), key=lambda x: -x[0][1]) if n)
            lines.append(f"  free in the VC view: {free or 'nothing'}")
        for b in self.bound_cells:
            tag = " (doomed: bad hardware)" if b["doomed"] else (" (unhealthy)" if b["unhealthy"] else "")
            lines.append(f"  bound {b['cell']} [{b['chain']} L{b['level']}]: {b['gpus_used']}/{b['gpus']} GPUs used{tag}")
        return "\n".join(lines)


class AdminMixin(ReconfigMixin):
    # ------------------------------------------------------------ views
    def vc_view(self, vc: str) -> VCView:
        if vc not in self.quota:
            raise KeyError(f"unknown VC {vc!r}")
        view = VCView(vc=vc)
        keys = set(self.quota[vc]) | {k for k, d in self.bound[vc].items() if d}
        pinned = [self.tree.pinned[p] for p in self.spec.vcs[vc].pinned]
        keys |= {(c.chain, c.level) for c in pinned}
        for key in keys:
            chain, k = key
            ch = self._chain(chain)
            bound = list(self.bound[vc].get(key, ())) + [c for c in pinned if (c.chain, c.level) == key]
            total = self.quota[vc].get(key, 0) + sum(1 for c in pinned if (c.chain, c.level) == key)
            used = len(bound)
            view.levels[key] = LevelView(
                cell_type=ch.levels[k - 1], gpus_per_cell=ch.gpus_per_level[k - 1], total=total, used=used,
                free=total - used, opportunistic=sum(c.opp for c in bound),
                borrowed=self.borrowed[vc].get(key, 0), lent=self.lent[vc].get(key, 0),
                unhealthy=sum(1 for c in bound if c.bad))
            view.gpus_total += total * ch.gpus_per_level[k - 1]
            for c in bound:
                view.gpus_used += c.gp
                view.bound_cells.append({"cell": c.id, "chain": chain, "level": k, "gpus": c.gpus,
                                         "gpus_used": c.gp, "doomed": c.doomed, "unhealthy": c.bad > 0})
        for chain, lists in self.vfree[vc].items():
            for k in range(1, len(lists)):
                n = len(lists[k]) + max(0, self._unbound(vc, chain, k))
                if n:
                    view.free_cells[(chain, k)] = n
        view.bound_cells.sort(key=lambda b: (b["chain"], -b["level"], b["cell"]))
        view.opportunistic_gpus = self.opportunistic_usage(vc)
        return view

    def free_gpus(self, chain: Optional[str] = None) -> int:
        """GPUs with no pod at all (guaranteed or opportunistic)."""
        chains = [chain] if chain is not None else list(self.tree.roots)
        return sum(_free_under(r) for c in chains for r in self.tree.roots[c])

    def node_free(self, chain: str) -> dict[str, int]:
        out = {}
        for name, node in self.tree.nodes.items():
            if node.chain == chain:
                out[name] = _free_under(node) if not _covered(node) else 0
        return out

    def why_never(self, vc: str, pod_gpus: list[int], chain: Optional[str] = None,
                  within_level: Optional[int] = None) -> Optional[str]:
        """Why the request can never fit this VC (even empty), or None if it can."""
        if vc not in self.quota:
            return f"unknown VC {vc!r}"
        if not pod_gpus or any(not isinstance(g, int) or g < 1 for g in pod_gpus):
            return f"pod GPU counts must be positive integers, got {pod_gpus!r}"
        chains = self._chains_for(vc, chain, False) if chain is None else [chain]
        if chain is not None and chain not in self.spec.chains:
            return f"unknown chain {chain!r} (chains: {', '.join(sorted(self.spec.chains))})"
        if not chains:
            return f"VC {vc} has no cells"
        reasons = []
        for cname in chains:
            r = self._why_never_chain(vc, cname, pod_gpus, within_level)
            if r is None:
                return None
            reasons.append(r)
        return "; ".join(reasons)

    def _why_never_chain(self, vc, chain, pod_gpus, within_level) -> Optional[str]:
        ch = self._chain(chain)
        big = max(pod_gpus)
        if big > ch.node_gpus:
            return f"a pod of {big} GPUs is larger than a {chain} node ({ch.node_gpus} GPUs)"
        counts = [0] * (ch.top_level + 1)
        for (c, k), n in self.quota[vc].items():
            if c == chain:
                counts[k] += n
        for p in self.spec.vcs[vc].pinned:
            cell = self.tree.pinned[p]
            if cell.chain == chain:
                counts[cell.level] += 1
        total = sum(n * ch.gpus_per_level[k - 1] for k, n in enumerate(counts) if k)
        if total == 0:
            return f"VC {vc} has no {chain} cells"
        levels = [ch.level_for_gpus(g) for g in pod_gpus]
        need = sum(ch.gpus_per_level[lv - 1] for lv in levels)
        if within_level is not None:
            if not 1 <= within_level <= ch.top_level:
                return f"level {within_level} is not a level of chain {chain} (1..{ch.top_level})"
            if within_level < max(levels):
                return (f"a pod of {big} GPUs does not fit in a level-{within_level} "
                        f"({ch.levels[within_level - 1]}) cell")
            if not any(counts[k] for k in range(within_level, ch.top_level + 1)):
                return (f"VC {vc} has no {chain} cell of level {within_level} "
                        f"({ch.levels[within_level - 1]}) or higher")
            if need > ch.gpus_per_level[within_level - 1]:
                return (f"the gang needs {need} GPUs in cells, one {ch.levels[within_level - 1]} cell "
                        f"holds {ch.gpus_per_level[within_level - 1]}")
            counts = [0] * (ch.top_level + 1)
            counts[within_level] = 1
        if need > total and within_level is None:
            return f"the gang needs {need} GPUs in cells, VC {vc} holds {total} {chain} GPUs"
        if not _fits_empty(ch, counts, levels):
            top = max((k for k, n in enumerate(counts) if n), default=0)
            return (f"VC {vc}'s {chain} cells (largest: level {top}, {ch.levels[top - 1]}) cannot hold "
                    f"pods of {sorted(pod_gpus, reverse=True)} GPUs at once")
        return None

    # ------------------------------------------------------------ health
    def set_health(self, node: str, gpu: Optional[int], healthy: bool) -> list[str]:
        """Mark a node (gpu=None) or one GPU bad or good; returns owners whose cells just went bad."""
        if node not in self.tree.nodes:
            raise KeyError(f"unknown node {node!r}")
        ncell = self.tree.nodes[node]
        if gpu is None:
            leaves = list(ncell.leaves())
        else:
            key = f"{node}/gpu{gpu}"
            if key not in self.tree.by_id:
                raise KeyError(f"node {node} has no GPU {gpu}")
            leaves = [self.tree.by_id[key]]
        hit: set[str] = set()
        for leaf in leaves:
            want = 0 if healthy else 1
            if leaf.bad == want:
                continue
            for x in [leaf, *leaf.ancestors()]:
                x.bad += want - (1 - want)
            self._ofree_update(leaf)
            self._rekey_around(leaf)
            if not healthy:
                for x in [leaf, *leaf.ancestors()]:
                    if x.gpod is not None:
                        hit.add(x.gpod)
                    if x.opod is not None:
                        hit.add(x.opod)
        if healthy:
            self._undoom()
        return sorted(hit)

    def _undoom(self) -> None:
        """Doomed bindings whose cell is healthy again and holds no pod go back to the free lists."""
        for vc, per in self.bound.items():
            for cells in per.values():
                for c in list(cells):
                    if c.doomed and c.bad == 0:
                        c.doomed = False
                        if c.gp == 0 and self.binding == "dynamic" and c.flist is not None:
                            c.flist.remove(c)
                            self._unbind(c)

    def unhealthy(self) -> list[str]:
        return sorted(l.id for r in self.tree.by_id.values() if r.level == 1 and r.bad for l in [r])

    # ------------------------------------------------------------ invariants (tests)
    def check_invariants(self) -> None:
        for chain, roots in self.tree.roots.items():
            ch = self._chain(chain)
            free = [len(b) if b is not None else 0 for b in self.pfree[chain]]
            problem = invariant_violation(ch, free, self.r[chain], self.a[chain])
            assert problem is None, f"invariant (2) broken: {problem}"
            for k in range(1, ch.top_level + 1):
                assert self.a[chain][k] <= self.r[chain][k], f"a_k > r_k at {chain} level {k}"
            for root in roots:
                self._check_cell(root, ch, inside_free=False, inside_bound=None)
        for vc in self.quota:
            for (chain, k), cells in self.bound[vc].items():
                assert len(cells) <= self.quota[vc].get((chain, k), 0), \
                    f"VC {vc} binds {len(cells)} {chain} L{k} cells, quota {self.quota[vc].get((chain, k), 0)}"
        seen_g: dict = {}
        for owner, g in self._grants.items():
            for c, _ in g._cells:
                want = c.opod if g.opportunistic else c.gpod
                assert want == owner, f"cell {c.id} of {owner} is held by {want}"
                if not g.opportunistic:
                    for l in c.leaves():
                        assert l.id not in seen_g, f"GPU {l.id} bound twice ({seen_g.get(l.id)}, {owner})"
                        seen_g[l.id] = owner

    def _check_cell(self, c, ch, inside_free, inside_bound):
        """Counters match, listed cells are maximal (no all-free buddies left unmerged), no overlaps."""
        listed = c.flist is not None
        if listed:
            assert not inside_free, f"{c.id} is listed inside a listed cell"
            if c.flist.phys:
                assert inside_bound is None and c.bound_vc is None, f"{c.id} free while bound"
            assert c.gp == 0 and c.gpod is None, f"free cell {c.id} holds a guaranteed pod"
        if c.bound_vc is not None:
            assert inside_bound is None, f"{c.id} bound inside bound cell {inside_bound}"
            inside_bound = c.bound_vc
        if c.gpod is not None:
            assert inside_bound is not None, f"guaranteed pod at {c.id} outside any bound cell"
        if c.level == 1:
            assert c.ofree == self._ofree_calc(c), f"clean level of {c.id}"
            exp = (1 if c.opod else 0, 1 if c.gpod else 0)
            assert (c.opp, c.gp) == exp, f"counters of {c.id}: {(c.opp, c.gp)} != {exp}"
            return
        kids = c.children
        for k in kids:
            self._check_cell(k, ch, inside_free or listed, inside_bound)
        opp = c.gpus if c.opod else sum(k.opp for k in kids)
        gp = c.gpus if c.gpod else sum(k.gp for k in kids)
        assert c.opp == opp or (c.opod and c.opp >= c.gpus), f"opp counter of {c.id}: {c.opp} != {opp}"
        assert c.gp == gp or (c.gpod and c.gp >= c.gpus), f"gp counter of {c.id}: {c.gp} != {gp}"
        assert c.bad == sum(k.bad for k in kids), f"bad counter of {c.id}"
        want = [0] * c.level
        for k in kids:
            want[k.ofree] += 1
        assert c.ocnt == want, f"clean-level counts of {c.id}: {c.ocnt} != {want}"
        assert c.ofree == self._ofree_calc(c), f"clean level of {c.id}: {c.ofree} != {self._ofree_calc(c)}"
        assert c.nfc == sum(1 for k in kids if k.flist is not None and k.flist.phys), f"nfc of {c.id}"
        assert c.vfc == sum(1 for k in kids if k.flist is not None and not k.flist.phys), f"vfc of {c.id}"
        if not inside_free and not listed:
            lists = [k.flist for k in kids]
            assert not (lists[0] is not None and all(l is lists[0] for l in lists) and len(kids) > 1
                        and lists[0].phys and c.bound_vc is None and c.pinned_id is None), \
                f"buddies of {c.id} all free but not merged"


def _covered(c) -> bool:
    x = c
    while x is not None:
        if x.gpod is not None or x.opod is not None:
            return True
        x = x.parent
    return False


def _free_under(c) -> int:
    """GPUs below ``c`` with no pod (pods above ``c`` are the caller's business)."""
    if c.gpod is not None or c.opod is not None:
        return 0
    if c.gp == 0 and c.opp == 0:
        return c.gpus
    return sum(_free_under(k) for k in c.children)


def _fits_empty(ch, counts: list[int], levels: list[int]) -> bool:
    """Buddy allocation on counts only: do pods of these levels fit cells of these counts (empty VC)?"""
    free = list(counts)
    for lv in sorted(levels, reverse=True):
        k = next((j for j in range(lv, ch.top_level + 1) if free[j] > 0), None)
        if k is None:
            return False
        free[k] -= 1
        for j in range(k - 1, lv - 1, -1):
            free[j] += ch.children_per_level[j] - 1
    return True
