"""``hived cancel``: cancel jobs (their owner or an admin of the VC)."""
from __future__ import annotations

from hived.jupyter_ext.service import cli_support as cs


def register(subparsers, summary: str) -> None:
    p = subparsers.add_parser("cancel", help=summary,
                              description="Cancel jobs: queued ones leave the queue, running ones get "
                                          "SIGTERM, their grace period, then SIGKILL.",
                              epilog=cs.EXIT_CODES_HELP)
    p.add_argument("jobs", nargs="+", metavar="JOB", help="job ids")
    cs.add_common(p)
    p.set_defaults(func=cs.guarded("hived cancel", run))


def run(args, backend) -> int:
    out, worst = [], cs.OK
    for jid in args.jobs:
        try:
            out.append(backend.cancel(jid))
        except Exception as exc:   # keep going with the others; the worst code wins
            worst = max(worst, cs.error_exit("hived cancel", exc))
    if args.json:
        cs.print_json({"jobs": out})
    else:
        for j in out:
            print(f"{j['id']}: {j['state']}")
    return worst
