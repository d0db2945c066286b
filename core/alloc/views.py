"""What an admin reads: a VC's view of its cells, free GPUs, and why a request can never fit."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..cells import Cell, CellTree
from ..spec import Chain
from .parts import AllocatorParts
from .pod_marks import covered, free_under
from .virtual_cluster import LevelKey


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
    levels: dict[LevelKey, LevelView] = field(default_factory=dict)
    free_cells: dict[LevelKey, int] = field(default_factory=dict)  # the VC's private-cluster free list
    gpus_total: int = 0
    gpus_used: int = 0           # GPUs under the VC's guaranteed pods
    opportunistic_gpus: int = 0  # GPUs the VC runs opportunistically elsewhere
    bound_cells: list[dict[str, Any]] = field(default_factory=list)

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
            ordered = sorted(self.free_cells.items(), key=lambda x: -x[0][1])
            free = ", ".join(f"{n} x L{k}" for (_, k), n in ordered if n)
            lines.append(f"  free in the VC view: {free or 'nothing'}")
        for b in self.bound_cells:
            tag = " (doomed: bad hardware)" if b["doomed"] else (" (unhealthy)" if b["unhealthy"] else "")
            lines.append(f"  bound {b['cell']} [{b['chain']} L{b['level']}]: "
                         f"{b['gpus_used']}/{b['gpus']} GPUs used{tag}")
        return "\n".join(lines)


def vc_view(parts: AllocatorParts, name: str) -> VCView:
    if name not in parts.vcs:
        raise KeyError(f"unknown VC {name!r}")
    vc = parts.vcs[name]
    view = VCView(vc=name)
    keys = set(vc.quota) | {k for k, d in vc.bound.items() if d}
    keys |= {(c.chain, c.level) for c in vc.pinned}
    for key in keys:
        chain, k = key
        ch = parts.spec.chains[chain]
        bound = list(vc.bound.get(key, ())) + [c for c in vc.pinned if (c.chain, c.level) == key]
        total = vc.quota.get(key, 0) + sum(1 for c in vc.pinned if (c.chain, c.level) == key)
        used = len(bound)
        view.levels[key] = LevelView(
            cell_type=ch.levels[k - 1], gpus_per_cell=ch.gpus_per_level[k - 1], total=total, used=used,
            free=total - used, opportunistic=sum(c.opportunistic_gpus for c in bound),
            borrowed=vc.borrowed.get(key, 0), lent=vc.lent.get(key, 0),
            unhealthy=sum(1 for c in bound if c.bad_gpus))
        view.gpus_total += total * ch.gpus_per_level[k - 1]
        for c in bound:
            view.gpus_used += c.guaranteed_gpus
            view.bound_cells.append({"cell": c.id, "chain": chain, "level": k, "gpus": c.gpus,
                                     "gpus_used": c.guaranteed_gpus, "doomed": c.doomed,
                                     "unhealthy": c.bad_gpus > 0})
    for chain, lists in vc.free.items():
        for k in range(1, len(lists)):
            n = len(lists[k]) + max(0, vc.unbound(chain, k))
            if n:
                view.free_cells[(chain, k)] = n
    view.bound_cells.sort(key=lambda b: (b["chain"], -b["level"], b["cell"]))
    view.opportunistic_gpus = parts.opportunistic.usage(name)
    return view


def free_gpus(tree: CellTree, chain: str | None = None) -> int:
    """GPUs with no pod at all (guaranteed or opportunistic)."""
    chains = [chain] if chain is not None else list(tree.roots)
    return sum(free_under(r) for c in chains for r in tree.roots[c])


def node_free(tree: CellTree, chain: str) -> dict[str, int]:
    out = {}
    for name, node in tree.nodes.items():
        if node.chain == chain:
            out[name] = free_under(node) if not covered(node) else 0
    return out


def why_never(parts: AllocatorParts, vc: str, pod_gpus: list[int], chain: str | None = None,
              within_level: int | None = None) -> str | None:
    """Why the request can never fit this VC (even empty), or None if it can."""
    if vc not in parts.vcs:
        return f"unknown VC {vc!r}"
    if not pod_gpus or any(not isinstance(g, int) or g < 1 for g in pod_gpus):
        return f"pod GPU counts must be positive integers, got {pod_gpus!r}"
    v = parts.vcs[vc]
    # cells lent by exchange come back: what the VC holds *or* is owed counts (docs/exchange.md)
    chains = sorted(set(v.chains()) | {c for (c, _), n in v.lent.items() if n}) if chain is None else [chain]
    if chain is not None and chain not in parts.spec.chains:
        return f"unknown chain {chain!r} (chains: {', '.join(sorted(parts.spec.chains))})"
    if not chains:
        return f"VC {vc} has no cells"
    reasons = []
    for cname in chains:
        r = _why_never_chain(parts, vc, cname, pod_gpus, within_level)
        if r is None:
            return None
        reasons.append(r)
    return "; ".join(reasons)


def _why_never_chain(parts: AllocatorParts, vc: str, chain: str, pod_gpus: list[int],
                     within_level: int | None) -> str | None:
    ch = parts.spec.chains[chain]
    big = max(pod_gpus)
    if big > ch.node_gpus:
        return f"a pod of {big} GPUs is larger than a {chain} node ({ch.node_gpus} GPUs)"
    counts = [0] * (ch.top_level + 1)
    for book in (parts.vcs[vc].quota, parts.vcs[vc].lent):   # cells held now, and cells out on loan
        for (c, k), n in book.items():
            if c == chain:
                counts[k] += n
    pinned: list[Cell] = parts.vcs[vc].pinned
    for cell in pinned:
        if cell.chain == chain:
            counts[cell.level] += 1
    total = sum(n * ch.gpus_per_level[k - 1] for k, n in enumerate(counts) if k)
    if total == 0:
        return f"VC {vc} has no {chain} cells"
    maybe = [ch.level_for_gpus(g) for g in pod_gpus]
    levels = [lv for lv in maybe if lv is not None]
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


def _fits_empty(ch: Chain, counts: list[int], levels: list[int]) -> bool:
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
