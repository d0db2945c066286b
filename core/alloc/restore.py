"""Rebuilding a stored grant on exactly the cells it had (restart, reconfiguration, exchange).

The grant comes from the journal (``Grant.to_dict()``), from pod annotations
(pods with node and GPU indices) or straight from another allocator
(reconfiguration). A guaranteed grant re-binds the VC cells it was bound in
when it says which (``bound_in``), else the smallest, then the largest VC
cells the VC has room for; anything that would double-bind a GPU or break a
VC's quota or invariant (2) raises ``BindingConflict`` and changes nothing.
An opportunistic grant that names victims (a downgraded job, handed over as a
``Grant`` by a reconfiguration) may share GPUs with exactly those victims; a
victim on exactly its cell keeps the cell, and the grant waits there for it.
"""
from __future__ import annotations

from typing import Any

from ..cells import Cell, CellTree
from ..grant import BindingConflict, Grant
from .binder import Binder
from .guaranteed import bound_root
from .pod_marks import guaranteed_over, mark_opportunistic, set_pod, unmark_opportunistic, victims_under
from .virtual_cluster import VirtualCluster

GrantLike = Grant | dict[str, Any]


class Restorer:
    def __init__(self, tree: CellTree, binder: Binder, grants: dict[str, Grant]):
        self.tree = tree
        self.binder = binder
        self.grants = grants

    def restore(self, grant_like: GrantLike, force_opportunistic: bool = False) -> Grant:
        stored = Grant.from_dict(grant_like) if isinstance(grant_like, dict) else grant_like
        owner = stored.owner
        cells = self.resolve(stored)
        chain = cells[0][0].chain
        opp = stored.opportunistic or force_opportunistic
        if owner in self.grants:
            raise BindingConflict(f"{owner}: already holds cells")
        vc = self.binder.vcs.get(stored.vc)
        if vc is None:
            raise BindingConflict(f"{owner}: unknown VC {stored.vc!r}")
        hints = None if opp else _bound_hints(stored)
        # a downgraded grant may share GPUs with the victims it still waits for (only with those)
        waits_for = frozenset(stored.victims) if opp else frozenset()
        first: BindingConflict | None = None
        victims: set[str] | None = None
        try:
            # first the VC cells the grant was bound in (when it says), then the smallest cells the VC
            # has room for, then the largest (several pods of one gang may share one bound cell)
            for how in (("hints", "lowest", "widest") if hints else ("lowest", "widest")):
                try:
                    victims = self._restore_cells(owner, vc, chain, cells, (opp, waits_for), how, hints or [])
                    break
                except BindingConflict as exc:
                    first = first or exc
                    if opp:
                        break
        finally:
            self.binder.fresh.clear()
        if victims is None:
            assert first is not None
            raise first
        grant = Grant(owner, vc.name, chain, opp, stored.priority, None, victims,
                      held=[(c.id, g) for c, g in cells],
                      bound_in=None if opp else [bound_root(c) for c, _ in cells], tree=self.tree)
        grant.downgraded = stored.downgraded or (opp and not stored.opportunistic)
        self.grants[owner] = grant
        if opp:  # a guaranteed job restored earlier on these GPUs still waits for this one to leave
            for c, _ in cells:
                for g in guaranteed_over(c):
                    self.grants[g].victims.add(owner)
        return grant

    def resolve(self, g: Grant) -> list[tuple[Cell, int]]:
        """The cells of a stored grant in this tree, with the GPUs each pod uses."""
        owner = g.owner
        out: list[tuple[Cell, int]] = []
        by_id = self.tree.by_id
        held = g.held or ([(p.cells[0], len(p.gpus)) for p in g.pods]
                          if g.pods and all(len(p.cells) == 1 for p in g.pods) else [])
        if held:
            for cid, n in held:
                if cid not in by_id:
                    raise BindingConflict(f"{owner}: cell {cid!r} does not exist in this spec")
                c = by_id[cid]
                out.append((c, n or c.gpus))
        else:
            for p in g.pods:
                idx = list(p.gpus)
                try:
                    leaves = [self.tree.gpu(p.node, i) for i in idx]
                except KeyError:
                    raise BindingConflict(f"{owner}: node {p.node!r} GPUs {idx} do not exist in this spec") from None
                out.append((self.tree.lca(leaves), len(idx)))
        if not out:
            raise BindingConflict(f"{owner}: the binding names no cells")
        chains = {c.chain for c, _ in out}
        if len(chains) != 1 or (g.chain and g.chain not in chains):
            raise BindingConflict(f"{owner}: cells span chains {sorted(chains)}")
        return out

    def _restore_cells(self, owner: str, vc: VirtualCluster, chain: str, cells: list[tuple[Cell, int]],
                       kind: tuple[bool, frozenset[str]], how: str, hints: list[tuple[str, int]]) -> set[str]:
        """Put ``owner``'s pods on ``cells`` (all or nothing); returns the opportunistic victims under them.

        ``kind``: opportunistic or not, and the victims an opportunistic (downgraded) grant may share GPUs with.
        """
        opp, waits_for = kind
        binder = self.binder
        done = []
        mark = len(binder.fresh)
        victims: set[str] = set()
        try:
            if how == "hints":
                for rid, level in hints:
                    root = self.tree.by_id.get(rid)
                    if root is not None and root.bound_vc is None:
                        binder.carry(vc.name, rid, chain, level)
            for c, _ in cells:
                there = victims_under(c)
                if opp:
                    # two opportunistic pods never share a GPU, but for a downgraded job and its victims
                    if there - waits_for or c.waiting_owner is not None:
                        raise BindingConflict(f"{owner}: cell {c.id} already runs opportunistic work")
                    mark_opportunistic(c, owner)
                else:
                    binder.take_exact(owner, vc, c, widest=how == "widest")
                    set_pod(c, owner, False)
                victims |= there
                done.append(c)
        except BindingConflict:
            for c in done:
                if opp:
                    unmark_opportunistic(c, owner)
                else:
                    set_pod(c, None, False)
                    binder.free(vc, c, unbind=False)
            binder.drop_fresh(mark, keep_doomed=False)
            raise
        return victims


def _bound_hints(g: Grant) -> list[tuple[str, int]]:
    """The distinct (cell id, level) VC cells a stored grant was bound in, biggest first ([] if unknown)."""
    out: list[tuple[str, int]] = []
    for b in g.bound_in or ():
        if b is not None and b not in out:
            out.append(b)
    return sorted(out, key=lambda b: -b[1])
