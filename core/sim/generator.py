"""A HiveD-like synthetic trace drawn from HiveD (OSDI '20) Table 1.

Table 1 gives, for the 11 tenants of HiveD's 2-month production trace, how
many jobs asked 1, 2, 4, 8 and more than 16 GPUs, and each tenant's quota.
The paper gives no durations or arrival times, so (documented choices):

* arrivals: a Poisson process per tenant, uniform over ``days``;
* durations: log-normal with a median of ``median_minutes`` (default 30)
  and sigma 1.8, clipped to [1 minute, 7 days] (a heavy tail like Philly's);
* ">16 GPUs" jobs ask 16 or 32 GPUs with equal odds;
* ``scale`` scales every count (1.0 = 141,950 jobs).
"""
from __future__ import annotations

import math
import random

from .traces import Trace, TraceJob, default_pods

SIZES = (1, 2, 4, 8, 16)   # the last column stands for ">16"
# tenant: (1-GPU, 2-GPU, 4-GPU, 8-GPU, >16-GPU job counts), quota share in %
TABLE1 = {
    "res-a": ((429, 14, 260, 625, 40), 0.37),
    "res-b": ((18319, 1593, 931, 148, 238), 0.73),
    "res-c": ((3285, 161, 716, 185, 0), 0.73),
    "res-d": ((1754, 0, 0, 0, 0), 1.47),
    "res-e": ((2682, 110, 3005, 0, 0), 1.83),
    "res-f": ((8181, 88, 618, 1337, 559), 28.57),
    "prod-a": ((227, 54, 23, 1132, 138), 8.79),
    "prod-b": ((16446, 67, 605, 1344, 22), 10.62),
    "prod-c": ((4692, 301, 1905, 4415, 1206), 11.36),
    "prod-d": ((781, 6, 545, 650, 95), 15.75),
    "prod-e": ((58407, 532, 2118, 959, 2), 19.78),
}


def quota_shares() -> dict[str, float]:
    return {t: q / 100.0 for t, (_, q) in TABLE1.items()}


def generate(*, scale: float = 0.05, days: float = 14.0, median_minutes: float = 30.0, sigma: float = 1.8,
             seed: int = 0, tenants: list[str] | None = None) -> Trace:
    if not (scale > 0) or not math.isfinite(scale):
        raise ValueError(f"scale: must be > 0, got {scale}")
    if not (days > 0):
        raise ValueError(f"days: must be > 0, got {days}")
    if not (median_minutes > 0) or not (sigma >= 0):
        raise ValueError(f"median_minutes must be > 0 and sigma >= 0, got {median_minutes}, {sigma}")
    names = tenants if tenants is not None else list(TABLE1)
    unknown = [t for t in names if t not in TABLE1]
    if unknown:
        raise ValueError(f"tenants: unknown {unknown}; Table 1 has {', '.join(TABLE1)}")
    rng = random.Random(seed)
    span = days * 86400.0
    mu = math.log(median_minutes * 60.0)
    jobs = []
    for t in names:
        counts, _ = TABLE1[t]
        for size, count in zip(SIZES, counts):
            n = int(round(count * scale))
            for _ in range(n):
                gpus = size if size < 16 else rng.choice((16, 32))
                dur = min(7 * 86400.0, max(60.0, rng.lognormvariate(mu, sigma)))
                jobs.append(TraceJob("", t, rng.uniform(0.0, span), round(dur, 1), gpus, default_pods(gpus)))
    jobs.sort(key=lambda j: j.submit)
    for i, j in enumerate(jobs):
        j.job_id = f"g{i}"
    return Trace(jobs, f"table1(scale={scale}, days={days}, seed={seed})")
