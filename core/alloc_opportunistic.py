"""Opportunistic (low-priority) cells and their weighted max-min shares.

Opportunistic pods use any GPUs that hold no guaranteed pod and no other
opportunistic pod. The search walks down from the chain's top cells and at
each level prefers the child with the fewest GPUs in guaranteed (bound)
cells, i.e. the cell farthest from guaranteed work (not a buddy of one), and
then the child already holding the most opportunistic GPUs (packing them, so
clean cells stay clean for guaranteed binding). ``Cell.ofree`` (the highest
level of a clean sub-cell) prunes the walk to subtrees that can hold the pod.
"""
from __future__ import annotations

from typing import Optional


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


class OpportunisticMixin:
    # --------------------------------------------------------- placement
    def _place_opportunistic(self, owner, vc, chain, pod_gpus, priority, within_level, node_ok):
        from .allocator import GangGrant
        levels = self._pod_levels(chain, pod_gpus)
        if levels is None or not self._opp_share_ok(vc, sum(pod_gpus)):
            return None
        order = sorted(range(len(pod_gpus)), key=lambda i: -levels[i])
        roots = self.tree.roots[chain]
        if within_level is None:
            cells = self._opp_take_all(roots, levels, pod_gpus, order, node_ok, owner)
        else:
            ch = self._chain(chain)
            w = within_level
            if w < max(levels) or w > ch.top_level or \
                    sum(ch.gpus_per_level[lv - 1] for lv in levels) > ch.gpus_per_level[w - 1]:
                return None
            cells = None
            for tries, x in enumerate(self._opp_walk(roots, w, node_ok, max(pod_gpus), clean=False,
                                                      need=max(levels))):
                cells = self._opp_take_all([x], levels, pod_gpus, order, node_ok, owner)
                if cells is not None or tries >= 64:
                    break
        if cells is None:
            return None
        return GangGrant(owner, vc, chain, True, priority, [(c, g) for c, g in zip(cells, pod_gpus)], self.tree)

    def _opp_take_all(self, roots, levels, pod_gpus, order, node_ok, owner):
        cells = [None] * len(levels)
        for i in order:
            c = next(self._opp_walk(roots, levels[i], node_ok, pod_gpus[i]), None)
            if c is None:
                for j in order:
                    if cells[j] is not None:
                        self._set_pod(cells[j], None, True)
                return None
            self._set_pod(c, owner, True)
            cells[i] = c
        return cells

    def _opp_walk(self, roots, level, node_ok, gpus, clean=True, need=None):
        """Level-``level`` cells, best first; clean=True: only fully clean ones (ofree == level)."""
        need = need or level
        stack = [sorted((r for r in roots if r.ofree >= need), key=_far_key)]
        while stack:
            if not stack[-1]:
                stack.pop()
                continue
            c = stack[-1].pop()
            if c.node is not None and node_ok is not None and c.level == self._chain(c.chain).node_level:
                if not node_ok(c.node, gpus):
                    continue
            if c.level == level:
                if not clean or c.ofree == level:
                    yield c
                continue
            if c.gpod is not None or c.opod is not None:
                continue
            kids = [ch for ch in c.children if ch.ofree >= need]
            if node_ok is not None and c.level > self._chain(c.chain).node_level:
                pass  # node veto is checked when the walk reaches the node
            kids.sort(key=_far_key)
            stack.append(kids)

    # --------------------------------------------------------- weighted max-min shares
    def set_opportunistic_demand(self, vc: str, gpus: int) -> None:
        """Tell the allocator how many opportunistic GPUs a VC wants (the engine's queue); 0 clears it."""
        if vc not in self.quota:
            raise KeyError(f"unknown VC {vc!r}")
        if gpus <= 0:
            self.opp_demand.pop(vc, None)
        else:
            self.opp_demand[vc] = int(gpus)

    def opportunistic_usage(self, vc: str) -> int:
        return sum(g.gpus for g in self._grants.values() if g.opportunistic and g.vc == vc)

    def opportunistic_capacity(self) -> int:
        """GPUs without a guaranteed pod, over all chains (what low-priority work may share)."""
        return sum(r.gpus - r.gp for roots in self.tree.roots.values() for r in roots)

    def opportunistic_shares(self, demands: Optional[dict[str, int]] = None) -> dict[str, float]:
        """Weighted max-min fair shares of the opportunistic capacity (weights from the spec)."""
        if demands is None:
            demands = {vc: max(self.opp_demand.get(vc, 0), self.opportunistic_usage(vc)) for vc in self.quota}
        weights = {vc: self.spec.vcs[vc].weight for vc in demands}
        return weighted_max_min(demands, weights, self.opportunistic_capacity())

    def _opp_share_ok(self, vc: str, gpus: int) -> bool:
        if not self.opp_demand:
            return True  # nobody registered demand: work-conserving
        used = self.opportunistic_usage(vc)
        demands = {v: max(self.opp_demand.get(v, 0), self.opportunistic_usage(v)) for v in self.quota}
        demands[vc] = max(demands[vc], used + gpus)
        return used + gpus <= self.opportunistic_shares(demands)[vc] + 1e-9


def _far_key(c):
    # sorted ascending then popped from the end: the best candidate has the highest key
    return (-c.gb, c.opp, -c.index)
