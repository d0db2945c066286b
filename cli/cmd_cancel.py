"""``hived cancel``: cancel jobs (their owner or an admin of the VC)."""
from __future__ import annotations

from hived.cli import support as cs


def register(subparsers, summary: str) -> None:
    p = subparsers.add_parser("cancel", help=summary,
                              description="Cancel jobs: queued ones leave the queue, running ones get "
                                          "SIGTERM, their grace period, then SIGKILL.",
                              epilog=cs.EXIT_CODES_HELP)
    p.add_argument("jobs", nargs="+", metavar="JOB", help="job ids")
    cs.add_common(p)
    p.set_defaults(func=cs.guarded("hived cancel", run))


def run(args, backend) -> int:
    return cs.each_job(args, "hived cancel", backend.cancel, said)


def said(j: dict) -> str:
    """What the cancel did, in words."""
    if j["state"] == "cancelled":
        return "cancelled" + (" before it started" if not j.get("started") else "")
    if j["state"] == "preempting":
        grace = j.get("grace_period") or 0
        kill_at, hist = j.get("kill_at"), j.get("history") or []
        if kill_at is not None and hist:   # the grace left when the cancel was booked (0: a second cancel)
            grace = max(0.0, kill_at - hist[-1]["time"])
        return (f"stopping: SIGTERM sent, SIGKILL in {grace:g} s if still running; it ends as cancelled"
                if grace else "stopping: its processes are being killed; it ends as cancelled")
    return f"{j['state']} (the cancel takes effect at the next scheduling round)"
