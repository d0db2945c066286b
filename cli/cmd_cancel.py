"""``hived cancel``: cancel jobs (their owner or an admin of the VC)."""
from __future__ import annotations

from hived.cli import support as cs
from hived.service.job_table import cancel_said


def register(subparsers, summary: str) -> None:
    p = subparsers.add_parser("cancel", help=summary,
                              description="Cancel jobs: queued ones leave the queue, running ones get "
                                          "SIGTERM, their grace period, then SIGKILL.",
                              epilog=cs.EXIT_CODES_HELP)
    p.add_argument("jobs", nargs="+", metavar="JOB", help="job ids")
    cs.add_common(p)
    p.set_defaults(func=cs.guarded("hived cancel", run))


def run(args, backend) -> int:
    return cs.each_job(args, "hived cancel", backend.cancel, cancel_said)
