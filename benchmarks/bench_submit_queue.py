"""What one submission costs as the VC's queue grows.

Admission counts the VC's queued jobs, and the submitter's own, at every
submission, under the service lock. Counted by walking the queue, a submit cost
grew with the queue (about 40 ms of CPU at 6,000 queued jobs), so a team with a
long queue slowed every team's submissions, and writing a 100k-job store took
hours. The engine now keeps the counts as jobs join and leave the queue.

Both ways run in the same process, alternating by window: the counts as kept
(``Engine.queued_count``), and a baseline that walks the queue as before (put in
place of ``queued_count`` on the same engine). Each window submits ``--window``
jobs to a queue that only grows (nothing is placed: the service is not started),
and reports the median CPU per submission, in ms, at that queue length.

Usage: ``bench_submit_queue.py [--upto N] [--window W]`` (default 8,000 and 200).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time

from bench_service import payload, spec

from hived.service.scheduler import SchedulerService
from hived.testing.launcher_noop import NoopLauncher


def walking_count(eng):
    """The old count: a walk over the VC's queue, and a job lookup per queued job for a user."""
    def queued_count(vc: str, user: str | None = None) -> int:
        ids = [jid for lane in (eng.lanes(vc) or ()) for jid in lane]
        return len(ids) if user is None else sum(1 for jid in ids if eng.job(jid).request.user == user)
    return queued_count


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--upto", type=int, default=8_000, help="queue length to grow to (default 8000)")
    ap.add_argument("--window", type=int, default=200, help="submissions per window (default 200)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        svc = SchedulerService(spec(16), d, launcher=NoopLauncher(), synchronous="OFF", health=None)
        kept, walking = svc.eng.queued_count, walking_count(svc.eng)
        print(f"{'queued':>8} {'kept ms':>9} {'walk ms':>9} {'walk/kept':>10}")
        i, rows = 0, []
        while i < args.upto:
            per: dict[str, float] = {}
            for name, count in (("kept", kept), ("walk", walking)):
                svc.eng.queued_count = count      # type: ignore[method-assign]
                costs = []
                for _ in range(args.window // 2):
                    c0 = time.process_time()
                    svc.submit("alice" if i % 2 else "bob", payload(i))
                    costs.append(time.process_time() - c0)
                    i += 1
                per[name] = statistics.median(costs) * 1000
            rows.append((i, per["kept"], per["walk"]))
            if len(rows) % 5 == 0 or i >= args.upto:
                print(f"{i:>8} {per['kept']:>9.3f} {per['walk']:>9.3f} {per['walk'] / per['kept']:>9.1f}x",
                      flush=True)
        del svc.eng.queued_count                  # the class's own again (the snapshot pickles the engine)
        svc.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
