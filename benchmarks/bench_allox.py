"""AlloX scheduling speed, against a plain SJF ordering of the same queue.

1. Matching: one AlloX decision (Q = [P 2P ... nP] + D, solved with scipy's
   linear_sum_assignment) for 10 queued jobs over 100 machines (50 GPUs,
   50 CPUs, some busy). Target: median <= 10 ms (AlloX, EuroSys '20, §4.4:
   200 ms with a GPU Hungarian solver).
2. AlloX+: one round of the heuristic for 1,000 queued jobs over 10,000
   machines. Target: median <= 0.3 s (paper: 0.7 s).
3. For scale: the matching at the experiment's size (64 jobs, 40 machines).

The baseline in each case is SJF: sort the queue by the job's shortest
processing time and hand jobs to free machines in that order.

    .venv/bin/python benchmarks/bench_allox.py [--quick] [--repeats N]
"""
from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time

import numpy as np

from hived.core.allox.matching import solve
from hived.core.allox.model import SimJob
from hived.core.allox.scheduler import plan_allox_plus

TARGET_MATCH_MS = 10.0
TARGET_PLUS_S = 0.3


def queue(n: int, seed: int) -> list[SimJob]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        g = rng.uniform(60, 6 * 3600)
        out.append(SimJob(f"j{i}", f"u{i % 10}", rng.uniform(0, 3600), {"gpu": g, "cpu": g * rng.uniform(1.8, 10)}))
    return out


def matching_inputs(jobs: list[SimJob], gpus: int, cpus: int, seed: int, now: float = 3600.0):
    rng = random.Random(seed)
    kinds = ["gpu"] * gpus + ["cpu"] * cpus
    P = np.array([[j.times[k] for k in kinds] for j in jobs])
    omega = np.array([now + (rng.uniform(0, 7200) if rng.random() < 0.5 else 0.0) for _ in kinds])
    D = omega[None, :] - np.array([j.arrival for j in jobs])[:, None]
    return P, D, omega, now


def sjf(jobs: list[SimJob], omega: np.ndarray, kinds: list[str], now: float) -> list[tuple[str, int]]:
    """Shortest job first onto the free machines, favourite kind if free."""
    free = {k: [i for i, kk in enumerate(kinds) if kk == k and omega[i] <= now] for k in set(kinds)}
    out = []
    for j in sorted(jobs, key=lambda j: (j.best_time, j.arrival)):
        for k in sorted(j.times, key=lambda k: j.times[k]):
            if free.get(k):
                out.append((j.id, free[k].pop()))
                break
    return out


def timed(fn, repeats: int) -> list[float]:
    fn()  # warm-up
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer repeats (< 60 s)")
    ap.add_argument("--repeats", type=int, default=None, help="timed repeats per case (default 200, quick 30)")
    args = ap.parse_args(argv)
    reps = args.repeats or (30 if args.quick else 200)
    ok = True
    print(f"AlloX speed vs SJF ordering, {reps} repeats, medians")

    # 1. matching: 10 jobs x 100 machines
    jobs = queue(10, 1)
    P, D, omega, now = matching_inputs(jobs, 50, 50, 2)
    kinds = ["gpu"] * 50 + ["cpu"] * 50
    t_match = statistics.median(timed(lambda: solve(P, D), reps))
    t_sjf = statistics.median(timed(lambda: sjf(jobs, omega, kinds, now), reps))
    ok &= t_match * 1e3 <= TARGET_MATCH_MS
    print(f"matching 10 jobs x 100 machines: AlloX {t_match * 1e3:.3f} ms, SJF {t_sjf * 1e3:.3f} ms, "
          f"ratio {t_match / t_sjf:.1f}x; target <= {TARGET_MATCH_MS:g} ms "
          f"[{'ok' if t_match * 1e3 <= TARGET_MATCH_MS else 'MISSED'}] (paper: 200 ms on a GPU)")

    # 2. AlloX+: 1,000 jobs x 10,000 machines
    big = queue(1000, 3)
    idle = {"gpu": 5000, "cpu": 5000}
    kinds_big = ["gpu"] * 5000 + ["cpu"] * 5000
    omega_big = np.full(10_000, 3600.0)
    plus_reps = max(5, reps // 10)
    t_plus = statistics.median(timed(lambda: plan_allox_plus(big, idle, {"gpu": math.inf, "cpu": math.inf},
                                                             3600.0, 4 * 3600, {"gpu": 5000, "cpu": 5000}),
                                     plus_reps))
    t_sjf_big = statistics.median(timed(lambda: sjf(big, omega_big, kinds_big, 3600.0), plus_reps))
    ok &= t_plus <= TARGET_PLUS_S
    print(f"AlloX+ 1,000 jobs x 10,000 machines: AlloX+ {t_plus * 1e3:.2f} ms, SJF {t_sjf_big * 1e3:.2f} ms, "
          f"ratio {t_plus / t_sjf_big:.2f}x; target <= {TARGET_PLUS_S * 1e3:g} ms "
          f"[{'ok' if t_plus <= TARGET_PLUS_S else 'MISSED'}] (paper: 700 ms)")

    # 3. matching at the experiment's size
    mid = queue(64, 4)
    P2, D2, omega2, _ = matching_inputs(mid, 20, 20, 5)
    t_mid = statistics.median(timed(lambda: solve(P2, D2), max(5, reps // 4)))
    t_sjf_mid = statistics.median(timed(lambda: sjf(mid, omega2, ["gpu"] * 20 + ["cpu"] * 20, 3600.0),
                                        max(5, reps // 4)))
    print(f"matching 64 jobs x 40 machines (experiment size): AlloX {t_mid * 1e3:.2f} ms, "
          f"SJF {t_sjf_mid * 1e3:.3f} ms, ratio {t_mid / t_sjf_mid:.0f}x")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
