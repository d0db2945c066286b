"""Faulty hardware (HiveD, OSDI '20, §4): GPUs marked bad or good, and doomed bindings healed.

Binding and placement avoid cells holding bad GPUs while a healthy choice
keeps invariant (2); a VC left with no healthy choice has its cell bound to
the bad one (doomed), so it sees its own loss. A doomed cell that is healthy
again and idle is unbound (dynamic binding).
"""
from __future__ import annotations

from ..cells import CellTree
from .binder import Binder
from .buddy import rekey_around
from .pod_marks import update_clean_level


class Health:
    def __init__(self, tree: CellTree, binder: Binder):
        self.tree = tree
        self.binder = binder

    def set(self, node: str, gpu: int | None, healthy: bool) -> list[str]:
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
        want = 0 if healthy else 1
        for leaf in leaves:
            if leaf.bad_gpus == want:
                continue
            for x in [leaf, *leaf.ancestors()]:
                x.bad_gpus += 2 * want - 1
            update_clean_level(leaf)
            rekey_around(leaf)
            if not healthy:
                for x in [leaf, *leaf.ancestors()]:
                    if x.guaranteed_owner is not None:
                        hit.add(x.guaranteed_owner)
                    if x.opportunistic_owner is not None:
                        hit.add(x.opportunistic_owner)
                    if x.waiting_owner is not None:     # a downgraded job waiting on that cell
                        hit.add(x.waiting_owner)
        if healthy:
            self._undoom()
        return sorted(hit)

    def _undoom(self) -> None:
        """Doomed bindings whose cell is healthy again and holds no pod go back to the free lists."""
        binder = self.binder
        for vc in binder.vcs.values():
            for cells in vc.bound.values():
                for c in list(cells):
                    if c.doomed and c.bad_gpus == 0:
                        c.doomed = False
                        if c.guaranteed_gpus == 0 and binder.binding == "dynamic" and c.free_list is not None:
                            c.free_list.remove(c)
                            binder.unbind(c)

    def unhealthy(self) -> list[str]:
        return sorted(c.id for c in self.tree.by_id.values() if c.level == 1 and c.bad_gpus)
