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

``--baseline DIR``: DIR is another checkout of hived (say ``git worktree add /tmp/main main``).
Instead of the full replay, the snapshot start of this tree and of DIR are timed in turn, each
start in a fresh process on its own copy of the store (each tree writes and reads its own
snapshot: one tree refuses the other's), and the medians and their ratio are printed: of the
first start of the process (it also imports numpy and the schema compiler, about 0.2 s here) and
of a second start in the same process (as the rounds without ``--baseline`` are timed; the target
applies to that one).
``--store-root DIR`` keeps the stores built (``DIR/<jobs>``) and uses them again in a later
run (a 100,000-job store takes minutes to write). ``--profile FILE``: cProfile one snapshot
start of this tree into FILE (``python -m pstats FILE``).

Usage: ``bench_restart.py [--jobs N ...] [--rounds R] [--baseline DIR] [--store-root DIR]
[--profile FILE]`` (default 10,000 jobs, 5 rounds).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

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


@contextlib.contextmanager
def store(n: int, root: str | None) -> Iterator[tuple[dict, str]]:
    """(spec, data directory) of a store of ``n`` jobs: built now, or kept under ``root``."""
    with tempfile.TemporaryDirectory(prefix="bench-restart-") as tmp:
        keep = os.path.join(root, str(n)) if root else None
        if keep and os.path.exists(os.path.join(keep, "spec.json")):
            with open(os.path.join(keep, "spec.json")) as f:
                sp = json.load(f)
            print(f"{n:,} jobs: the store kept in {keep}")
        else:
            d = keep or os.path.join(tmp, "built")
            t0 = time.perf_counter()
            sp = build(n, os.path.join(d, "data"))
            with open(os.path.join(d, "spec.json"), "w") as f:
                json.dump(sp, f)
            print(f"{n:,} jobs stored in {time.perf_counter() - t0:.0f} s")
        src = os.path.join(keep or os.path.join(tmp, "built"), "data")
        work = os.path.join(tmp, "data")
        shutil.copytree(src, work)   # a kept store stays as built
        yield sp, work


def drop_snapshot(d: str) -> None:
    con = sqlite3.connect(os.path.join(d, "hived.db"))
    con.execute("DELETE FROM snapshot")
    con.commit()
    con.close()


def one(sp: dict, d: str, snapshot: bool | None) -> tuple[float, float, float, int]:
    """(CPU s, wall s, CPU s of the close that writes the snapshot, jobs holding cells).
    ``snapshot``: whether the start must have used it (None: either)."""
    if snapshot is False:
        drop_snapshot(d)
    t0, c0 = time.perf_counter(), time.process_time()
    svc = SchedulerService(sp, d, launcher=NoopLauncher(adopt=True), health=None)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    assert snapshot is None or svc.recovered["snapshot"] is snapshot, svc.recovered["snapshot"]
    held = sum(1 for r in svc.eng.jobs() if r.placement is not None)
    c1 = time.process_time()
    svc.close()
    return cpu, wall, time.process_time() - c1, held


def fresh(tree: str | None, sp_file: str, d: str, snapshot: bool | None) -> list[list]:
    """``one``, twice, in a fresh process of this tree (None) or of the checkout ``tree``: the first
    start (it imports what the engine and the spec need: numpy for FitGpp, the schema compiler) and
    a second one in the same process, as a service that has run before (the in-process figure)."""
    env, script = dict(os.environ), os.path.abspath(__file__)
    with tempfile.TemporaryDirectory() as tmp:
        if tree is not None:
            os.symlink(os.path.abspath(tree), os.path.join(tmp, "hived"))   # ``import hived`` finds DIR
            env["PYTHONPATH"] = tmp + os.pathsep + os.path.dirname(script)
        argv = [sys.executable, script, "--one", d, "--spec-file", sp_file]
        if snapshot is not None:
            argv.append("--must-use-snapshot")
        run = subprocess.run(argv, env=env, cwd=tmp, capture_output=True, text=True)
    if run.returncode:
        raise RuntimeError(f"a start of {tree or 'this tree'} failed: {run.stderr[-2000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def against(base: str, sp: dict, d: str, rounds: int) -> tuple[dict[str, list[float]], int]:
    """Medians (CPU, wall, close CPU) of this tree's and ``base``'s snapshot starts, alternating:
    "this"/"base" the first start of a fresh process, "this-warm"/"base-warm" the second."""
    dirs = {"this": d, "base": d + "-base"}
    shutil.copytree(d, dirs["base"])
    sp_file = os.path.join(os.path.dirname(d), "spec.json")
    with open(sp_file, "w") as f:
        json.dump(sp, f)
    trees = {"this": None, "base": base}
    for who in ("base", "this"):   # each tree's own snapshot (the other's is refused: a full replay)
        fresh(trees[who], sp_file, dirs[who], None)
    got: dict[str, list] = {"this": [], "base": [], "this-warm": [], "base-warm": []}
    for r in range(rounds):
        for who in (("base", "this") if r % 2 == 0 else ("this", "base")):
            cold, warm = fresh(trees[who], sp_file, dirs[who], True)
            got[who].append(cold)
            got[who + "-warm"].append(warm)
    held = {x[3] for v in got.values() for x in v}
    assert len(held) == 1, held   # both trees rebuild the same bindings
    return {k: [statistics.median(x[i] for x in v) for i in range(3)] for k, v in got.items()}, held.pop()


def profile(sp: dict, d: str, path: str) -> None:
    import cProfile
    one(sp, d, True)   # a snapshot of this tree
    prof = cProfile.Profile()
    prof.enable()
    svc = SchedulerService(sp, d, launcher=NoopLauncher(adopt=True), health=None)
    prof.disable()
    svc.close()
    prof.dump_stats(path)
    print(f"  profile of one snapshot start: {path}")


def report(n: int, med: dict, names: dict, held: int, this: str = "this") -> bool:
    """Print the medians of ``names`` and the ratio of the other to ``this``; whether ``this`` met the target."""
    for k, name in names.items():
        cpu, wall, close = med[k]
        print(f"  {name:28s}: {cpu:.3f} s CPU, {wall:.3f} s wall (median); close {close:.3f} s CPU")
    target = TARGET_CPU_S_PER_10K * max(1.0, n / 10_000)
    good = med[this][0] <= target
    other = [k for k in names if k != this][0]
    print(f"  {names[other]} / {names[this]} CPU ratio {med[other][0] / med[this][0]:.2f}x; {held:,} jobs "
          f"holding cells; target <= {target:.1f} s CPU: {'OK' if good else 'MISSED'}", flush=True)
    return good


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, nargs="+", default=[10_000])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--baseline", default=None, help="another hived checkout: its snapshot start, timed in turn")
    ap.add_argument("--store-root", default=None, help="keep the stores built here and use them again")
    ap.add_argument("--profile", default=None, help="cProfile one snapshot start into this file")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)   # a start in this process
    ap.add_argument("--spec-file", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--must-use-snapshot", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.one:
        with open(a.spec_file) as f:
            sp = json.load(f)
        must = True if a.must_use_snapshot else None
        print(json.dumps([one(sp, a.one, must), one(sp, a.one, must)]))
        return 0
    ok = True
    for n in a.jobs:
        with store(n, a.store_root) as (sp, d):
            if a.profile:
                profile(sp, d, a.profile)
                continue
            if a.baseline:
                print(f"  {a.rounds} rounds, this tree and {a.baseline} in turn, each start in a fresh process")
                med, held = against(a.baseline, sp, d, a.rounds)
                report(n, med, {"base": "baseline, fresh process", "this": "this tree, fresh process"}, held)
                ok = report(n, med, {"base-warm": "baseline, second start", "this-warm": "this tree, second start"},
                            held, "this-warm") and ok
                continue
            print(f"  {a.rounds} rounds, arms alternating")
            got: dict[str, list[tuple[float, float, float, int]]] = {"this": [], "full": []}
            for r in range(a.rounds):
                for snap in ((True, False) if r % 2 == 0 else (False, True)):
                    got["this" if snap else "full"].append(one(sp, d, snap))
            heldset = {x[3] for v in got.values() for x in v}
            assert len(heldset) == 1, heldset   # both arms rebuild the same bindings
            med = {k: [statistics.median(x[i] for x in v) for i in range(3)] for k, v in got.items()}
            ok = report(n, med, {"full": "full replay", "this": "snapshot + tail"}, heldset.pop()) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
