"""``hived jobs``: list jobs, filtered by VC, state or user."""
from __future__ import annotations

from hived.cli import support as cs
from hived.service.job_table import jobs_table


def register(subparsers, summary: str) -> None:
    p = subparsers.add_parser("jobs", help=summary, description="List jobs with their state and GPUs.",
                              epilog=cs.EXIT_CODES_HELP)
    p.add_argument("--vc", default=None, help="only this VC")
    p.add_argument("--state", default=None,
                   help="only this state (queued, placed, running, preempting, succeeded, failed, cancelled)")
    who = p.add_mutually_exclusive_group()
    who.add_argument("--mine", action="store_true", help="only my jobs (as the service knows me)")
    who.add_argument("--owner", default=None, help="only this user's jobs")
    p.add_argument("--active", action="store_true", help="hide jobs that have ended")
    cs.add_common(p)
    p.set_defaults(func=cs.guarded("hived jobs", run))


def _me(args, backend) -> str:
    """Who the service says we are: a Hub or per-user token names its person,
    who need not be this machine's login name."""
    return backend.whoami().get("user") or cs.user_of(args)


def run(args, backend) -> int:
    user = _me(args, backend) if args.mine else args.owner
    jobs = backend.jobs(vc=args.vc, state=args.state, user=user)
    if args.active:
        jobs = [j for j in jobs if j["state"] not in cs.TERMINAL]
    if args.json:
        cs.print_json({"jobs": jobs})
        return cs.OK
    if not jobs:
        print("no jobs")
        return cs.OK
    print(jobs_table(jobs, cs.terminal_width()))
    return cs.OK
