"""Cell exchange inside the running service (``CellExchange``, a part of SchedulerService: see host.py).

The REST handlers (jupyter_ext/handlers/exchange.py) look these methods up
by name on ``svc.exchange``. Each is a thin layer over one
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
from .errors import NotAuthorized, NotFound
from .host import ServiceHost
from .store import JournalWriteError, StoreError

log = logging.getLogger("hived.service")


class ExchangeNotEnabled(LookupError):
    """The allocator of this service cannot move cells (the quota baseline): HTTP 404."""


def make_arbiter(engine) -> ExchangeArbiter | None:
    """An arbiter over the engine's allocator, or None when it cannot transfer cells."""
    if not hasattr(engine.alloc, "transfer"):
        return None
    return ExchangeArbiter(engine.alloc)


class CellExchange:
    """The service's arbiter (``arb``: None when the allocator cannot move cells) and its journal."""

    def __init__(self, host: ServiceHost):
        self.host = host
        self.arb: ExchangeArbiter | None = make_arbiter(host.eng)   # restore() loads its journaled state
        self._unsaved = False   # the arbiter moved and the journal has not taken it yet

    @property
    def unsaved(self) -> bool:
        """The arbiter moved and the journal has not taken it yet (no snapshot may be taken)."""
        return self._unsaved

    def restore(self) -> None:
        """The arbiter over the new engine, with the journaled exchange state (before jobs are restored)."""
        self.arb = self._restored()

    def _restored(self) -> ExchangeArbiter | None:
        arb = make_arbiter(self.host.eng)
        doc = self.host.store.load_exchange()
        if doc is None:
            return arb
        if arb is None:
            log.warning("the journal holds cell exchange state, but scheme %r cannot move cells: ignored",
                        self.host.scheme)
            return None
        try:
            res = exchange_state.load(arb, doc)
        except ValueError as exc:
            raise StoreError(f"{getattr(self.host.store, 'path', 'the journal')}: {exc}; "
                             f"hived will not start over it (restore the database from a backup)") from None
        for what in res.dropped:
            log.warning("cell exchange state: dropped %s", what)
        if res.moved_vcs:
            self.host.eng.on_capacity_changed(res.moved_vcs, [], self.host.clock())
        return arb

    def _save(self, now: float) -> None:
        """Journal the arbiter's state; when the journal refuses, the service turns degraded and
        the next tick writes it again."""
        if self.arb is None:
            return
        try:
            self.host.store.save_exchange(exchange_state.save(self.arb), now)
        except JournalWriteError as exc:
            self._unsaved = True
            self.host.degrade(exc)
            return
        self._unsaved = False

    def arbiter(self) -> ExchangeArbiter:
        if self.arb is None:
            raise ExchangeNotEnabled(f"cell exchange is not enabled in this service (scheme {self.host.scheme!r} "
                                     f"cannot move cells between VCs)")
        return self.arb

    # --- views (any user who may read the cluster) ---------------------------
    def board(self) -> dict:
        with self.host.lock:
            arb = self.arbiter()
            doc = arb.board()
            doc["exchanges"] = [e.to_dict() for e in arb.exchanges.values()]
            return doc

    def ledger(self) -> dict:
        with self.host.lock:
            return {"ledger": self.arbiter().ledger_view()}

    def offers(self) -> dict:
        with self.host.lock:
            return {"offers": self.arbiter().board()["offers"]}

    def requests(self) -> dict:
        with self.host.lock:
            return {"requests": self.arbiter().board()["requests"]}

    # --- posting (VC admins) -------------------------------------------------
    def post_offer(self, user: str, body: dict, groups=()) -> dict:
        return self._post("offer", user, body, groups)

    def post_request(self, user: str, body: dict, groups=()) -> dict:
        return self._post("request", user, body, groups)

    def _post(self, kind: str, user: str, body: dict, groups=()) -> dict:
        if not isinstance(body, dict):
            raise RequestError("body", f"must be an object, got {type(body).__name__}")
        vc = body.get("vc")
        with self.host.lock:
            arb = self.arbiter()
            if not isinstance(vc, str) or vc not in self.host.spec.vcs:
                raise self.host.unknown_vc(vc, user, groups)
            if not self.host.access.is_vc_admin(user, vc, groups):
                raise NotAuthorized(f"user {user!r} may not trade the cells of VC {vc!r}"
                                    f"{self.host.access.admins_for(user, vc, groups)}")
            now = self.host.clock()
            self.host.require_journal(now)
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
                self.host.store.save_exchange(exchange_state.save(arb), now)
            except JournalWriteError as exc:
                arb.offers, arb.requests, arb.ledger.entries, arb.posts_made = board
                for xid in set(arb.exchanges) - known:
                    del arb.exchanges[xid]
                self.host.degrade(exc)
                assert self.host.degraded is not None   # degrade has just set it
                raise ServiceDegraded(self.host.degraded) from None
            self._apply(arb.tick(now), now, write=True)
            doc = post.to_dict()
            doc["matched"] = [arb.exchanges[e.id].to_dict() for e in made]
        self.host.wake()
        return doc

    def withdraw(self, user: str, post_id: str, groups=(), kind: str | None = None) -> dict:
        """Take an open offer or request (``kind``: only that kind) off the board (its VC's
        admins or cluster admins); journaled before it is answered."""
        with self.host.lock:
            arb = self.arbiter()
            post = (arb.offers.get(post_id) or arb.requests.get(post_id)) if isinstance(post_id, str) else None
            if post is not None and kind is not None and post.kind.value != kind:
                post = None
            if post is None:
                raise NotFound("post", f"no open post {post_id!r} (matched, withdrawn or expired); "
                                       f"open: {', '.join(sorted([*arb.offers, *arb.requests])) or 'none'}")
            if not self.host.access.is_vc_admin(user, post.vc, groups):
                raise NotAuthorized(f"user {user!r} may not withdraw {post_id} of VC {post.vc!r}"
                                    f"{self.host.access.admins_for(user, post.vc, groups)}")
            now = self.host.clock()
            self.host.require_journal(now)
            arb.withdraw(post_id, post.vc)
            try:
                self.host.store.save_exchange(exchange_state.save(arb), now)
            except JournalWriteError as exc:
                (arb.offers if post.kind.value == "offer" else arb.requests)[post.id] = post
                self.host.degrade(exc)
                assert self.host.degraded is not None   # degrade has just set it
                raise ServiceDegraded(self.host.degraded) from None
            doc = post.to_dict()
            doc["withdrawn"] = True
            return doc

    # --- the timer and spec reloads -----------------------------------------
    def tick(self, now: float) -> list[str]:
        """Start / end the windows due; returns the jobs the engine downgraded."""
        if self.arb is None:
            return []
        return self._apply(self.arb.tick(now), now)

    def _apply(self, res: TickResult, now: float, write: bool = False) -> list[str]:
        if res.started or res.ended or res.failed or res.expired or res.delayed or self._unsaved:
            self._save(now)
        vcs = {v for ex in res.started + res.ended + res.delayed for g in ex.legs for v in (g.lender, g.borrower)}
        if vcs or res.downgraded:
            self.host.eng.on_capacity_changed(sorted(vcs), res.downgraded, now)
            if write and res.downgraded:
                self.host.try_write(res.downgraded, now)   # kept in memory and rewritten when it fails
            self.host.wake()
        return list(res.downgraded)

    def before_reload(self) -> None:
        """A new spec means a new allocator: refuse while cells are promised or lent."""
        if self.arb is None:
            return
        busy = [e.id for e in self.arb.exchanges.values()
                if e.state in (ExchangeState.PENDING, ExchangeState.ACTIVE)]
        if busy:
            raise RequestError("spec", f"cell exchanges {', '.join(busy)} are pending or active; reload the "
                                       f"spec after their windows end; nothing changed")

    def after_reload(self) -> None:
        """New arbiter on the new engine; the ledger carries over, open posts do not."""
        old, self.arb = self.arb, make_arbiter(self.host.eng)
        if old is not None and self.arb is not None:
            for vc, entry in old.ledger.entries.items():
                self.arb.ledger.entries[vc] = entry
            self._unsaved = True   # the next tick journals it (a refused reload keeps the old one)
