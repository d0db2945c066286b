"""Service speed: durable submissions and restart time.

1. Submitting N jobs through ``SchedulerService.submit`` (validation, engine,
   JSON record, SQLite commit with fsync per job), against raw SQLite inserts
   of the same rows, one commit each, same file system, same ``synchronous``
   setting, in the same run, alternating in chunks of 250 jobs.
   Target: >= 500 submissions/s durably stored.
2. Restart: a store holding N jobs of which N/2 hold cells (bindings); time
   ``SchedulerService(...)`` rebuilding the engine and the allocator from it.
   Target: <= 2 s for 10,000 jobs and 5,000 bindings.

The launcher here is a no-op implementation of the Launcher protocol
(nothing is started, every adoption succeeds) so that only the service and
the store are measured.

Usage: bench_service.py [--quick] [--jobs N] [--synchronous FULL|NORMAL] [--scheme hived|quota]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time

from hived.service.scheduler import SchedulerService
from hived.testing.launcher_noop import NoopLauncher

# admission limits out of reach: this times the service's path, not its limits (bench_flood.py)
UNLIMITED = {"maxQueued": 1_000_000, "maxQueuedPerUser": 1_000_000, "submitsPerSecond": 100_000,
             "submitsPerSecondPerUser": 100_000, "maxJournalBytes": 1 << 40, "maxJournalBytesPerUser": 1 << 40}


def spec(nodes: int) -> dict:
    """``nodes`` 8-GPU nodes (two 4-GPU sockets), split between two VCs."""
    return {
        "physicalCluster": {
            "cellTypes": {
                "B-SOCKET": {"childCellType": "B-GPU", "childCellNumber": 4},
                "B-NODE": {"childCellType": "B-SOCKET", "childCellNumber": 2, "isNodeLevel": True},
                "B-RACK": {"childCellType": "B-NODE", "childCellNumber": 8},
            },
            "physicalCells": [{"cellType": "B-RACK"} for _ in range(nodes // 8)],
        },
        "virtualClusters": {
            "va": {"virtualCells": [{"cellType": "B-RACK.B-RACK", "cellNumber": nodes // 16}],
                   "users": ["alice", "bob"], "admission": UNLIMITED},
            "vb": {"virtualCells": [{"cellType": "B-RACK.B-RACK", "cellNumber": nodes // 16}],
                   "users": ["alice", "bob"], "admission": UNLIMITED},
        },
    }


def payload(i: int) -> dict:
    return {"vc": "va" if i % 2 else "vb", "command": ["python", "train.py", f"--seed={i}"],
            "job_class": "be" if i % 3 else "te", "gpus": 1, "name": f"job-{i}"}


CHUNK = 250   # service and raw inserts alternate in chunks: both see the same disk and load


def bench_submit(n: int, sync: str, scheme: str, root: str) -> tuple[float, float, str]:
    """-> (seconds in SchedulerService.submit, seconds in raw inserts of the same rows, data dir).

    The two alternate every CHUNK jobs, so that a shared disk's or CPU's
    good and bad moments fall on both alike (a sequential A-then-B run on a
    busy machine measured the neighbours as much as the code)."""
    d = os.path.join(root, "submit")
    svc = SchedulerService(spec(64), d, launcher=NoopLauncher(adopt=True), synchronous=sync, scheme=scheme, health=None)
    # the baseline: the very same rows, raw inserts, one commit each, same table shape
    raw = sqlite3.connect(os.path.join(root, "raw.db"), isolation_level=None)
    raw.execute("PRAGMA journal_mode=WAL")
    raw.execute(f"PRAGMA synchronous={sync}")
    raw.execute("CREATE TABLE jobs (seq INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT UNIQUE, user TEXT, "
                "vc TEXT, state TEXT, submitted REAL, updated REAL, qkey REAL, record TEXT)")
    t_service = t_raw = 0.0
    last_seq = 0
    for start in range(0, n, CHUNK):
        t0 = time.perf_counter()
        for i in range(start, min(n, start + CHUNK)):
            svc.submit("alice" if i % 2 else "bob", payload(i))
        t_service += time.perf_counter() - t0
        cols = svc.store._db.execute("SELECT seq, job_id, user, vc, state, submitted, updated, qkey "
                                     "FROM jobs WHERE seq > ? ORDER BY seq", (last_seq,)).fetchall()
        last_seq = cols[-1][0]
        # the raw arm writes each job's whole record in one row (the store keeps its request apart)
        whole = svc.store.load_jobs_by_id([c[1] for c in cols])
        rows = [(*c, json.dumps(d, separators=(",", ":"))) for c, (d, _) in zip(cols, whole)]
        t0 = time.perf_counter()
        for r in rows:
            raw.execute("BEGIN IMMEDIATE")
            raw.execute("INSERT INTO jobs (job_id, user, vc, state, submitted, updated, qkey, record) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", r[1:])
            raw.execute("COMMIT")
        t_raw += time.perf_counter() - t0
    assert svc.store.count_jobs() == n == raw.execute("SELECT COUNT(*) FROM jobs").fetchone()[0]
    svc.close()
    raw.close()
    return t_service, t_raw, d


def bench_restart(n: int, sync: str, scheme: str, root: str, rounds: int):
    """-> (wall seconds per round, CPU seconds per round, bindings, jobs)."""
    d = os.path.join(root, "restart")
    nodes = max(16, -(-(n // 2) // 8 // 16) * 16)    # enough GPUs for n/2 one-GPU jobs
    sp = spec(nodes)
    svc = SchedulerService(sp, d, launcher=NoopLauncher(adopt=True), synchronous=sync, scheme=scheme, health=None)
    for i in range(n):
        svc.submit("alice" if i % 2 else "bob", payload(i))
    bound = 0
    while bound < n // 2:
        before = bound
        svc.tick()
        bound = sum(1 for d in svc.store.load_jobs() if d["placement"] is not None)
        if bound == before:
            break
    svc.tick()   # the launcher's "started" events: the holding jobs are running
    # keep exactly n/2 holding: the rest of the placements would exceed the target shape
    svc.close()
    times, cpu = [], []
    for _ in range(rounds):
        t0, c0 = time.perf_counter(), time.process_time()
        again = SchedulerService(sp, d, launcher=NoopLauncher(adopt=True), synchronous=sync, scheme=scheme, health=None)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        held = sum(1 for r in again.eng.jobs() if r.placement is not None)
        assert held == bound, (held, bound)
        again.close()
    return times, cpu, bound, n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1,000 jobs (< 60 s)")
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--synchronous", default="FULL", choices=["FULL", "NORMAL"])
    ap.add_argument("--scheme", default=os.environ.get("HIVED_SCHEME", "hived"), choices=["hived", "quota"])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    n = args.jobs or (1000 if args.quick else 10_000)
    root = tempfile.mkdtemp(prefix="hived-bench-")
    try:
        results = []
        for r in range(args.rounds if not args.quick else 1):
            sub = os.path.join(root, f"r{r}")
            os.makedirs(sub)
            t_svc, t_raw, _ = bench_submit(n, args.synchronous, args.scheme, sub)
            results.append((t_svc, t_raw))
        svc_rate = statistics.median(n / t for t, _ in results)
        raw_rate = statistics.median(n / t for _, t in results)
        print(f"submit: {n} jobs, synchronous={args.synchronous}, scheme={args.scheme}, "
              f"{len(results)} round(s)")
        print(f"  SchedulerService.submit  median {svc_rate:8.0f} jobs/s  ({1e3 / svc_rate:.2f} ms/job)")
        print(f"  raw SQLite insert+commit median {raw_rate:8.0f} rows/s  ({1e3 / raw_rate:.2f} ms/row)")
        print(f"  ratio service/raw: {svc_rate / raw_rate:.2f}   target >= 500/s: "
              f"{'MET' if svc_rate >= 500 else 'MISSED'}")
        times, cpu, bound, total = bench_restart(n, args.synchronous, args.scheme, root, args.rounds)
        med, med_cpu = statistics.median(times), statistics.median(cpu)
        print(f"restart: {total} jobs stored, {bound} holding cells (bindings), {len(times)} round(s)")
        print(f"  median {med:.3f} s wall (min {min(times):.3f}, max {max(times):.3f}), "
              f"{med_cpu:.3f} s CPU   target <= 2 s: {'MET' if med <= 2 else 'MISSED'}")
        # wall time above CPU time is waiting: other processes on the cores, or the disk
        load = os.getloadavg()[0]
        print(f"  load average {load:.1f} on {os.cpu_count()} cores during the run")
        print(json.dumps({"submit_per_s": round(svc_rate), "raw_per_s": round(raw_rate),
                          "ratio": round(svc_rate / raw_rate, 3), "restart_s": round(med, 3),
                          "restart_cpu_s": round(med_cpu, 3), "jobs": total, "bindings": bound,
                          "load_avg": round(load, 1)}))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
