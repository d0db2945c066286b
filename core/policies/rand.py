"""RAND baseline: preempt random BE jobs until the TE job fits (FitGpp, OpML '19, §4.1).

Victims are drawn uniformly among the running BE jobs below the preemption
cap P, from a generator seeded at construction, so a run is reproducible.
"""
from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .fitgpp import (
    DEFAULT_CAP,
    Candidate,
    Choice,
    Vec,
    _shuffled,
    candidates_from,
    node_vectors,
    pod_demands,
    preempt_until_fits,
    restrict_to_chain,
)
from .preemption_order import under_cap

if TYPE_CHECKING:
    from ..engine_records import JobRecord
    from ..engine_view import ClusterView


def choose(pods: Sequence[Vec], candidates: Sequence[Candidate], free: Mapping[str, Vec], *,
           cap: float = DEFAULT_CAP, rng: random.Random) -> Choice:
    eligible = [c for c in candidates if under_cap(c.preemptions, cap)]
    if not eligible:
        return Choice([], f"rand: no running BE job below the preemption cap P={cap}")
    victims = preempt_until_fits(pods, _shuffled(eligible, rng), free)
    if victims is None:
        return Choice([], f"rand: preempting all {len(eligible)} eligible BE jobs would still not make room")
    return Choice(victims, f"rand: preempt random BE jobs until the TE job fits: {', '.join(victims)}")


@dataclass
class RandPolicy:
    """PreemptionPolicy hook for RAND."""

    cap: int | None = None   # None: no cap of its own, the engine passes only jobs under P
    seed: int = 0
    name: str = "rand"
    _rng: random.Random = field(init=False, repr=False)
    _cache: dict[str, tuple[Any, float, Candidate]] = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def choose(self, job: JobRecord, candidates: Sequence[JobRecord], view: ClusterView,
               now: float) -> tuple[list[str], str]:
        free, capacity = node_vectors(view)
        if len(self._cache) > 4 * len(candidates) + 1024:
            self._cache.clear()
        cands = candidates_from(candidates, view, capacity, now, cache=self._cache)
        cands, free = restrict_to_chain(cands, free, view, getattr(job.request, "chain", None))
        ch = choose(pod_demands(job, capacity), cands, free, cap=math.inf if self.cap is None else self.cap,
                    rng=self._rng)
        return ch.victims, ch.reason
