"""Buddy cell allocation (HiveD Algorithm 1) with VC views, priorities and health.

Two layers, as in HiveD:

* each VC (``VirtualCluster``) sees a private cluster made of its cells
  (``r_{t,k}`` preassigned cells per chain and level, plus pinned cells). A
  pod asks its VC for a cell of the smallest level holding its GPUs; the VC
  runs Algorithm 1 on its own free lists (bound cells first, then still
  unbound preassigned cells).
* when the VC needs one of its preassigned level-k cells, that cell is bound
  to a physical level-k cell by Algorithm 1 on the physical free lists
  (``PhysicalCluster``; legal because ``a_{t,k} < r_{t,k}``, so Theorem 1
  says one exists); when the VC no longer uses any of it, it is unbound and
  buddies merge back.

Whether a request fits therefore depends only on the VC's own state (sharing
safety); the physical layer only chooses *which* cell: the healthy one with
the fewest opportunistic GPUs. Opportunistic pods use any cell without
guaranteed pods, as far from guaranteed cells as possible; a guaranteed pod
that lands on them names them as victims.

``Allocator`` is the facade the engine and admins use; the parts it composes
live in ``core/alloc/`` (see that package's docstring).
"""
from __future__ import annotations

import os
from typing import Any

from .alloc.buddy import NodeOk, memo_node_ok
from .alloc.checks import check_invariants
from .alloc.parts import AllocatorParts
from .alloc.physical import PhysicalCluster
from .alloc.pod_marks import guaranteed_over, set_pod, unmark_opportunistic, victims_under
from .alloc.reconfigure import reconfigure
from .alloc.restore import GrantLike
from .alloc.views import LevelView, VCView, free_gpus, node_free, vc_view, why_never
from .alloc.virtual_cluster import VirtualCluster
from .cells import CellTree
from .grant import BindingConflict, Grant
from .spec import ClusterSpec, load_spec

__all__ = ["Allocator", "BindingConflict", "Grant", "LevelView", "VCView"]

SpecSource = ClusterSpec | str | os.PathLike[str] | dict[str, Any]


