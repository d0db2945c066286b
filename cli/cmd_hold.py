"""``hived hold``: keep queued jobs from starting until ``hived release`` (as Slurm's scontrol hold).

``hived release`` and ``hived requeue`` share this module's code (cmd_release.py, cmd_requeue.py).
Who may: the job's owner, an admin of its VC or a cluster admin.
"""
from __future__ import annotations

from hived.cli import support as cs

DESCRIPTIONS = {
    "hold": "Hold queued jobs: each keeps its place in the queue and does not start until released.",
    "release": "Release held jobs: each may start again from its place in the queue.",
    "requeue": "Requeue running jobs: each gets SIGTERM, its grace period, then SIGKILL, and goes back "
               "to the head of its VC's queue (as a preemption).",
}


def register_action(subparsers, summary: str, action: str) -> None:
    p = subparsers.add_parser(action, help=summary, description=DESCRIPTIONS[action], epilog=cs.EXIT_CODES_HELP)
    p.add_argument("jobs", nargs="+", metavar="JOB", help="job ids")
    cs.add_common(p)
    p.set_defaults(func=cs.guarded(f"hived {action}", lambda args, backend: run(args, backend, action)))


def register(subparsers, summary: str) -> None:
    register_action(subparsers, summary, "hold")


def run(args, backend, action: str) -> int:
    return cs.each_job(args, f"hived {action}", lambda jid: backend.control(jid, action),
                       lambda j: said(j, action))


def said(j: dict, action: str) -> str:
    """What a hold, release or requeue did, in words (service/job_table.py, shared with the magics)."""
    from hived.service.job_table import control_said
    return control_said(j, action)
