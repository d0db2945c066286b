"""Cell exchange inside the running service (a mixin of SchedulerService).

The REST handlers (jupyter_ext/handlers/exchange.py) look these methods up
by name (``exchange_<what>``). Each is a thin layer over one
``ExchangeArbiter`` built on the engine's allocator (docs/exchange.md).
When a window starts or ends, cells move between VCs under the engine, so
the engine is told (``Engine.on_capacity_changed``): queues of those VCs
are tried again and jobs whose borrowed cells went back are booked as
opportunistic.

Not persisted: the board, the exchanges and the ledger live in memory only.
A restart starts with an empty board and every VC back at its spec's cells
(a job running on borrowed cells is then restored as its binding allows).
"""
from __future__ import annotations

from typing import Optional

from hived.core.engine import RequestError
from hived.core.exchange import ExchangeArbiter, ExchangeError, ExchangeState, TickResult


class ExchangeNotEnabled(LookupError):
    """The allocator of this service cannot move cells (the quota baseline): HTTP 404."""


def make_arbiter(engine) -> Optional[ExchangeArbiter]:
    """An arbiter over the engine's allocator, or None when it cannot transfer cells."""
    if not hasattr(engine.alloc, "transfer"):
        return None
    return ExchangeArbiter(engine.alloc)


class ExchangeMixin:
    _arb: Optional[ExchangeArbiter] = None

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
        from .scheduler import NotAuthorized, NotFound
        if not isinstance(body, dict):
            raise RequestError("body", f"must be an object, got {type(body).__name__}")
        vc = body.get("vc")
        with self._lock:
            arb = self._arbiter()
            if not isinstance(vc, str) or vc not in self.spec.vcs:
                raise NotFound("vc", f"unknown VC {vc!r}; known: {', '.join(sorted(self.spec.vcs))}")
            if not self._is_admin(user, vc, groups):
                raise NotAuthorized(f"user {user!r} may not trade the cells of VC {vc!r} "
                                    f"(VC admins only: {self._admins(vc)})")
            now = self.clock()
            self._require_journal(now)
            try:
                post = arb.post_payload(kind, body, now)
            except ExchangeError as exc:
                raise RequestError(exc.where, exc.problem) from None
            made = arb.match(now, start=False)
            self._exchange_apply(arb.tick(now), now, write=True)
            doc = post.to_dict()
            doc["matched"] = [arb.exchanges[e.id].to_dict() for e in made]
        self._wake.set()
        return doc

    # --- the timer and spec reloads -----------------------------------------
    def _exchange_tick(self, now: float) -> list[str]:
        """Start / end the windows due; returns the jobs the engine downgraded."""
        if self._arb is None:
            return []
        return self._exchange_apply(self._arb.tick(now), now)

    def _exchange_apply(self, res: TickResult, now: float, write: bool = False) -> list[str]:
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
