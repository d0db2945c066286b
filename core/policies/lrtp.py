"""LRTP baseline: preempt the BE jobs with the longest remaining time first.

The policy Big-C uses, simulated as FitGpp (OpML '19) does (§4.1): it knows every
job's remaining execution time exactly, and keeps preempting, longest
remaining first, until the TE job fits. Jobs at the preemption cap P are never
chosen (the same cap FitGpp obeys, so the comparison is fair).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..jobs import STARTED, JobState
from .fitgpp import (
    DEFAULT_CAP,
    Candidate,
    Choice,
    Vec,
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
           cap: float = DEFAULT_CAP) -> Choice:
    eligible = [c for c in candidates if under_cap(c.preemptions, cap)]
    if not eligible:
        return Choice([], f"lrtp: no running BE job below the preemption cap P={cap}")
    # longest remaining first; ties by id so runs are reproducible
    order = sorted(eligible, key=lambda c: (-c.remaining, c.job_id))
    victims = preempt_until_fits(pods, order, free)
    if victims is None:
        return Choice([], f"lrtp: preempting all {len(eligible)} eligible BE jobs would still not make room")
    return Choice(victims, f"lrtp: preempt longest remaining time first until the TE job fits: {', '.join(victims)}")


def remaining_from_record(rec: JobRecord, now: float) -> float:
    """Perfect knowledge for the simulator: run time still needed at ``now``.

    The engine's JobRecord keeps ``run_time`` (time run in earlier, finished
    runs; updated when a run ends) and ``started`` (start of the current
    run), so a running job still needs ``duration - run_time - (now -
    started)``. (``JobRecord.remaining`` leaves out the current run, so it is
    not used.) A record without ``run_time`` counts from ``started`` alone; a
    job without a duration counts as 0 remaining (preempted last).
    """
    dur = rec.request.duration
    if dur is None:
        return 0.0
    done = float(getattr(rec, "run_time", 0.0) or 0.0)
    started = getattr(rec, "started", None)
    if started is not None and getattr(rec, "state", JobState.RUNNING) in STARTED:
        done += now - float(started)
    return max(0.0, float(dur) - done)


@dataclass
class LRTPPolicy:
    """PreemptionPolicy hook for LRTP."""

    cap: int | None = None   # None: no cap of its own, the engine passes only jobs under P
    remaining: Callable[[JobRecord, float], float] | None = None
    name: str = "lrtp"

    def choose(self, job: JobRecord, candidates: Sequence[JobRecord], view: ClusterView,
               now: float) -> tuple[list[str], str]:
        free, capacity = node_vectors(view)
        cands = candidates_from(candidates, view, capacity, now, self.remaining or remaining_from_record)
        cands, free = restrict_to_chain(cands, free, view, getattr(job.request, "chain", None))
        ch = choose(pod_demands(job, capacity), cands, free, cap=math.inf if self.cap is None else self.cap)
        return ch.victims, ch.reason
