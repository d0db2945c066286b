"""FitGpp against no preemption across cluster sizes, on a synthetic trace of the shape of
issue 28: one VC; TE jobs, most of 1 GPU and some of a whole 8-GPU node, beside BE jobs of
1-4 GPUs. Prints, per cluster size, backfill setting and FitGpp preemption cap P, TE p95
queueing delay and BE median JCT under ``none`` and ``fitgpp``, from the same trace in the same
run (docs/reproduction-fitgpp.md).

Usage: ``.venv/bin/python benchmarks/fitgpp_sizes.py [--jobs N] [--nodes 4,5,6,7] [--seed S] [--cap 1,3]``.
"""
from __future__ import annotations

import argparse
import random
import statistics

from hived.core.engine import EngineConfig
from hived.core.sim.schemes import size_cluster
from hived.core.sim.simulate import simulate
from hived.core.sim.traces import Trace, TraceJob


def trace(jobs: int, seed: int, days: float) -> Trace:
    rng = random.Random(seed)
    out = []
    for k in range(jobs):
        t = rng.uniform(0, days * 86400)
        if rng.random() < 0.58:       # TE: interactive, mostly 1 GPU, some a whole node
            g = 8 if rng.random() < 0.12 else 1
            d = min(7 * 86400, rng.lognormvariate(8.5, 1.2))       # median ~1.4 h
            out.append(TraceJob(f"te{k}", "vc", t, d, g, 1, "te", "hard", 0.0))
        else:                         # BE: batch, 1-4 GPUs, longer
            g = rng.choice((1, 2, 4))
            d = min(7 * 86400, rng.lognormvariate(9.5, 1.2))       # median ~3.7 h
            out.append(TraceJob(f"be{k}", "vc", t, d, g, 1, "be", "hard", 0.0))
    out.sort(key=lambda j: (j.submit, j.job_id))
    return Trace(out, "fitgpp-sizes")


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(round(q / 100 * len(s))) - 1))] if s else 0.0


def run(tr: Trace, nodes: int, policy: str, backfill: bool, cap: int = 1) -> tuple[float, float]:
    cfg = EngineConfig(backfill=backfill, backfill_estimates="oracle", preemption_cap=cap)
    res = simulate(tr, "hived", sizing=size_cluster(tr, nodes=nodes), preemption_policy=policy, config=cfg,
                   sample_every=0)
    te = [r["queue_delay"] for r in res.rows if r["job_id"].startswith("te") and r["queue_delay"] is not None]
    be = [r["end"] - r["submit"] for r in res.rows if r["job_id"].startswith("be") and r["end"] is not None]
    return pct(te, 95), statistics.median(be) if be else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=1500)
    ap.add_argument("--days", type=float, default=10.0)
    ap.add_argument("--nodes", default="4,5,6,7")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--backfill", default="off,on")
    ap.add_argument("--cap", default="1,3", help="FitGpp's P (EngineConfig.preemption_cap, a VC's maxPreemptions)")
    a = ap.parse_args(argv)
    tr = trace(a.jobs, a.seed, a.days)
    print(f"{a.jobs} jobs over {a.days:g} days, seed {a.seed}; one VC of all nodes; hived cells, grace 0")
    print("| nodes | backfill | P | TE p95 wait none (h) | TE p95 wait fitgpp (h) | change | "
          "BE median JCT none (h) | BE median JCT fitgpp (h) | change |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for n in (int(x) for x in a.nodes.split(",")):
        for bf in a.backfill.split(","):
            te0, be0 = run(tr, n, "none", bf == "on")     # no preemption: P plays no part
            for cap in (int(x) for x in a.cap.split(",")):
                te1, be1 = run(tr, n, "fitgpp", bf == "on", cap)
                ch_te = f"{(te1 - te0) / te0:+.0%}" if te0 > 0 else "n/a"
                ch_be = f"{(be1 - be0) / be0:+.0%}" if be0 > 0 else "n/a"
                print(f"| {n} | {bf} | {cap} | {te0 / 3600:.2f} | {te1 / 3600:.2f} | {ch_te} | {be0 / 3600:.2f} | "
                      f"{be1 / 3600:.2f} | {ch_be} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
