"""Whole-trace simulation speed: the Philly trace (82,229 jobs in 11 VCs) under HiveD.

Target: <= 60 s wall and >= 2,000 jobs/s on a 2-core machine, with
the GPU-quota scheme timed in the same run as the baseline (ratio printed).
The cluster is sized for 90% offered load (docs/simulator.md). ``--quick``
replays the first 20,000 jobs once.

``--growth N1,N2,...`` replays the first N1, N2 ... jobs under HiveD and prints
jobs per CPU-second for each prefix: a simulator whose rounds cost more as
finished jobs pile up shows it as a falling rate. Each run also prints the
sha256 of its per-job rows (the CSV ``hived simulate`` writes) and of its
summary without the timings: two trees (say main and a branch, each with its
own interpreter running this same script) replay identically when these match.
``--baseline DIR`` (with ``--growth``): DIR is another checkout of hived (say ``git worktree add
/tmp/main main``); each prefix is replayed by this tree and by DIR in turn, each run in a fresh
process, ``--repeat`` times, and the medians, their ratio and whether both replayed identically
are printed (the same run on the same machine: the load others put on it counts for both).
Usage: ``.venv/bin/python benchmarks/bench_sim.py [--quick] [--repeat N] [--growth 20000,40000
[--baseline DIR]]``.
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from hived.core.sim.schemes import size_cluster
from hived.core.sim.simulate import simulate
from hived.core.sim.traces import PHILLY_DIR as PHILLY
from hived.core.sim.traces import read_philly


def digests(r) -> tuple[str, str]:
    """sha256 (12 hex digits) of the per-job rows as CSV and of the summary without its timings."""
    from hived.core.sim.simulate import ROW_FIELDS
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=list(ROW_FIELDS), lineterminator="\n")
    w.writeheader()
    w.writerows(r.rows)
    summary = {k: v for k, v in r.summary().items() if k not in ("wall_s", "jobs_per_s")}
    return (hashlib.sha256(out.getvalue().encode()).hexdigest()[:12],
            hashlib.sha256(json.dumps(summary, sort_keys=True, default=str).encode()).hexdigest()[:12])


def growth(trace_path: str, sizes: list[int], load: float, rep: int) -> int:
    """Jobs per CPU-second of HiveD replays of growing prefixes of the trace (median of ``rep``)."""
    for n in sizes:
        trace = read_philly(trace_path, limit=n)
        sizing = size_cluster(trace, load)
        cpus = []
        for _ in range(rep):
            c = time.process_time()
            r = simulate(trace, "hived", cells="node", sizing=sizing)
            cpus.append(time.process_time() - c)
        cpu = statistics.median(cpus)
        rows, summary = digests(r)
        print(f"first {len(trace.jobs):,} jobs ({sizing.nodes} nodes): {cpu:.1f} s CPU, "
              f"{len(trace.jobs) / cpu:,.0f} jobs/CPU-s; rows sha256 {rows}, summary sha256 {summary}", flush=True)
    return 0


LINE = re.compile(r"first ([\d,]+) jobs .*: ([\d.]+) s CPU, .*rows sha256 (\w+), summary sha256 (\w+)")


def _one(tree: str | None, n: int, trace: str, load: float) -> tuple[float, str]:
    """(CPU seconds, "rows/summary" digests) of one replay of the first ``n`` jobs in a fresh
    process; ``tree``: a checkout of hived to import instead of this one."""
    env = dict(os.environ)
    script = os.path.abspath(__file__)
    with tempfile.TemporaryDirectory() as tmp:
        if tree is not None:
            os.symlink(os.path.abspath(tree), os.path.join(tmp, "hived"))   # ``import hived`` finds DIR
            env["PYTHONPATH"] = tmp + os.pathsep + env.get("PYTHONPATH", "")
            script = os.path.join(tree, "benchmarks", "bench_sim.py")
        out = subprocess.run([sys.executable, script, "--growth", str(n), "--trace", trace, "--load", str(load)],
                             env=env, cwd=tmp, capture_output=True, text=True, check=True).stdout
    m = LINE.search(out)
    if m is None:
        raise RuntimeError(f"no result line in: {out!r}")
    return float(m.group(2)), f"{m.group(3)}/{m.group(4)}"


def against(base: str, sizes: list[int], trace: str, load: float, rep: int) -> int:
    """This tree against ``base`` on each prefix, alternating runs; 1 when the replays differ."""
    differ = False
    for n in sizes:
        cpus: dict[str, list[float]] = {"this": [], "base": []}
        digest: dict[str, set[str]] = {"this": set(), "base": set()}
        for _ in range(rep):
            for who, tree in (("base", base), ("this", None)):
                cpu, d = _one(tree, n, trace, load)
                cpus[who].append(cpu)
                digest[who].add(d)
        this, b = statistics.median(cpus["this"]), statistics.median(cpus["base"])
        same = digest["this"] == digest["base"] and len(digest["this"]) == 1
        differ |= not same
        print(f"first {n:,} jobs, median of {rep}: this tree {n / this:,.0f} jobs/CPU-s ({this:.2f} s), "
              f"baseline {n / b:,.0f} jobs/CPU-s ({b:.2f} s): {b / this:.2f}x; rows/summary sha256 "
              f"{'identical' if same else 'DIFFER'} ({', '.join(sorted(digest['this']))} vs "
              f"{', '.join(sorted(digest['base']))})", flush=True)
    return 1 if differ else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="first 20,000 jobs, one run each (< 60 s)")
    ap.add_argument("--repeat", type=int, default=None, help="runs per scheme (default 3, quick 1)")
    ap.add_argument("--trace", default=PHILLY)
    ap.add_argument("--load", type=float, default=0.9)
    ap.add_argument("--growth", default=None, help="comma list of prefix sizes: jobs/CPU-s of each (HiveD)")
    ap.add_argument("--baseline", default=None, help="with --growth: another hived checkout, timed in turn")
    a = ap.parse_args(argv)
    if a.baseline and not a.growth:
        ap.error("--baseline: give --growth too (the prefixes to compare)")
    if a.growth and a.baseline:
        return against(a.baseline, [int(x) for x in a.growth.split(",")], a.trace, a.load, a.repeat or 3)
    if a.growth:
        return growth(a.trace, [int(x) for x in a.growth.split(",")], a.load, a.repeat or 1)
    t0 = time.perf_counter()
    trace = read_philly(a.trace, limit=20000 if a.quick else None)
    read_s = time.perf_counter() - t0
    sizing = size_cluster(trace, a.load)
    rep = a.repeat or (1 if a.quick else 3)
    print(f"{len(trace.jobs)} jobs, {sizing.nodes} nodes x 8 GPUs, offered load {sizing.load:.2f} "
          f"(trace read in {read_s:.1f} s); median of {rep}")
    schemes = ["quota"]
    try:
        import hived.core.allocator  # noqa: F401
        schemes.append("hived")
    except ImportError:
        print("(core/allocator.py not present: quota only)")
    walls = {}
    for s in schemes:
        times, cpus = [], []
        for _ in range(rep):
            c = time.process_time()
            r = simulate(trace, s, cells="node", sizing=sizing)
            cpus.append(time.process_time() - c)   # on a shared machine wall time counts others' turns
            times.append(r.wall_s)
        walls[s] = statistics.median(times)
        cpu = statistics.median(cpus)
        print(f"{s:6s}: {walls[s]:.1f} s wall ({len(trace.jobs) / walls[s]:,.0f} jobs/s), {cpu:.1f} s CPU "
              f"({len(trace.jobs) / cpu:,.0f} jobs/CPU-s) "
              f"(avg queueing delay {r.summary()['avg_queue_delay_s'] / 60:.1f} min); "
              f"rows/summary sha256 {'/'.join(digests(r))}")
    if "hived" in walls:
        w = walls["hived"]
        ok = w <= 60 and len(trace.jobs) / w >= 2000
        print(f"hived / quota wall ratio: {w / walls['quota']:.2f}; target <= 60 s and >= 2,000 jobs/s: "
              f"{'OK' if ok else 'MISSED'}")
        return 0 if ok or a.quick else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
