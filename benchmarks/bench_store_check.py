"""Start-up cost of the store's consistency check: ``PRAGMA quick_check`` against
``PRAGMA integrity_check``, on stores of N job rows (each with a job record of the
size the service writes, its placement and four history entries inside).

Both are timed in the same run on the same file, with a warm page cache, alternating;
the baseline is opening the same file with no check at all (``SqliteStore`` less the
check). Reports the median of ``--repeat`` opens and the ratios.

Usage: bench_store_check.py [--jobs N ...] [--repeat R]
"""
from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from hived.service.store import SqliteStore


def record(i: int) -> dict:
    return {"job_id": f"j{i}", "state": "succeeded", "submitted": 1.0 + i,
            "request": {"user": f"user{i % 40}", "vc": f"vc{i % 8}", "name": f"train-{i}",
                        "command": ["python", "train.py", "--epochs", "90", "--lr", "0.1"],
                        "gpus": 4, "pods": 1, "job_class": "be", "grace_period": 30,
                        "env": {f"VAR{k}": "x" * 20 for k in range(8)}, "workdir": "/home/user/project"},
            "history": [[1.0 + i, "queued", "submitted"], [2.0 + i, "placed", "placed on chain A"],
                        [3.0 + i, "running", "started"], [9.0 + i, "succeeded", "exit 0"]],
            "placement": {"chain": "A", "opportunistic": False,
                          "pods": [{"rank": 0, "node": f"node{i % 100}", "gpus": [0, 1, 2, 3]}]},
            "attempts": 1, "exit_code": 0, "failure_class": "success"}


def build(folder: Path, n: int) -> None:
    s = SqliteStore(folder, synchronous="OFF")
    with s.transaction():
        for i in range(n):
            s.add_job(record(i), now=1.0 + i)
    s.close()


def time_open(folder: Path, check) -> float:
    t0 = time.perf_counter()
    if check is None:   # the baseline: the same open, no consistency check
        con = sqlite3.connect(folder / "hived.db")
        con.execute("PRAGMA application_id").fetchone()
        con.execute("SELECT MAX(version) FROM schema_version").fetchone()
        con.close()
    else:
        SqliteStore(folder, check=check).close()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    out = {}
    for n in args.jobs:
        folder = Path(tempfile.mkdtemp(prefix="hived-check-"))
        try:
            build(folder, n)
            size = (folder / "hived.db").stat().st_size
            times = {"none": [], "quick": [], "full": []}
            for _ in range(args.repeat):
                for kind in times:
                    times[kind].append(time_open(folder, None if kind == "none" else kind))
            med = {k: statistics.median(v) for k, v in times.items()}
            out[n] = {"db_mib": round(size / 2 ** 20, 1), **{f"{k}_ms": round(v * 1e3, 1) for k, v in med.items()},
                      "full_over_quick": round(med["full"] / med["quick"], 2)}
            print(json.dumps({"jobs": n, **out[n]}), flush=True)
        finally:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
