"""Rebuilding bindings (restart, reconfiguration) and moving cells between VCs (exchange).

``restore`` re-binds a stored grant to exactly the cells it had (from the
journal or from pod annotations) and refuses anything that would double-bind
a GPU or break a VC's quota or invariant (2). ``reconfigure`` loads a new spec
and restores every grant on top of it; guaranteed grants that no longer fit
are downgraded to opportunistic on the same GPUs (HiveD 001 §4), so nothing
is lost. ``transfer`` moves unbound preassigned cells from one VC to another:
the chain's total reservation r_k does not change, so invariant (2) and
with it every VC's sharing safety still hold.
"""
from __future__ import annotations

from typing import Optional


class BindingConflict(ValueError):
    """A stored binding cannot be rebuilt: names the owner, the cell and why."""


def _bound_hints(g) -> list:
    """The distinct (cell id, level) VC cells a stored grant was bound in, biggest first ([] if unknown)."""
    raw = g.get("bound") if isinstance(g, dict) else getattr(g, "_bound", None)
    out = []
    for b in raw or ():
        if isinstance(b, (list, tuple)) and len(b) == 2 and isinstance(b[0], str) and isinstance(b[1], int):
            if tuple(b) not in out:
                out.append(tuple(b))
    return sorted(out, key=lambda b: -b[1])


