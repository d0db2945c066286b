"""Exchange policies: which offer serves which request (HiveD, earlier version, §3.3).

A policy sees the open requests and offers and the ledger, and returns
(request, offer) pairs; the arbiter carries them out. ``balanced`` is the
paper's Algorithm 2 and the default; ``first_fit`` (oldest request, oldest
qualifying offer) is the simple alternative to compare against.

An offer *qualifies* for a request when it comes from another VC, gives the
same chain and level, at least as many cells, over a window covering the
request's within ``MATCH_TOLERANCE`` seconds at either end (two admins who
post the same window a few seconds apart match); the exchange then runs
over the overlap of the two windows. For a spatial request (cells given in return) the offer must
give exactly the cells wanted and want exactly the cells given back. A
larger offer is split: the rest stays on the board.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from .exchange_types import Ledger, Post

MATCH_TOLERANCE = 60.0   # seconds an offer's window may miss a request's at either end


def overlap(request: Post, offer: Post) -> tuple[float, float]:
    """The window an exchange of this pair runs over: the request's, clipped to the offer's."""
    return max(request.start, offer.start), min(request.end, offer.end)


def qualifies(request: Post, offer: Post) -> bool:
    if offer.vc == request.vc:
        return False
    if (offer.cells.chain, offer.cells.level) != (request.cells.chain, request.cells.level):
        return False
    if offer.start > request.start + MATCH_TOLERANCE or offer.end < request.end - MATCH_TOLERANCE:
        return False
    start, end = overlap(request, offer)
    if not start < end:
        return False
    if request.in_return is not None or offer.in_return is not None:
        return offer.in_return == request.in_return and offer.cells.count == request.cells.count
    return offer.cells.count >= request.cells.count


class ExchangePolicy(Protocol):
    name: str

    def match(self, requests: list[Post], offers: list[Post], ledger: Ledger,
              gpu_hours: Callable[[Post, Post], float]) -> list[tuple[Post, Post]]:
        """Pairs to carry out; ``gpu_hours(request, offer)`` is what the lender contributes."""
        ...


class BalancedExchange:
    """Algorithm 2: requests of the VC with the highest surplus first; each
    takes the qualifying offer whose owner has the lowest surplus. Surplus
    moves as pairs are made, within the round too."""

    name = "balanced"

    def match(self, requests: list[Post], offers: list[Post], ledger: Ledger,
              gpu_hours: Callable[[Post, Post], float]) -> list[tuple[Post, Post]]:
        surplus: dict[str, float] = {}
        for p in list(requests) + list(offers):
            surplus.setdefault(p.vc, ledger.surplus(p.vc))
        left = {o.id: o.cells.count for o in offers}
        by_vc: dict[str, list[Post]] = {}
        for r in sorted(requests, key=lambda r: r.seq):
            by_vc.setdefault(r.vc, []).append(r)
        pairs: list[tuple[Post, Post]] = []
        # decreasing surplus; ties by name so that runs repeat
        for vc in sorted(by_vc, key=lambda v: (-surplus[v], v)):
            for r in by_vc[vc]:
                cands = [o for o in offers if left[o.id] >= r.cells.count and qualifies(r, o)]
                if not cands:
                    continue
                o = min(cands, key=lambda o: (surplus[o.vc], o.seq))
                left[o.id] -= r.cells.count
                gh = gpu_hours(r, o)
                surplus[vc] -= gh
                surplus[o.vc] += gh
                pairs.append((r, o))
        return pairs


class FirstFit:
    """Oldest request first, oldest qualifying offer: ignores the ledger."""

    name = "first_fit"

    def match(self, requests: list[Post], offers: list[Post], ledger: Ledger,
              gpu_hours: Callable[[Post, Post], float]) -> list[tuple[Post, Post]]:
        left = {o.id: o.cells.count for o in offers}
        pairs: list[tuple[Post, Post]] = []
        for r in sorted(requests, key=lambda r: r.seq):
            for o in sorted(offers, key=lambda o: o.seq):
                if left[o.id] >= r.cells.count and qualifies(r, o):
                    left[o.id] -= r.cells.count
                    pairs.append((r, o))
                    break
        return pairs


POLICIES: dict[str, Callable[[], ExchangePolicy]] = {"balanced": BalancedExchange, "first_fit": FirstFit}


def make_policy(spec: ExchangePolicy | str | None) -> ExchangePolicy:
    if spec is None:
        return BalancedExchange()
    if isinstance(spec, str):
        if spec not in POLICIES:
            raise ValueError(f"exchange policy: unknown {spec!r}; known: {', '.join(sorted(POLICIES))}")
        return POLICIES[spec]()
    if not hasattr(spec, "match"):
        raise ValueError(f"exchange policy: {spec!r} has no match(requests, offers, ledger, gpu_hours) method")
    return spec
