"""What one state change of a job costs the journal: the whole record rewritten (as before)
against its state part only (the request stored once, ``job_requests``).

For a 190 KB job (three 60,000-character env values and a long command, as
``bench_flood.py``'s alice posts) and a small one, both ways in the same run, in
alternating rounds so that the disk's and the machine's good and bad moments fall on
both alike:

- old: a store opened at the schema before requests were stored apart (the code path
  kept for it writes the whole record, as every state change did before);
- new: the current schema.

Each round submits the job (``add_job``), then makes ``--changes`` state changes the
way the service does: the ``JobRecord`` changes state, ``to_dict()`` and
``update_job`` run inside ``transaction(sync=False)`` (what holds the service lock in a
round), then ``sync_through`` makes it durable (after the lock, group commit).

Reported per state change, medians over every change of every round:
- CPU under the lock (``thread_time`` of to_dict + update + commit, no fsync);
- CPU including the fsync (the whole change);
- bytes written to the WAL (the WAL truncated before, its size after ``--wal-changes``
  changes, divided by them; SQLite's checkpoint later copies the same pages again);
- and the same two for ``--wal-changes`` submissions per round (``add_job``), which now
  write one row more (the request's).

Usage: bench_store_update.py [--rounds R] [--changes N] [--wal-changes K]
"""
from __future__ import annotations

import argparse
import contextlib
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from hived.core.engine_records import JobRecord
from hived.core.jobs import JobRequest, JobState
from hived.service import store as store_mod
from hived.service.store import SqliteStore

BIG_ENV = {f"BLOB{k}": "x" * 60_000 for k in range(3)}
JOBS = {
    "190 KB": JobRequest(user="alice", vc="vca", command="python train.py " + "--opt value " * 800,
                         env=BIG_ENV, name="big"),
    "small": JobRequest(user="bob", vc="vcb", command="true", name="steady-1"),
}
CYCLE = ((JobState.PLACED, "placed"), (JobState.RUNNING, "started"), (JobState.PREEMPTING, "preempted"),
         (JobState.QUEUED, "requeued"))


@contextlib.contextmanager
def schema(old: bool):
    """Open stores at the schema before requests were stored apart (old) or the current one."""
    saved = store_mod.MIGRATIONS, store_mod.SCHEMA_VERSION
    if old:
        store_mod.MIGRATIONS = store_mod.MIGRATIONS[:store_mod.REQUEST_SCHEMA - 1]
        store_mod.SCHEMA_VERSION = store_mod.REQUEST_SCHEMA - 1
    try:
        yield
    finally:
        store_mod.MIGRATIONS, store_mod.SCHEMA_VERSION = saved


def change(rec: JobRecord, n: int, now: float) -> None:
    state, reason = CYCLE[n % len(CYCLE)]
    if state is JobState.QUEUED:
        rec.mark_queued(now, reason, "waiting for cells")
    elif state is JobState.PLACED:
        rec.mark_placed(now, reason)
    elif state is JobState.RUNNING:
        rec.mark_running(now)
    else:
        rec.mark_preempting(now, reason, now + 30)


def one_round(folder: Path, old: bool, req: JobRequest, changes: int, wal_changes: int
              ) -> tuple[list[float], list[float], float, list[float], float]:
    with schema(old):
        s = SqliteStore(folder)
    assert s._split is not old
    wal = s.path.with_name(s.path.name + "-wal")
    truncate(s.path, wal)
    add_held, subs = [], []
    for k in range(wal_changes):   # submissions (the first is the job whose state then changes)
        sub = JobRecord(job_id=f"j{k + 1}", request=req, submitted=1.0, queued_since=1.0, queue_key=1.0 + k)
        sub.mark_queued(1.0, "submitted", "")
        t0 = time.thread_time()
        with s.transaction(sync=False):
            s.add_job(sub.to_dict(), 1.0)
        add_held.append(time.thread_time() - t0)
        s.sync_through(s.commit_ticket)
        subs.append(sub)
    rec = subs[0]
    add_wal = wal.stat().st_size / wal_changes
    held, whole = [], []
    for n in range(changes):
        now = 2.0 + n
        c0 = time.process_time()
        t0 = time.thread_time()
        change(rec, n, now)
        with s.transaction(sync=False):
            s.update_job(rec.to_dict(), now)
        held.append(time.thread_time() - t0)
        s.sync_through(s.commit_ticket)
        whole.append(time.process_time() - c0)
    truncate(s.path, wal)
    for n in range(changes, changes + wal_changes):
        change(rec, n, 2.0 + n)
        s.update_job(rec.to_dict(), 2.0 + n)
    wal_bytes = wal.stat().st_size / wal_changes
    assert s.load_jobs_by_id(["j1"])[0][0] == rec.to_dict(), "the store gave back another record"
    s.close()
    return held, whole, wal_bytes, add_held, add_wal


def truncate(db: Path, wal: Path) -> None:
    con = sqlite3.connect(db)
    busy, _, _ = con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    con.close()
    assert busy == 0 and wal.stat().st_size == 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--changes", type=int, default=40, help="timed state changes per round")
    ap.add_argument("--wal-changes", type=int, default=8,
                    help="submissions, and state changes, the WAL is measured over")
    args = ap.parse_args()
    res: dict[tuple[str, bool], dict[str, list[float]]] = {
        (j, old): {"held": [], "whole": [], "wal": [], "add_held": [], "add_wal": []}
        for j in JOBS for old in (True, False)}
    with tempfile.TemporaryDirectory(prefix="bench-store-update-") as root:
        k = 0
        for r in range(args.rounds):
            for job, req in JOBS.items():
                for old in ((True, False) if r % 2 == 0 else (False, True)):
                    k += 1
                    held, whole, wal, add_held, add_wal = one_round(Path(root) / f"r{k}", old, req,
                                                                    args.changes, args.wal_changes)
                    got = res[(job, old)]
                    got["held"] += held
                    got["whole"] += whole
                    got["wal"].append(wal)
                    got["add_held"] += add_held
                    got["add_wal"].append(add_wal)
    print(f"per state change, medians of {args.rounds} rounds x {args.changes} changes "
          f"(WAL: {args.wal_changes} changes per round); old = whole record, new = state part only")
    print(f"{'job':8} {'what':32} {'old':>10} {'new':>10} {'old/new':>8}")
    for job in JOBS:
        for key, what, unit, scale in (("held", "CPU under the lock", "ms", 1e3),
                                       ("whole", "CPU with the fsync", "ms", 1e3),
                                       ("wal", "bytes to the WAL", "KB", 1e-3),
                                       ("add_held", "submission: CPU under lock", "ms", 1e3),
                                       ("add_wal", "submission: WAL bytes", "KB", 1e-3)):
            o, n = statistics.median(res[(job, True)][key]), statistics.median(res[(job, False)][key])
            print(f"{job:8} {what + ' (' + unit + ')':32} {o * scale:10.3f} {n * scale:10.3f} {o / n:8.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
