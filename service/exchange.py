"""Cell exchange inside the running service (a mixin of SchedulerService).

The REST handlers (jupyter_ext/handlers/exchange.py) look these methods up
by name (``exchange_<what>``). Each is a thin layer over one
``ExchangeArbiter`` built on the engine's allocator (docs/exchange.md).
When a window starts or ends, cells move between VCs under the engine, so
the engine is told (``Engine.on_capacity_changed``): queues of those VCs
are tried again and jobs whose borrowed cells went back are booked as
opportunistic.

The board, the exchanges and the ledger are journaled as one document
(``core/exchange_state.py``) after every post and every window that starts or
ends, and loaded on start before any job is restored: cells still lent are
moved again, so jobs on borrowed cells fit their VC as they did, and the
GPU-hour accounts go on where they were. A post is written before it is
answered (refused, and forgotten, when the journal cannot take it).
"""
from __future__ import annotations

import copy
import logging

from hived.core import exchange_state
from hived.core.engine import RequestError
from hived.core.exchange import ExchangeArbiter, ExchangeError, ExchangeState, TickResult

from .degraded import ServiceDegraded
from .mixin_host import MixinHost
from .store import JournalWriteError, StoreError

log = logging.getLogger("hived.service")


class ExchangeNotEnabled(LookupError):
    """The allocator of this service cannot move cells (the quota baseline): HTTP 404."""


def make_arbiter(engine) -> ExchangeArbiter | None:
    """An arbiter over the engine's allocator, or None when it cannot transfer cells."""
    if not hasattr(engine.alloc, "transfer"):
        return None
    return ExchangeArbiter(engine.alloc)


