"""Opportunistic (low-priority) cells and their weighted max-min shares.

Opportunistic pods use any GPUs that hold no guaranteed pod and no other
opportunistic pod. The search walks down from the chain's top cells and at
each level prefers the child with the fewest GPUs in guaranteed (bound)
cells, i.e. the cell farthest from guaranteed work (not a buddy of one), and
then the child already holding the most opportunistic GPUs (packing them, so
clean cells stay clean for guaranteed binding). ``Cell.clean_level`` (the
highest level of a clean sub-cell) prunes the walk to subtrees that can hold
the pod.
"""
from __future__ import annotations

from collections.abc import Iterator

from ..cells import Cell, CellTree
from ..grant import Grant
from ..spec import ClusterSpec
from .buddy import NodeOk, pod_levels
from .pod_marks import set_pod
from .virtual_cluster import VirtualCluster


def weighted_max_min(demands: dict[str, float], weights: dict[str, float], capacity: float) -> dict[str, float]:
    """Water-filling: each VC gets min(demand, weighted share), leftovers go to the still hungry."""
    share = {vc: 0.0 for vc in demands}
    hungry = {vc for vc, d in demands.items() if d > 0}
    left = float(capacity)
    while hungry and left > 1e-9:
        wsum = sum(weights[vc] for vc in hungry)
        unit = left / wsum
        done = {vc for vc in hungry if demands[vc] - share[vc] <= unit * weights[vc] + 1e-9}
        if not done:
            for vc in hungry:
                share[vc] += unit * weights[vc]
            break
        for vc in done:
            left -= demands[vc] - share[vc]
            share[vc] = float(demands[vc])
        hungry -= done
    return share


class OpportunisticPlacer:
    def __init__(self, spec: ClusterSpec, tree: CellTree, vcs: dict[str, VirtualCluster], grants: dict[str, Grant]):
        self.spec = spec
        self.tree = tree
        self.vcs = vcs
        self.grants = grants   # the allocator's grants (read: each VC's opportunistic usage)

    # --------------------------------------------------------- placement
    def place(self, owner: str, vc: VirtualCluster, chain: str, pod_gpus: list[int], priority: int,
              within_level: int | None, node_ok: NodeOk) -> Grant | None:
        ch = self.spec.chains[chain]
        levels = pod_levels(ch, pod_gpus)
        if levels is None or not self.share_ok(vc.name, sum(pod_gpus)):
            return None
        order = sorted(range(len(pod_gpus)), key=lambda i: -levels[i])
        roots = self.tree.roots[chain]
        cells: list[Cell] | None = None
        if within_level is None:
            cells = self._take_all(roots, levels, pod_gpus, order, node_ok, owner)
        else:
            w = within_level
            if w < max(levels) or w > ch.top_level or \
                    sum(ch.gpus_per_level[lv - 1] for lv in levels) > ch.gpus_per_level[w - 1]:
                return None
            for tries, x in enumerate(self._walk(roots, w, node_ok, max(pod_gpus), clean=False, need=max(levels))):
                cells = self._take_all([x], levels, pod_gpus, order, node_ok, owner)
                if cells is not None or tries >= 64:
                    break
        if cells is None:
            return None
        return Grant(owner, vc.name, chain, True, priority, None, None,
                     held=[(c.id, g) for c, g in zip(cells, pod_gpus)], tree=self.tree)

    def _take_all(self, roots: list[Cell], levels: list[int], pod_gpus: list[int], order: list[int],
                  node_ok: NodeOk, owner: str) -> list[Cell] | None:
        cells: list[Cell | None] = [None] * len(levels)
        for i in order:
            c = next(self._walk(roots, levels[i], node_ok, pod_gpus[i]), None)
            if c is None:
                for j in order:
                    got = cells[j]
                    if got is not None:
                        set_pod(got, None, True)
                return None
            set_pod(c, owner, True)
            cells[i] = c
        return [c for c in cells if c is not None]

    def _walk(self, roots: list[Cell], level: int, node_ok: NodeOk, gpus: int, clean: bool = True,
              need: int | None = None) -> Iterator[Cell]:
        """Level-``level`` cells, best first; clean=True: only fully clean ones (clean_level == level)."""
        need = need or level
        stack = [sorted((r for r in roots if r.clean_level >= need), key=_far_key)]
        while stack:
            if not stack[-1]:
                stack.pop()
                continue
            c = stack[-1].pop()
            if c.node is not None and node_ok is not None and c.level == self.spec.chains[c.chain].node_level:
                if not node_ok(c.node, gpus):
                    continue
            if c.level == level:
                if not clean or c.clean_level == level:
                    yield c
                continue
            if c.guaranteed_owner is not None or c.opportunistic_owner is not None:
                continue
            # a node veto above the nodes is checked when the walk reaches the node
            kids = [ch for ch in c.children if ch.clean_level >= need]
            kids.sort(key=_far_key)
            stack.append(kids)

    # --------------------------------------------------------- weighted max-min shares
    def set_demand(self, vc: str, gpus: int) -> None:
        if vc not in self.vcs:
            raise KeyError(f"unknown VC {vc!r}")
        self.vcs[vc].opportunistic_demand = max(0, int(gpus))

    def usage(self, vc: str) -> int:
        return sum(g.gpus for g in self.grants.values() if g.opportunistic and g.vc == vc)

    def capacity(self) -> int:
        """GPUs without a guaranteed pod, over all chains (what low-priority work may share)."""
        return sum(r.gpus - r.guaranteed_gpus for roots in self.tree.roots.values() for r in roots)

    def shares(self, demands: dict[str, int] | None = None) -> dict[str, float]:
        """Weighted max-min fair shares of the opportunistic capacity (weights from the spec)."""
        if demands is None:
            demands = {name: max(vc.opportunistic_demand, self.usage(name)) for name, vc in self.vcs.items()}
        weights = {name: self.vcs[name].weight for name in demands}
        return weighted_max_min({k: float(v) for k, v in demands.items()}, weights, self.capacity())

    def share_ok(self, vc: str, gpus: int) -> bool:
        if not any(v.opportunistic_demand for v in self.vcs.values()):
            return True  # nobody registered demand: work-conserving
        used = self.usage(vc)
        demands = {name: max(v.opportunistic_demand, self.usage(name)) for name, v in self.vcs.items()}
        demands[vc] = max(demands[vc], used + gpus)
        return used + gpus <= self.shares(demands)[vc] + 1e-9


def _far_key(c: Cell) -> tuple[int, int, int]:
    # sorted ascending then popped from the end: the best candidate has the highest key
    return (-c.bound_gpus, c.opportunistic_gpus, -c.index)
