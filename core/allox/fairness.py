"""AlloX §3.3: users' progress and the fairness knob alpha.

A job's *value* is the dominant share of its favourite configuration
(the device kind where it runs fastest), discounted by p_fav / p_kind when it
runs on a slower kind, so that over its whole run a job earns the same
whatever it ran on. A user's progress is the sum of the values of her
running jobs (her instantaneous throughput). Algorithm 2 only considers the
ceil(alpha * n) users with the lowest progress.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from .model import SimJob


def dominant_share(job: SimJob, kind: str, capacity: Mapping[str, float],
                   memory_total_gb: float | None = None, units: float = 1.0) -> float:
    """max(units / capacity[kind], memory / M): the job's share of the cluster on ``kind``."""
    cap = capacity.get(kind, 0)
    if cap <= 0:
        raise ValueError(f"job {job.id}: the cluster has no {kind!r} capacity")
    share = units / cap
    mem = job.memory_gb.get(kind)
    if memory_total_gb and mem:
        share = max(share, mem / memory_total_gb)
    return share


def value(job: SimJob, kind: str, capacity: Mapping[str, float],
          memory_total_gb: float | None = None) -> float:
    """The progress a job adds while it runs on ``kind`` (§3.3.2)."""
    fav = job.favorite
    d = dominant_share(job, fav, capacity, memory_total_gb)
    return d * job.time_on(fav) / job.time_on(kind)


def lowest_progress_users(progress: Mapping[str, float], waiting: Iterable[str],
                          alpha: float, n_users: int) -> list[str]:
    """The users Algorithm 2 considers, lowest progress first.

    ``ceil(alpha * n_users)`` of the users that have waiting jobs (users with
    nothing queued are skipped: that is the paper's "temporarily increase
    alpha to include users who need the resources", §4.4). Ties go by name so
    runs are reproducible.
    """
    if not 0 <= alpha <= 1 or math.isnan(alpha):
        raise ValueError(f"alpha must be in [0, 1], got {alpha!r}")
    ranked = sorted(set(waiting), key=lambda u: (progress.get(u, 0.0), u))
    take = max(1, math.ceil(alpha * max(n_users, 1)))
    return ranked[:take]


def progress_std(progress: Mapping[str, float], users: Iterable[str]) -> float:
    """Population standard deviation of the users' progress (the paper's fairness metric)."""
    xs = [progress.get(u, 0.0) for u in users]
    if not xs:
        return 0.0
    mean = sum(xs) / len(xs)
    return math.sqrt(sum((x - mean) ** 2 for x in xs) / len(xs))
