"""Restart time: the snapshot of a clean stop plus the journal's tail, against a full journal replay.

A store holding N jobs, half of them holding cells, is written once through
``SchedulerService`` (as bench_service.py does). Each round then times, in
the same run and alternating, ``SchedulerService(...)`` rebuilding the engine
and the allocator

- from the snapshot its last clean stop stored (``service/snapshot.py``), and
- from the whole journal (the same store with the snapshot row deleted).

CPU seconds (``process_time``: on a shared machine wall time counts others'
turns) and wall seconds, medians over the rounds; the close that writes the
snapshot is timed too. Targets (issue 29): 10,000 jobs in at most 0.5 s of
CPU, 100,000 in at most 5 s.

Usage: ``bench_restart.py [--jobs N ...] [--rounds R]`` (default 10,000 jobs, 5 rounds).
"""
from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time

from bench_service import payload, spec

from hived.service.scheduler import SchedulerService
from hived.testing.launcher_noop import NoopLauncher

TARGET_CPU_S_PER_10K = 0.5


def build(n: int, d: str) -> dict:
    nodes = max(16, -(-(n // 2) // 8 // 16) * 16)    # enough GPUs for n/2 one-GPU jobs
    sp = spec(nodes)
    svc = SchedulerService(sp, d, launcher=NoopLauncher(adopt=True), synchronous="OFF", health=None)
    for i in range(n):
        svc.submit("alice" if i % 2 else "bob", payload(i))
    for _ in range(4):   # place, then hear "started"
        svc.tick()
    svc.close()
    return sp


def drop_snapshot(d: str) -> None:
    con = sqlite3.connect(os.path.join(d, "hived.db"))
    con.execute("DELETE FROM snapshot")
    con.commit()
    con.close()


def one(sp: dict, d: str, snapshot: bool) -> tuple[float, float, float, int]:
    """(CPU s, wall s, CPU s of the close that writes the snapshot, jobs holding cells)."""
    if not snapshot:
        drop_snapshot(d)
    t0, c0 = time.perf_counter(), time.process_time()
    svc = SchedulerService(sp, d, launcher=NoopLauncher(adopt=True), health=None)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    assert svc.recovered["snapshot"] is snapshot, svc.recovered["snapshot"]
    held = sum(1 for r in svc.eng.jobs() if r.placement is not None)
    c1 = time.process_time()
    svc.close()
    return cpu, wall, time.process_time() - c1, held


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, nargs="+", default=[10_000])
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args(argv)
    ok = True
    for n in a.jobs:
        with tempfile.TemporaryDirectory(prefix="bench-restart-") as root:
            d = os.path.join(root, "data")
            t0 = time.perf_counter()
            sp = build(n, d)
            print(f"{n:,} jobs stored in {time.perf_counter() - t0:.0f} s; {a.rounds} rounds, arms alternating")
            got: dict[bool, list[tuple[float, float, float, int]]] = {True: [], False: []}
            for r in range(a.rounds):
                for snap in ((True, False) if r % 2 == 0 else (False, True)):
                    got[snap].append(one(sp, d, snap))
            held = {x[3] for v in got.values() for x in v}
            assert len(held) == 1, held   # both arms rebuild the same bindings
            med = {k: [statistics.median(x[i] for x in v) for i in range(3)] for k, v in got.items()}
            for k, name in ((False, "full replay"), (True, "snapshot + tail")):
                cpu, wall, close = med[k]
                print(f"  {name:16s}: {cpu:.3f} s CPU, {wall:.3f} s wall (median); close {close:.3f} s CPU")
            target = TARGET_CPU_S_PER_10K * max(1.0, n / 10_000)
            good = med[True][0] <= target
            ok = ok and good
            print(f"  full / snapshot CPU ratio {med[False][0] / med[True][0]:.1f}x; {held.pop():,} jobs holding "
                  f"cells; target <= {target:.1f} s CPU: {'OK' if good else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
