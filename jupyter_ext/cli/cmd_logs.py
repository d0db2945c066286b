"""``hived logs``: print a job's log, or follow it (-f) until the job ends."""
from __future__ import annotations

import sys
import time

from hived.jupyter_ext.service import cli_support as cs


def register(subparsers, summary: str) -> None:
    p = subparsers.add_parser("logs", help=summary,
                              description="Print the output of one pod of a job (all attempts, in order).",
                              epilog=cs.EXIT_CODES_HELP)
    p.add_argument("job", help="job id")
    p.add_argument("--rank", type=int, default=0, help="which pod of the gang (default 0)")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    p.add_argument("--offset", type=int, default=0, help="start at this byte of the log")
    cs.add_common(p, json_flag=False)
    p.set_defaults(func=cs.guarded("hived logs", run))


def run(args, backend) -> int:
    offset = args.offset
    while True:
        ans = backend.logs(args.job, rank=args.rank, offset=offset, follow=args.follow)
        if ans["text"]:
            sys.stdout.write(ans["text"])
            sys.stdout.flush()
        offset = ans["offset"]
        if not args.follow or ans.get("done"):
            # the job may have ended between two reads: print what was left
            if args.follow:
                rest = backend.logs(args.job, rank=args.rank, offset=offset)
                sys.stdout.write(rest["text"])
            break
        if not ans["text"]:
            time.sleep(0.5)
    if args.follow:
        state = backend.job(args.job)["state"]
        if state not in cs.TERMINAL:
            # embedded: no service runs, so nothing more will be written until one does
            print(f"hived logs: the job is {state} and no service runs on this data directory "
                  f"to go on with it; start 'hived serve' and follow again", file=sys.stderr)
            return cs.UNREACHABLE
        return cs.OK if state == "succeeded" else cs.JOB_FAILED
    return cs.OK
