"""Plain data of cell exchange (HiveD, earlier version, §3.3): posts, exchanges, the ledger.

A *post* is an offer (cells a VC will lend for a time window) or a request
(cells a VC wants for a window). Either may name cells wanted/given in
return: that is a *spatial* exchange (e.g. one 8-GPU cell for eight 1-GPU
cells), matched only against the reciprocal post. Times are seconds on the
caller's clock; GPU-hours = GPUs x seconds / 3600.
"""
from __future__ import annotations

import enum
import math
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Cells:
    chain: str
    level: int
    count: int

    def __str__(self) -> str:
        return f"{self.count} x {self.chain} level {self.level}"


class PostKind(str, enum.Enum):
    OFFER = "offer"
    REQUEST = "request"


@dataclass
class Post:
    id: str
    kind: PostKind
    vc: str
    cells: Cells                    # offered (OFFER) or wanted (REQUEST)
    start: float
    end: float
    in_return: Cells | None = None   # spatial exchange: cells wanted back (OFFER) / given back (REQUEST)
    posted: float = 0.0
    seq: int = 0                    # posting order (tie-breaks)

    @property
    def hours(self) -> float:
        return (self.end - self.start) / 3600.0

    def to_dict(self) -> dict[str, object]:
        d: dict[str, object] = {"id": self.id, "kind": self.kind.value, "vc": self.vc, "chain": self.cells.chain,
             "level": self.cells.level, "count": self.cells.count, "start": self.start, "end": self.end,
             "posted": self.posted}
        if self.in_return:
            d["in_return"] = {"chain": self.in_return.chain, "level": self.in_return.level,
                              "count": self.in_return.count}
        return d


class ExchangeState(str, enum.Enum):
    PENDING = "pending"      # matched, window not started
    ACTIVE = "active"        # cells moved to the borrower
    RETURNED = "returned"    # window over, cells back with the lender
    FAILED = "failed"        # the allocator refused the move (reason says why)


@dataclass
class Leg:
    """One direction of an exchange: ``count`` cells move lender -> borrower."""

    lender: str
    borrower: str
    cells: Cells


@dataclass
class Exchange:
    id: str
    request: str                    # post ids
    offer: str
    legs: list[Leg]                 # one leg (temporal) or two (spatial swap)
    start: float
    end: float
    gpu_hours: dict[str, float] = field(default_factory=dict)  # per leg lender -> GPU-hours lent
    state: ExchangeState = ExchangeState.PENDING
    reason: str = ""
    downgraded: list[str] = field(default_factory=list)        # owners made opportunistic at return
    returned_legs: set[int] = field(default_factory=set)        # indices of the legs already given back

    @property
    def spatial(self) -> bool:
        return len(self.legs) > 1

    def to_dict(self) -> dict[str, object]:
        return {"id": self.id, "request": self.request, "offer": self.offer, "start": self.start,
                "end": self.end, "state": self.state.value, "reason": self.reason,
                "spatial": self.spatial, "downgraded": list(self.downgraded),
                "legs": [{"lender": g.lender, "borrower": g.borrower, "chain": g.cells.chain,
                          "level": g.cells.level, "count": g.cells.count} for g in self.legs]}


@dataclass
class LedgerEntry:
    contributed: float = 0.0        # GPU-hours lent to other VCs
    consumed: float = 0.0           # GPU-hours used on other VCs' cells

    @property
    def surplus(self) -> float:
        return self.contributed - self.consumed


class Ledger:
    """GPU-hour accounts per VC (what admins read; what the balanced policy sorts by)."""

    def __init__(self, vcs: Iterable[str] = ()) -> None:
        self.entries: dict[str, LedgerEntry] = {v: LedgerEntry() for v in vcs}

    def entry(self, vc: str) -> LedgerEntry:
        return self.entries.setdefault(vc, LedgerEntry())

    def surplus(self, vc: str) -> float:
        return self.entry(vc).surplus

    def record(self, lender: str, borrower: str, gpu_hours: float) -> None:
        if gpu_hours < 0 or math.isnan(gpu_hours):
            raise ValueError(f"gpu_hours must be >= 0, got {gpu_hours!r}")
        self.entry(lender).contributed += gpu_hours
        self.entry(borrower).consumed += gpu_hours

    def to_dict(self) -> dict[str, dict[str, float]]:
        return {vc: {"contributed": round(e.contributed, 6), "consumed": round(e.consumed, 6),
                     "surplus": round(e.surplus, 6)} for vc, e in sorted(self.entries.items())}
