"""Reconfiguration: a new spec loaded over the current grants (HiveD, OSDI '20, §4).

The VC cells that hold guaranteed jobs are bound again first, to the same
physical cells, wherever the new spec still gives their VC such a cell
(biggest first), so the jobs go back into the cells they ran in: reloading
the same spec changes nothing. A guaranteed job that no longer fits is
downgraded to opportunistic on the same GPUs; an opportunistic victim it was
still waiting for stays its victim (its preemption goes on) but is no longer
held, since two opportunistic jobs never share a GPU.
"""
from __future__ import annotations

from ..grant import BindingConflict
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
                              f"{', '.join(sorted(owners))} (release them first)")
    for gpu in old.health.unhealthy():  # bad hardware stays bad across a spec reload (when it still exists)
        cell = old.tree.by_id[gpu]
        if gpu in new.tree.by_id and cell.node is not None and cell.node in new.tree.nodes:
            new.health.set(cell.node, cell.gpu_index, False)
    held = [c for vc in old.vcs.values() for c in vc.bound_cells() if c.guaranteed_gpus]
    for c in sorted(held, key=lambda c: (-c.level, -c.guaranteed_gpus, c.id)):
        assert c.bound_vc is not None
        new.binder.carry(c.bound_vc, c.id, c.chain, c.level)
    downgraded: list[str] = []
    waiting: dict[str, str] = {}   # opportunistic victim -> the downgraded job it makes room for
    for g in sorted(old.grants.values(), key=lambda g: (g.opportunistic, -g.priority, g.owner)):
        try:
            new.restorer.restore(g)
            continue
        except BindingConflict:
            if g.owner in waiting:   # on the GPUs of the job it was preempted for
                new.grants[waiting[g.owner]].victims.add(g.owner)
                continue
        try:
            new.restorer.restore(g, force_opportunistic=True)
        except BindingConflict as exc:
            raise BindingConflict(f"reconfiguration would lose {g.owner}: {exc}") from None
        if not g.opportunistic:
            new.grants[g.owner].downgraded = True
            downgraded.append(g.owner)
            for v in g.victims:
                waiting.setdefault(v, g.owner)
    if old.binder.binding == "static":
        new.binder.binding = "static"
        new.binder.bind_all_static()
    new.binder.fresh.clear()
    for name, old_vc in old.vcs.items():
        if name in new.vcs:
            new.vcs[name].opportunistic_demand = old_vc.opportunistic_demand
    return new, downgraded
