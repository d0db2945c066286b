"""Plain data for the AlloX placement problem.

A *machine* is one schedulable device unit of a kind ("gpu", "cpu", ...):
AlloX runs one job per machine at a time (§3.1: a whole GPU or a whole CPU).
A job knows its processing time on every kind it can run on; a kind missing
from ``times`` means the job cannot run there (the paper's "very large
number", here +inf).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Machine:
    index: int
    kind: str                      # "gpu", "cpu", ...


@dataclass
class SimJob:
    id: str
    user: str
    arrival: float
    times: dict[str, float]        # kind -> processing time on one machine of that kind
    memory_gb: dict[str, float] = field(default_factory=dict)  # kind -> memory demand (fairness only)

    def __post_init__(self) -> None:
        if not self.times:
            raise ValueError(f"job {self.id}: times must name at least one device kind")
        for kind, t in self.times.items():
            if not (isinstance(t, (int, float)) and t > 0) or math.isnan(t):
                raise ValueError(f"job {self.id}: processing time on {kind!r} must be > 0, got {t!r}")
        if self.arrival < 0 or math.isnan(self.arrival):
            raise ValueError(f"job {self.id}: arrival must be >= 0, got {self.arrival!r}")

    def time_on(self, kind: str) -> float:
        return float(self.times.get(kind, math.inf))

    @property
    def favorite(self) -> str:
        """The kind with the shortest processing time (ties: alphabetical, for determinism)."""
        return min(sorted(self.times), key=lambda k: self.times[k])

    @property
    def best_time(self) -> float:
        return min(self.times.values())
