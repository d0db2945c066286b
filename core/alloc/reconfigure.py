"""Reconfiguration: a new spec loaded over the current grants (HiveD, OSDI '20, §4).

The one reconfiguration: ``Allocator.reconfigure`` calls it, and so does every
door (the service's ``reload_spec`` reconfigures its engine's allocator).

The VC cells that hold guaranteed jobs are bound again first, to the same
physical cells, wherever the new spec still gives their VC such a cell
(biggest first), so the jobs go back into the cells they ran in: reloading
the same spec changes nothing. Then the grants come back in three passes:

1. guaranteed grants, each on its own cells as guaranteed where it still fits;
2. opportunistic grants that wait for nobody (victims included);
3. the guaranteed grants that no longer fit, downgraded to opportunistic on the
   same GPUs, and grants downgraded before that still wait for victims. A
   victim such a job was waiting for stays held by its own grant until it is
   released (it may still be in its grace): the downgraded job shares its GPUs
   with it, and with no one else, so no GPU is ever handed out while a job
   still runs on it.

Cells carried for a guaranteed job that ended downgraded hold no guaranteed
pod: under dynamic binding they are unbound again.
"""
from __future__ import annotations

from ..cells import Cell
from ..grant import BindingConflict, Grant
from ..spec import ClusterSpec
from .parts import AllocatorParts


def reconfigure(old: AllocatorParts, new_spec: ClusterSpec) -> tuple[AllocatorParts, list[str]]:
    """The parts for ``new_spec`` holding ``old``'s grants, and the owners downgraded; ``old`` is untouched."""
    new = AllocatorParts(new_spec, "dynamic")   # static: the rest is bound once the jobs are back
    gone: dict[str, list[str]] = {}
    for g in old.grants.values():
        if g.vc not in new.vcs:
            gone.setdefault(g.vc, []).append(g.owner)
    if gone:  # their jobs would have no VC to run under: refuse, nothing changes
        vc, owners = sorted(gone.items())[0]
        raise BindingConflict(f"reconfiguration refused: VC {vc!r} is not in the new spec but still holds "
                              f"{', '.join(sorted(owners))} (release them first)", sorted(owners)[0])
    for gpu in old.health.unhealthy():  # bad hardware stays bad across a spec reload (when it still exists)
        cell = old.tree.by_id[gpu]
        if gpu in new.tree.by_id and cell.node is not None and cell.node in new.tree.nodes:
            new.health.set(cell.node, cell.gpu_index, False)
    carried = _carry(old, new)
    downgraded = _restore_all(old, new)
    if old.binder.binding == "dynamic":
        for c in carried:   # carried for a job that ended downgraded: idle, so unbound again
            if c.bound_vc is not None and c.guaranteed_gpus == 0 and c.pinned_id is None:
                assert c.free_list is not None, f"{c.id} is idle but not listed in its VC"
                c.free_list.remove(c)
                new.binder.unbind(c)
    else:
        new.binder.binding = "static"
        new.binder.bind_all_static()
    new.binder.fresh.clear()
    for name, old_vc in old.vcs.items():
        if name in new.vcs:
            new.vcs[name].opportunistic_demand = old_vc.opportunistic_demand
    return new, downgraded


def _carry(old: AllocatorParts, new: AllocatorParts) -> list[Cell]:
    """Bind again, in ``new``, the VC cells that hold guaranteed pods in ``old``; returns the cells bound."""
    held = [c for vc in old.vcs.values() for c in vc.bound_cells() if c.guaranteed_gpus]
    out = []
    for c in sorted(held, key=lambda c: (-c.level, -c.guaranteed_gpus, c.id)):
        assert c.bound_vc is not None
        if new.binder.carry(c.bound_vc, c.id, c.chain, c.level):
            out.append(new.tree.by_id[c.id])
    return out


def _restore_all(old: AllocatorParts, new: AllocatorParts) -> list[str]:
    """Every grant of ``old`` in ``new`` (the three passes of the module docstring); the owners downgraded."""
    def order(g: Grant) -> tuple[int, str]:
        return -g.priority, g.owner

    late: list[Grant] = []       # pass 3: downgraded now, or before and still waiting for victims
    for g in sorted((g for g in old.grants.values() if not g.opportunistic), key=order):
        try:
            new.restorer.restore(g)
        except BindingConflict:
            late.append(g)
    late_owners = {g.owner for g in late}
    for g in sorted(old.grants.values(), key=order):
        if g.opportunistic and g.owner not in late_owners:
            if g.victims:
                late.append(g)
                continue
            _restore_or_refuse(new, g)
    downgraded: list[str] = []
    for g in late:
        _restore_or_refuse(new, g, force_opportunistic=True)
        if not g.opportunistic:
            downgraded.append(g.owner)
    return downgraded


def _restore_or_refuse(new: AllocatorParts, g: Grant, force_opportunistic: bool = False) -> None:
    try:
        new.restorer.restore(g, force_opportunistic)
    except BindingConflict as exc:
        raise BindingConflict(f"reconfiguration would lose {g.owner}: {exc}", g.owner) from None
