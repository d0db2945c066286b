"""Group commit: durable submissions per second with concurrent submitters.

In one run, alternating in rounds so that the disk's good and bad moments fall
on every arm alike:
- raw: plain SQLite inserts of the same rows, WAL, synchronous=FULL, one
  commit (one fsync) each, one thread: the one-commit-per-submit ceiling;
- service x1: ``SchedulerService.submit`` from one thread (synchronous FULL);
- service xT: the same from T threads at once (their commits share fsyncs);
- per-commit xT: T threads again, group commit off (SQLite's fsync in every
  commit, under the service lock: how it was before).
Every service arm answers a submission only once its commit is on disk.
Target (issue 29): service xT at least 3x the raw rate on the same disk.

Usage: bench_group_commit.py [--quick] [--jobs N] [--threads T] [--rounds R]
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
import threading
import time

from hived.service.scheduler import SchedulerService
from hived.testing.launcher_noop import NoopLauncher

sys.path.insert(0, os.path.dirname(__file__))
from bench_service import payload, spec  # noqa: E402


def raw_rate(root: str, rows: list[tuple]) -> float:
    db = sqlite3.connect(os.path.join(root, f"raw-{time.monotonic_ns()}.db"), isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE jobs (seq INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT UNIQUE, user TEXT, "
               "vc TEXT, state TEXT, submitted REAL, updated REAL, qkey REAL, record TEXT)")
    t0 = time.perf_counter()
    for r in rows:
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO jobs (job_id, user, vc, state, submitted, updated, qkey, record) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", r)
        db.execute("COMMIT")
    dt = time.perf_counter() - t0
    db.close()
    return len(rows) / dt


def service_rate(root: str, n: int, threads: int, group: bool = True) -> tuple[float, list[tuple]]:
    from hived.service.store import SqliteStore
    d = os.path.join(root, f"svc-{threads}-{time.monotonic_ns()}")
    store = SqliteStore(d, synchronous="FULL", group_commit=group)
    svc = SchedulerService(spec(64), d, launcher=NoopLauncher(adopt=True), store=store, health=None)

    def work(k: int) -> None:
        for i in range(k, n, threads):
            svc.submit("alice" if i % 2 else "bob", payload(i))
    workers = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    t0 = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    dt = time.perf_counter() - t0
    # the raw arm writes each job's whole record in one row (the store keeps its request apart)
    cols = svc.store._db.execute("SELECT user, vc, state, submitted, updated, qkey FROM jobs ORDER BY seq").fetchall()
    rows = [(d["job_id"], *c, json.dumps(d, separators=(",", ":"))) for d, c in zip(svc.store.load_jobs(), cols)]
    assert len(rows) == n
    svc.close()
    return n / dt, rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="300 jobs per arm, 3 rounds")
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    n = a.jobs or (300 if a.quick else 1000)
    rounds = 3 if a.quick else a.rounds
    root = tempfile.mkdtemp(prefix="hived-gc-")
    many, old = f"service x{a.threads}", f"per-commit x{a.threads}"
    got: dict[str, list[float]] = {"raw": [], "service x1": [], many: [], old: []}
    try:
        for _ in range(rounds):
            one, rows = service_rate(root, n, 1)
            got["service x1"].append(one)
            got[many].append(service_rate(root, n, a.threads)[0])
            got[old].append(service_rate(root, n, a.threads, group=False)[0])
            got["raw"].append(raw_rate(root, rows))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in got.items()}
    print(f"{n} durable submissions per arm, {rounds} rounds, medians (submissions/s):")
    for k, v in med.items():
        print(f"  {k:<15} {v:8.0f}/s   x{v / med['raw']:.2f} raw   (rounds: {', '.join(f'{x:.0f}' for x in got[k])})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