class ExchangeMixin(MixinHost):
    _arb: ExchangeArbiter | None = None
    _exchange_unsaved = False   # the arbiter moved and the journal has not taken it yet

    def _exchange_restore(self) -> ExchangeArbiter | None:
        """The arbiter over the new engine, with the journaled exchange state (before jobs are restored)."""
        arb = make_arbiter(self.eng)
        doc = self.store.load_exchange()
        if doc is None:
            return arb
        if arb is None:
            log.warning("the journal holds cell exchange state, but scheme %r cannot move cells: ignored",
                        self.scheme)
            return None
        try:
            res = exchange_state.load(arb, doc)
        except ValueError as exc:
            raise StoreError(f"{getattr(self.store, 'path', 'the journal')}: {exc}; "
                             f"hived will not start over it (restore the database from a backup)") from None
        for what in res.dropped:
            log.warning("cell exchange state: dropped %s", what)
        if res.moved_vcs:
            self.eng.on_capacity_changed(res.moved_vcs, [], self.clock())
        return arb

    def _save_exchange(self, now: float) -> None:
        """Journal the arbiter's state; when the journal refuses, the service turns degraded and
        the next tick writes it again."""
        if self._arb is None:
            return
        try:
            self.store.save_exchange(exchange_state.save(self._arb), now)
        except JournalWriteError as exc:
            self._exchange_unsaved = True
            self._degrade(exc)
            return
        self._exchange_unsaved = False

    def _arbiter(self) -> ExchangeArbiter:
        if self._arb is None:
            raise ExchangeNotEnabled(f"cell exchange is not enabled in this service (scheme {self.scheme!r} "
                                     f"cannot move cells between VCs)")
        return self._arb

    # --- views (any user who may read the cluster) ---------------------------
    def exchange_board(self) -> dict:
        with self._lock:
            arb = self._arbiter()
            doc = arb.board()
            doc["exchanges"] = [e.to_dict() for e in arb.exchanges.values()]
            return doc

    def exchange_ledger(self) -> dict:
        with self._lock:
            return {"ledger": self._arbiter().ledger_view()}

    def exchange_offers(self) -> dict:
        with self._lock:
            return {"offers": self._arbiter().board()["offers"]}

    def exchange_requests(self) -> dict:
        with self._lock:
            return {"requests": self._arbiter().board()["requests"]}

    # --- posting (VC admins) -------------------------------------------------
    def exchange_post_offer(self, user: str, body: dict, groups=()) -> dict:
        return self._exchange_post("offer", user, body, groups)

    def exchange_post_request(self, user: str, body: dict, groups=()) -> dict:
        return self._exchange_post("request", user, body, groups)

    def _exchange_post(self, kind: str, user: str, body: dict, groups=()) -> dict:
        from .scheduler import NotAuthorized
        if not isinstance(body, dict):
            raise RequestError("body", f"must be an object, got {type(body).__name__}")
        vc = body.get("vc")
        with self._lock:
            arb = self._arbiter()
            if not isinstance(vc, str) or vc not in self.spec.vcs:
                raise self.unknown_vc(vc, user, groups)
            if not self._is_admin(user, vc, groups):
                raise NotAuthorized(f"user {user!r} may not trade the cells of VC {vc!r}"
                                    f"{self.access.admins_for(user, vc, groups)}")
            now = self.clock()
            self._require_journal(now)
            # matching moves no cells (start=False): the board alone changes, and comes back as
            # it was when the journal refuses the post
            board = copy.deepcopy((arb.offers, arb.requests, arb.ledger.entries, arb.posts_made))
            known = set(arb.exchanges)
            try:
                post = arb.post_payload(kind, body, now)
            except ExchangeError as exc:
                raise RequestError(exc.where, exc.problem) from None
            made = arb.match(now, start=False)
            try:
                self.store.save_exchange(exchange_state.save(arb), now)
            except JournalWriteError as exc:
                arb.offers, arb.requests, arb.ledger.entries, arb.posts_made = board
                for xid in set(arb.exchanges) - known:
                    del arb.exchanges[xid]
                self._degrade(exc)
                assert self.degraded is not None   # _degrade has just set it
                raise ServiceDegraded(self.degraded) from None
            self._exchange_apply(arb.tick(now), now, write=True)
            doc = post.to_dict()
            doc["matched"] = [arb.exchanges[e.id].to_dict() for e in made]
        self._wake.set()
        return doc

    def exchange_withdraw(self, user: str, post_id: str, groups=(), kind: str | None = None) -> dict:
        """Take an open offer or request (``kind``: only that kind) off the board (its VC's
        admins or cluster admins); journaled before it is answered."""
        from .scheduler import NotAuthorized, NotFound
        with self._lock:
            arb = self._arbiter()
            post = (arb.offers.get(post_id) or arb.requests.get(post_id)) if isinstance(post_id, str) else None
            if post is not None and kind is not None and post.kind.value != kind:
                post = None
            if post is None:
                raise NotFound("post", f"no open post {post_id!r} (matched, withdrawn or expired); "
                                       f"open: {', '.join(sorted([*arb.offers, *arb.requests])) or 'none'}")
            if not self._is_admin(user, post.vc, groups):
                raise NotAuthorized(f"user {user!r} may not withdraw {post_id} of VC {post.vc!r}"
                                    f"{self.access.admins_for(user, post.vc, groups)}")
            now = self.clock()
            self._require_journal(now)
            arb.withdraw(post_id, post.vc)
            try:
                self.store.save_exchange(exchange_state.save(arb), now)
            except JournalWriteError as exc:
                (arb.offers if post.kind.value == "offer" else arb.requests)[post.id] = post
                self._degrade(exc)
                assert self.degraded is not None   # _degrade has just set it
                raise ServiceDegraded(self.degraded) from None
            doc = post.to_dict()
            doc["withdrawn"] = True
            return doc

    # --- the timer and spec reloads -----------------------------------------
    def _exchange_tick(self, now: float) -> list[str]:
        """Start / end the windows due; returns the jobs the engine downgraded."""
        if self._arb is None:
            return []
        return self._exchange_apply(self._arb.tick(now), now)

    def _exchange_apply(self, res: TickResult, now: float, write: bool = False) -> list[str]:
        if res.started or res.ended or res.failed or res.expired or res.delayed or self._exchange_unsaved:
            self._save_exchange(now)
        vcs = {v for ex in res.started + res.ended + res.delayed for g in ex.legs for v in (g.lender, g.borrower)}
        if vcs or res.downgraded:
            self.eng.on_capacity_changed(sorted(vcs), res.downgraded, now)
            if write and res.downgraded:
                self._try_write(res.downgraded, now)   # kept in memory and rewritten when it fails
            self._wake.set()
        return list(res.downgraded)

    def _exchange_before_reload(self) -> None:
        """A new spec means a new allocator: refuse while cells are promised or lent."""
        if self._arb is None:
            return
        busy = [e.id for e in self._arb.exchanges.values()
                if e.state in (ExchangeState.PENDING, ExchangeState.ACTIVE)]
        if busy:
            raise RequestError("spec", f"cell exchanges {', '.join(busy)} are pending or active; reload the "
                                       f"spec after their windows end; nothing changed")

    def _exchange_after_reload(self) -> None:
        """New arbiter on the new engine; the ledger carries over, open posts do not."""
        old, self._arb = self._arb, make_arbiter(self.eng)
        if old is not None and self._arb is not None:
            for vc, entry in old.ledger.entries.items():
                self._arb.ledger.entries[vc] = entry
            self._exchange_unsaved = True   # the next tick journals it (a refused reload keeps the old one)