class ReconfigMixin:
    # ------------------------------------------------------------ restore
    def _grant_cells(self, g) -> tuple[str, str, str, bool, int, list]:
        """Normalize a GangGrant, its to_dict() or a Placement-like dict to (owner, vc, chain, opp, prio, cells)."""
        get = (lambda k, d=None: g.get(k, d)) if isinstance(g, dict) else (lambda k, d=None: getattr(g, k, d))
        owner, vc = get("owner"), get("vc")
        if owner is None or vc is None:
            raise BindingConflict("a binding needs 'owner' and 'vc'")
        chain, opp, prio = get("chain"), bool(get("opportunistic", False)), int(get("priority", 0) or 0)
        out = []
        pods = get("pods") or []
        cells = get("cells") if not isinstance(g, dict) or "cells" in g else None
        gpus = get("gpus") if isinstance(g, dict) else [n for _, n in g._cells]
        if cells and isinstance(cells, list) and cells and isinstance(cells[0], str) and \
                (not isinstance(g, dict) or isinstance(gpus, list)):
            for i, cid in enumerate(cells):
                if cid not in self.tree.by_id:
                    raise BindingConflict(f"{owner}: cell {cid!r} does not exist in this spec")
                c = self.tree.by_id[cid]
                n = gpus[i] if isinstance(gpus, list) and i < len(gpus) else c.gpus
                out.append((c, n))
        else:
            for p in pods:
                node = p["node"] if isinstance(p, dict) else p.node
                idx = list(p["gpus"] if isinstance(p, dict) else p.gpus)
                try:
                    leaves = [self.tree.gpu(node, i) for i in idx]
                except KeyError:
                    raise BindingConflict(f"{owner}: node {node!r} GPUs {idx} do not exist in this spec") from None
                out.append((self.tree.lca(leaves), len(idx)))
        if not out:
            raise BindingConflict(f"{owner}: the binding names no cells")
        chains = {c.chain for c, _ in out}
        if len(chains) != 1 or (chain is not None and chain not in chains):
            raise BindingConflict(f"{owner}: cells span chains {sorted(chains)}")
        return owner, vc, chains.pop(), opp, prio, out

    def restore(self, grant_like, *, force_opportunistic: bool = False) -> None:
        """Re-bind stored cells exactly; raises BindingConflict (changing nothing) when they cannot be.

        ``force_opportunistic`` restores a guaranteed grant as opportunistic
        (a downgrade). A guaranteed grant gets back as victims the
        opportunistic grants still on its GPUs, whichever is restored first.
        """
        from .allocator import GangGrant
        owner, vc, chain, opp, prio, cells = self._grant_cells(grant_like)
        opp = opp or force_opportunistic
        if owner in self._grants:
            raise BindingConflict(f"{owner}: already holds cells")
        if vc not in self.quota:
            raise BindingConflict(f"{owner}: unknown VC {vc!r}")
        hints = None if opp else _bound_hints(grant_like)
        first: Optional[BindingConflict] = None
        victims: Optional[set] = None
        try:
            # first the VC cells the grant was bound in (when it says), then the smallest cells the VC
            # has room for, then the largest (several pods of one gang may share one bound cell)
            for how in (("hints", "lowest", "widest") if hints else ("lowest", "widest")):
                try:
                    victims = self._restore_cells(owner, vc, chain, cells, opp, how, hints)
                    break
                except BindingConflict as exc:
                    first = first or exc
                    if opp:
                        break
        finally:
            self._fresh.clear()
        if victims is None:
            raise first
        self._grants[owner] = GangGrant(owner, vc, chain, opp, prio, cells, self.tree, victims)
        if opp:  # a guaranteed job restored earlier on these GPUs still waits for this one to leave
            for c, _ in cells:
                for g in self._guaranteed_over(c):
                    self._grants[g].victims.add(owner)

    def _restore_cells(self, owner, vc, chain, cells, opp, how, hints) -> set[str]:
        """Put ``owner``'s pods on ``cells`` (all or nothing); returns the opportunistic victims under them."""
        done = []
        mark = len(self._fresh)
        victims: set[str] = set()
        try:
            if how == "hints":
                for rid, level in hints:
                    root = self.tree.by_id.get(rid)
                    if root is not None and root.bound_vc is None:
                        self._carry_binding(vc, rid, chain, level)
            for c, _ in cells:
                if opp:
                    # two opportunistic pods never share a GPU, a downgraded job's included
                    if c.opp or any(a.opod for a in c.ancestors()):
                        raise BindingConflict(f"{owner}: cell {c.id} already runs opportunistic work")
                else:
                    self._restore_guaranteed_cell(owner, vc, c, widest=how == "widest")
                    victims |= self._victims(c)
                self._set_pod(c, owner, opp)
                done.append(c)
        except BindingConflict:
            for c in done:
                self._set_pod(c, None, opp)
                if not opp:
                    self._vc_free(vc, c, unbind=False)
            self._drop_fresh(mark, keep_doomed=False)
            raise
        return victims

    def _guaranteed_over(self, c) -> set[str]:
        """Owners of guaranteed pods on any GPU of ``c``."""
        out = {a.gpod for a in [c, *c.ancestors()] if a.gpod is not None}
        stack = [x for x in c.children if x.gp]
        while stack:
            x = stack.pop()
            if x.gpod is not None:
                out.add(x.gpod)
            else:
                stack.extend(y for y in x.children if y.gp)
        return out

    def _restore_guaranteed_cell(self, owner, vc, c, widest: bool = False) -> None:
        if c.gp or any(a.gpod for a in c.ancestors()):
            raise BindingConflict(f"{owner}: a GPU of cell {c.id} is already bound to a guaranteed job")
        root = next((a for a in [c, *c.ancestors()] if a.bound_vc is not None), None)
        lists = self.vfree[vc][c.chain]
        if root is not None:
            if root.bound_vc != vc:
                raise BindingConflict(f"{owner}: cell {c.id} lies in {root.id}, bound to VC {root.bound_vc}")
            y = self._listed_ancestor(c)
            if y is None or y.flist.phys:
                raise BindingConflict(f"{owner}: cell {c.id} is not free in VC {vc}")
            self._carve_to(lists, y, c)
            c.flist.remove(c)
            return
        ch = self._chain(c.chain)
        y = self._listed_ancestor(c)
        if y is None or not y.flist.phys:
            raise BindingConflict(f"{owner}: cell {c.id} is not free in the physical cluster")
        levels = range(c.level, y.level + 1)
        for k in (reversed(levels) if widest else levels):
            if self._unbound(vc, c.chain, k) <= 0:
                continue
            a = c
            while a.level < k:
                a = a.parent
            if not self._split_safe(c.chain, k, y.level):
                continue
            self._carve_to(self.pfree[c.chain], y, a)
            a.flist.remove(a)
            self._bind(vc, a)
            lists[k].add(a, self._key(a))
            self._carve_to(lists, a, c)
            c.flist.remove(c)
            return
        raise BindingConflict(f"{owner}: VC {vc} has no unbound {c.chain} cell of level {c.level}.."
                              f"{ch.top_level} left to hold {c.id}")

    def _carve_to(self, lists, y, target) -> None:
        """Split listed cell ``y`` along the path to ``target``; ``target`` ends up listed."""
        path = []
        x = target
        while x is not y:
            path.append(x)
            x = x.parent
        x = y
        for nxt in reversed(path):
            lists[x.level].remove(x)
            for ch in x.children:
                lists[ch.level].add(ch, self._key(ch))
            x = nxt

    # ------------------------------------------------------------ reconfigure
    def _carry_binding(self, vc: str, cid: str, chain: str, level: int) -> bool:
        """Bind physical cell ``cid`` to ``vc`` at ``level`` again, if the spec and invariant (2) allow it."""
        c = self.tree.by_id.get(cid)
        if c is None or c.chain != chain or c.level != level or vc not in self.quota:
            return False
        if self._unbound(vc, chain, level) <= 0:
            return False
        y = self._listed_ancestor(c)
        if y is None or not y.flist.phys or not self._split_safe(chain, level, y.level):
            return False
        self._carve_to(self.pfree[chain], y, c)
        c.flist.remove(c)
        self._bind(vc, c, doomed=c.bad > 0)
        self.vfree[vc][chain][level].add(c, self._key(c))
        return True

    def reconfigure(self, new_spec) -> list[str]:
        """Load a new spec over the existing bindings; returns owners downgraded to opportunistic.

        The VC cells that hold guaranteed jobs are bound again first, to the
        same physical cells, wherever the new spec still gives their VC such a
        cell (biggest first), so the jobs go back into the cells they ran in:
        reloading the same spec changes nothing. A guaranteed job that no
        longer fits is downgraded to opportunistic on the same GPUs; an
        opportunistic victim it was still waiting for stays its victim (its
        preemption goes on) but is no longer held here, since two
        opportunistic jobs never share a GPU.
        """
        from .allocator import Allocator
        new = Allocator(new_spec, binding="dynamic")   # static: the rest is bound once the jobs are back
        gone: dict[str, list[str]] = {}
        for g in self._grants.values():
            if g.vc not in new.quota:
                gone.setdefault(g.vc, []).append(g.owner)
        if gone:  # their jobs would have no VC to run under: refuse, nothing changes
            vc, owners = sorted(gone.items())[0]
            raise BindingConflict(f"reconfiguration refused: VC {vc!r} is not in the new spec but still holds "
                                  f"{', '.join(sorted(owners))} (release them first)")
        for gpu in self.unhealthy():  # bad hardware stays bad across a spec reload (when it still exists)
            cell = self.tree.by_id[gpu]
            if gpu in new.tree.by_id and cell.node in new.tree.nodes:
                new.set_health(cell.node, cell.gpu_index, False)
        held = [c for per in self.bound.values() for d in per.values() for c in d if c.gp]
        for c in sorted(held, key=lambda c: (-c.level, -c.gp, c.id)):
            new._carry_binding(c.bound_vc, c.id, c.chain, c.level)
        downgraded: list[str] = []
        waiting: dict[str, str] = {}   # opportunistic victim -> the downgraded job it makes room for
        grants = sorted(self._grants.values(), key=lambda g: (g.opportunistic, -g.priority, g.owner))
        for g in grants:
            data = g.to_dict()
            try:
                new.restore(data)
                continue
            except BindingConflict:
                if g.owner in waiting:   # on the GPUs of the job it was preempted for
                    new._grants[waiting[g.owner]].victims.add(g.owner)
                    continue
            try:
                new.restore(data, force_opportunistic=True)
            except BindingConflict as exc:
                raise BindingConflict(f"reconfiguration would lose {g.owner}: {exc}") from None
            if not g.opportunistic:
                new._grants[g.owner].downgraded = True
                downgraded.append(g.owner)
                for v in g.victims:
                    waiting.setdefault(v, g.owner)
        if self.binding == "static":
            new.binding = "static"
            new._bind_all_static()
        new._fresh.clear()
        new.opp_demand = {vc: n for vc, n in self.opp_demand.items() if vc in new.quota}
        self.__dict__.update(new.__dict__)
        return downgraded

    # ------------------------------------------------------------ exchange
    def transfer(self, lender_vc: str, borrower_vc: str, chain: str, level: int, count: int) -> None:
        """Move ``count`` unbound level-``level`` cells of ``chain`` from lender to borrower."""
        for vc in (lender_vc, borrower_vc):
            if vc not in self.quota:
                raise ValueError(f"unknown VC {vc!r}")
        if lender_vc == borrower_vc:
            raise ValueError("lender and borrower are the same VC")
        if chain not in self.spec.chains:
            raise ValueError(f"unknown chain {chain!r}")
        ch = self._chain(chain)
        if not 1 <= level <= ch.top_level:
            raise ValueError(f"level {level} is not a level of chain {chain} (1..{ch.top_level})")
        if not isinstance(count, int) or count < 1:
            raise ValueError(f"count must be a positive integer, got {count!r}")
        key = (chain, level)
        free = self._unbound(lender_vc, chain, level)
        if free < count:
            have = self.quota[lender_vc].get(key, 0)
            raise ValueError(f"unsafe transfer: VC {lender_vc} holds {have} {chain}.{ch.levels[level - 1]} cells, "
                             f"{have - free} of them in use, so it cannot lend {count}")
        self.quota[lender_vc][key] = self.quota[lender_vc].get(key, 0) - count
        self.quota[borrower_vc][key] = self.quota[borrower_vc].get(key, 0) + count
        # loans are kept per pair: cells going back to the VC they came from pay that loan off first
        # (netting per VC alone let A -> B -> C read as C lending -1)
        loans = self.loans
        back = min(count, loans.get((borrower_vc, lender_vc, key), 0))
        rest = count - back
        for pair, delta in (((borrower_vc, lender_vc, key), -back), ((lender_vc, borrower_vc, key), rest)):
            n = loans.get(pair, 0) + delta
            if n:
                loans[pair] = n
            else:
                loans.pop(pair, None)
        for vc in (lender_vc, borrower_vc):
            for book, side in ((self.lent[vc], 0), (self.borrowed[vc], 1)):
                n = sum(m for pair, m in loans.items() if pair[side] == vc and pair[2] == key)
                if n:
                    book[key] = n
                else:
                    book.pop(key, None)