class Allocator:
    """Buddy cell allocator; docs/allocator.md documents the API a cluster admin scripts against."""

    def __init__(self, spec: SpecSource, binding: str = "dynamic"):
        if not isinstance(spec, ClusterSpec):
            spec = load_spec(spec)
        if binding not in ("dynamic", "static"):
            raise ValueError(f"binding must be 'dynamic' or 'static', got {binding!r}")
        self._parts = AllocatorParts(spec, binding)
        self._before: AllocatorParts | None = None   # what the last reconfigure replaced, until anything changes

    # ------------------------------------------------------------ the parts, for admins and tests
    @property
    def spec(self) -> ClusterSpec:
        return self._parts.spec

    @property
    def binding(self) -> str:
        return self._parts.binder.binding

    @property
    def tree(self) -> CellTree:
        return self._parts.tree

    @property
    def vcs(self) -> dict[str, VirtualCluster]:
        return self._parts.vcs

    @property
    def quota(self) -> dict[str, dict[tuple[str, int], int]]:
        """Per VC, the preassigned cells it holds now per (chain, level) (the spec's, moved by transfers)."""
        return {name: vc.quota for name, vc in self._parts.vcs.items()}

    @property
    def physical(self) -> PhysicalCluster:
        return self._parts.physical

    @property
    def loans(self) -> dict[tuple[str, str, tuple[str, int]], int]:
        """Cells lent now: (lender, borrower, (chain, level)) -> count."""
        return self._parts.loans.pairs

    # ------------------------------------------------------------ placing
    def place(self, owner: str, vc: str, pod_gpus: list[int], *, opportunistic: bool = False, priority: int = 0,
              chain: str | None = None, within_level: int | None = None,
              node_ok: NodeOk = None) -> Grant | None:
        """Bind cells for a gang, all or nothing; None when it does not fit now."""
        self._before = None
        parts = self._parts
        if owner in parts.grants:
            raise ValueError(f"owner {owner!r} already holds cells; release it first")
        v = parts.vcs.get(vc)
        if v is None:
            raise KeyError(f"unknown VC {vc!r}")
        if not pod_gpus or any((not isinstance(g, int)) or g < 1 for g in pod_gpus):
            raise ValueError(f"pod_gpus must be a non-empty list of positive integers, got {pod_gpus!r}")
        if node_ok is not None:
            node_ok = memo_node_ok(node_ok)
        fresh = parts.binder.fresh
        fresh.clear()
        try:
            for cname in self._chains_for(v, chain, opportunistic):
                if opportunistic:
                    grant = parts.opportunistic.place(owner, v, cname, pod_gpus, priority, within_level, node_ok)
                else:
                    grant = parts.guaranteed.place(owner, v, cname, pod_gpus, priority, within_level, node_ok)
                if grant is not None:
                    parts.grants[owner] = grant
                    return grant
            return None
        finally:
            fresh.clear()

    def _chains_for(self, vc: VirtualCluster, chain: str | None, opportunistic: bool) -> list[str]:
        if chain is not None:
            if chain not in self._parts.spec.chains:
                raise KeyError(f"unknown chain {chain!r}")
            return [chain]
        if opportunistic:
            return sorted(self._parts.spec.chains)
        return vc.chains()

    def allocate(self, owner: str, vc: str, level: int, chain: str | None = None) -> Grant | None:
        """Admin API: one whole guaranteed cell of ``level`` (any level, e.g. a rack) for the VC."""
        self._before = None
        parts = self._parts
        if owner in parts.grants:
            raise ValueError(f"owner {owner!r} already holds cells; release it first")
        v = parts.vcs.get(vc)
        if v is None:
            raise KeyError(f"unknown VC {vc!r}")
        parts.binder.fresh.clear()
        for cname in self._chains_for(v, chain, False):
            if not 1 <= level <= parts.spec.chains[cname].top_level:
                continue
            g = parts.guaranteed.allocate(owner, v, cname, level)
            parts.binder.fresh.clear()
            if g is not None:
                parts.grants[owner] = g
                return g
        return None

    def release(self, owner: str) -> None:
        """Free all cells of ``owner``; buddies merge back. Unknown owners are ignored."""
        self._before = None
        parts = self._parts
        grant = parts.grants.pop(owner, None)
        if grant is None:
            return
        by_id = parts.tree.by_id
        if grant.opportunistic:
            for cid, _ in grant.held:
                c = by_id[cid]
                unmark_opportunistic(c, owner)
                # a victim that left no longer holds anyone up (a guaranteed job, or a downgraded one around it)
                for g in guaranteed_over(c) | victims_under(c):
                    held = parts.grants[g]
                    if owner in held.victims:
                        held.victims = held.victims - {owner}  # a new set: callers may be iterating the old one
        else:
            vc = parts.vcs[grant.vc]
            for cid, _ in grant.held:
                c = by_id[cid]
                set_pod(c, None, False)
                parts.binder.free(vc, c)

    def grant_of(self, owner: str) -> Grant | None:
        return self._parts.grants.get(owner)

    def grants(self) -> dict[str, Grant]:
        return dict(self._parts.grants)

    # ------------------------------------------------------------ views
    def vc_view(self, vc: str) -> VCView:
        return vc_view(self._parts, vc)

    def free_gpus(self, chain: str | None = None) -> int:
        """GPUs with no pod at all (guaranteed or opportunistic)."""
        return free_gpus(self._parts.tree, chain)

    def node_free(self, chain: str) -> dict[str, int]:
        return node_free(self._parts.tree, chain)

    def why_never(self, vc: str, pod_gpus: list[int], chain: str | None = None,
                  within_level: int | None = None) -> str | None:
        """Why the request can never fit this VC (even empty), or None if it can."""
        return why_never(self._parts, vc, pod_gpus, chain, within_level)

    # ------------------------------------------------------------ opportunistic shares
    def set_opportunistic_demand(self, vc: str, gpus: int) -> None:
        """Tell the allocator how many opportunistic GPUs a VC wants (the engine's queue); 0 clears it."""
        self._before = None
        self._parts.opportunistic.set_demand(vc, gpus)

    def opportunistic_usage(self, vc: str) -> int:
        return self._parts.opportunistic.usage(vc)

    def opportunistic_capacity(self) -> int:
        """GPUs without a guaranteed pod, over all chains (what low-priority work may share)."""
        return self._parts.opportunistic.capacity()

    def opportunistic_shares(self, demands: dict[str, int] | None = None) -> dict[str, float]:
        """Weighted max-min fair shares of the opportunistic capacity (weights from the spec)."""
        return self._parts.opportunistic.shares(demands)

    # ------------------------------------------------------------ health
    def set_health(self, node: str, gpu: int | None, healthy: bool) -> list[str]:
        """Mark a node (gpu=None) or one GPU bad or good; returns owners whose cells just went bad."""
        self._before = None
        return self._parts.health.set(node, gpu, healthy)

    def unhealthy(self) -> list[str]:
        return self._parts.health.unhealthy()

    # ------------------------------------------------------------ restore, reconfigure, exchange
    def restore(self, grant: GrantLike, *, force_opportunistic: bool = False) -> None:
        """Re-bind a stored grant exactly; raises BindingConflict (changing nothing) when it cannot be.

        ``grant`` is a ``Grant`` (from this or another allocator, or rebuilt
        from stored pods) or its ``to_dict()`` form. ``force_opportunistic``
        restores a guaranteed grant as opportunistic (a downgrade). A
        guaranteed grant gets back as victims the opportunistic grants still
        on its GPUs, whichever is restored first.
        """
        self._before = None
        self._parts.restorer.restore(grant, force_opportunistic)

    def reconfigure(self, new_spec: SpecSource) -> list[str]:
        """Load a new spec over the existing bindings; returns owners downgraded to opportunistic.

        The one reconfiguration: every door reaches it (the service's ``reload_spec``).
        Nothing changes when it raises (BindingConflict).
        """
        if not isinstance(new_spec, ClusterSpec):
            new_spec = load_spec(new_spec)
        before = self._parts
        self._parts, downgraded = reconfigure(before, new_spec)
        self._before = before
        return downgraded

    def undo_reconfigure(self) -> None:
        """Put back the spec and grants the last ``reconfigure`` replaced (a door that could not store it).

        Only while nothing else changed the allocator since: ``RuntimeError`` otherwise, changing nothing.
        """
        if self._before is None:
            raise RuntimeError("undo_reconfigure: nothing to undo (no reconfigure, or the allocator changed since)")
        self._parts, self._before = self._before, None

    def transfer(self, lender_vc: str, borrower_vc: str, chain: str, level: int, count: int) -> None:
        """Move ``count`` unbound level-``level`` cells of ``chain`` from lender to borrower."""
        self._before = None
        self._parts.loans.transfer(lender_vc, borrower_vc, chain, level, count)

    def check_invariants(self) -> None:
        """Raise AssertionError naming the broken invariant (for tests and audits)."""
        check_invariants(self._parts)
