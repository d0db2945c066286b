"""The cell exchange's state as one JSON document, and an arbiter rebuilt from it.

The service journals this document (service/store.py) whenever the board,
the exchanges or the ledger change, and loads it on start, so that open
offers and requests, exchanges in their window and the GPU-hour ledger
survive a restart.

Only the *right to use* cells moves in an exchange (``Allocator.transfer``),
and a freshly built allocator holds every VC's spec cells. ``load`` therefore
moves again, lender to borrower, the cells of every exchange still in its
window (legs not yet given back), before any job is restored, so that jobs
running on borrowed cells fit their VC as they did. Pending exchanges and
windows that ended while the service was down are left to the next
``ExchangeArbiter.tick``, which starts or returns them as it would have.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .exchange import ExchangeArbiter
from .exchange_types import Cells, Exchange, ExchangeState, LedgerEntry, Leg, Post, PostKind

VERSION = 1


@dataclass
class Restored:
    """What ``load`` did: VCs whose cells moved, and what it could not take back (and why)."""

    moved_vcs: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)


def _cells(c: Cells) -> dict[str, Any]:
    return {"chain": c.chain, "level": c.level, "count": c.count}


def _cells_from(d: Mapping[str, Any]) -> Cells:
    return Cells(str(d["chain"]), int(d["level"]), int(d["count"]))


def _post(p: Post) -> dict[str, Any]:
    return {"id": p.id, "kind": p.kind.value, "vc": p.vc, "cells": _cells(p.cells), "start": p.start,
            "end": p.end, "in_return": None if p.in_return is None else _cells(p.in_return),
            "posted": p.posted, "seq": p.seq}


def _post_from(d: Mapping[str, Any]) -> Post:
    back = d.get("in_return")
    return Post(str(d["id"]), PostKind(d["kind"]), str(d["vc"]), _cells_from(d["cells"]), float(d["start"]),
                float(d["end"]), None if back is None else _cells_from(back), float(d["posted"]), int(d["seq"]))


def _exchange(e: Exchange) -> dict[str, Any]:
    return {"id": e.id, "request": e.request, "offer": e.offer, "start": e.start, "end": e.end,
            "legs": [{"lender": g.lender, "borrower": g.borrower, "cells": _cells(g.cells)} for g in e.legs],
            "gpu_hours": dict(e.gpu_hours), "state": e.state.value, "reason": e.reason,
            "downgraded": list(e.downgraded), "returned_legs": sorted(e.returned_legs)}


def _exchange_from(d: Mapping[str, Any]) -> Exchange:
    legs = [Leg(str(g["lender"]), str(g["borrower"]), _cells_from(g["cells"])) for g in d["legs"]]
    return Exchange(str(d["id"]), str(d["request"]), str(d["offer"]), legs, float(d["start"]), float(d["end"]),
                    {str(k): float(v) for k, v in d["gpu_hours"].items()}, ExchangeState(d["state"]),
                    str(d["reason"]), [str(j) for j in d["downgraded"]], {int(i) for i in d["returned_legs"]})


def save(arb: ExchangeArbiter) -> dict[str, Any]:
    """The arbiter's whole state: JSON-safe, what ``load`` takes back."""
    return {
        "version": VERSION,
        "posts_made": arb.posts_made,
        "offers": [_post(p) for p in sorted(arb.offers.values(), key=lambda p: p.seq)],
        "requests": [_post(p) for p in sorted(arb.requests.values(), key=lambda p: p.seq)],
        "exchanges": [_exchange(e) for e in arb.exchanges.values()],
        "ledger": {vc: {"contributed": e.contributed, "consumed": e.consumed}
                   for vc, e in sorted(arb.ledger.entries.items())},
    }


def _unknown(arb: ExchangeArbiter, vcs: list[str], cells: list[Cells]) -> str | None:
    """Why a saved post or exchange no longer fits the spec (None when it does)."""
    for vc in vcs:
        if vc not in arb.spec.vcs:
            return f"VC {vc} is not in the spec"
    for c in cells:
        chain = arb.spec.chains.get(c.chain)
        if chain is None or not 1 <= c.level <= len(chain.levels):
            return f"{c} is not in the spec"
    return None


def load(arb: ExchangeArbiter, doc: Mapping[str, Any]) -> Restored:
    """Fill ``arb`` (new: empty board, its allocator at the spec's cells) from ``save``'s document.

    Posts and exchanges that name VCs or cells the spec no longer has are dropped, and so is
    an exchange in its window whose cells cannot move again; ``Restored.dropped`` says which
    and why. Raises ``ValueError`` for a document of another version or shape.
    """
    if arb.offers or arb.requests or arb.exchanges:
        raise ValueError("exchange state: load into a new arbiter (this one has posts or exchanges)")
    if not isinstance(doc, Mapping) or doc.get("version") != VERSION:
        found = doc.get("version") if isinstance(doc, Mapping) else type(doc).__name__
        raise ValueError(f"exchange state: version {found!r} is not {VERSION}; "
                         f"written by another hived")
    out = Restored()
    try:
        posts = [_post_from(d) for d in [*doc["offers"], *doc["requests"]]]
        exchanges = [_exchange_from(d) for d in doc["exchanges"]]
        ledger = {str(vc): LedgerEntry(float(e["contributed"]), float(e["consumed"]))
                  for vc, e in doc["ledger"].items()}
        posts_made = int(doc["posts_made"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"exchange state: malformed document ({type(exc).__name__}: {exc})") from None
    arb.posts_made = max(arb.posts_made, posts_made)
    arb.ledger.entries.update(ledger)
    for p in posts:
        why = _unknown(arb, [p.vc], [p.cells] + ([p.in_return] if p.in_return else []))
        if why is not None:
            out.dropped.append(f"{p.kind.value} {p.id}: {why}")
            continue
        (arb.offers if p.kind is PostKind.OFFER else arb.requests)[p.id] = p
    moved: set[str] = set()
    for e in exchanges:
        why = _unknown(arb, [v for g in e.legs for v in (g.lender, g.borrower)], [g.cells for g in e.legs])
        if why is not None:
            out.dropped.append(f"exchange {e.id}: {why}")
            continue
        arb.exchanges[e.id] = e
        if e.state is ExchangeState.ACTIVE:
            why = _move_again(arb, e)
            if why is None:
                moved.update(v for i, g in enumerate(e.legs) if i not in e.returned_legs
                             for v in (g.lender, g.borrower))
            else:
                # the borrower used part of the window: its GPU-hours stay booked
                e.state, e.reason = ExchangeState.RETURNED, f"ended at restart: {why}"
                out.dropped.append(f"exchange {e.id}: {why}")
    out.moved_vcs = sorted(moved)
    return out


def _move_again(arb: ExchangeArbiter, e: Exchange) -> str | None:
    """Move the cells of ``e``'s legs not yet given back to their borrowers; all or none."""
    done: list[Leg] = []
    for i, g in enumerate(e.legs):
        if i in e.returned_legs:
            continue
        try:
            arb.allocator.transfer(g.lender, g.borrower, g.cells.chain, g.cells.level, g.cells.count)
        except ValueError as exc:
            for d in reversed(done):
                arb.allocator.transfer(d.borrower, d.lender, d.cells.chain, d.cells.level, d.cells.count)
            return f"the allocator refused to move {g.cells} from VC {g.lender} to VC {g.borrower} again ({exc})"
        done.append(g)
    return None
