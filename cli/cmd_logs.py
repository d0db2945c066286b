"""``hived logs``: print a job's log, or follow it (-f) until the job ends."""
from __future__ import annotations

import sys
import time

from hived.cli import support as cs


def register(subparsers, summary: str) -> None:
    p = subparsers.add_parser("logs", help=summary,
                              description="Print the output of one pod of a job (all attempts, in order).",
                              epilog=cs.EXIT_CODES_HELP)
    p.add_argument("job", help="job id")
    p.add_argument("--rank", type=int, default=0, help="which pod of the gang (default 0)")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    p.add_argument("--offset", type=int, default=0, help="start at this byte of the log")
    cs.add_common(p)
    p.set_defaults(func=cs.guarded("hived logs", run))


def run(args, backend) -> int:
    offset, kept = args.offset, []

    def emit(text: str) -> None:
        if args.json:
            kept.append(text)        # one JSON document at the end
        elif text:
            sys.stdout.write(text)
            sys.stdout.flush()

    while True:
        ans = backend.logs(args.job, rank=args.rank, offset=offset, follow=args.follow)
        emit(ans["text"])
        offset = ans["offset"]
        if not args.follow or ans.get("done"):
            # the job may have ended between two reads: print what was left
            if args.follow:
                rest = backend.logs(args.job, rank=args.rank, offset=offset)
                emit(rest["text"])
                offset = rest["offset"]
            break
        if not ans["text"]:
            time.sleep(0.5)
    if not args.follow and not args.json:
        return cs.OK
    job = backend.job(args.job)
    if args.json:
        cs.print_json({"job": args.job, "rank": args.rank, "text": "".join(kept), "offset": offset,
                       "state": job["state"]})
    if not args.follow:
        return cs.OK
    state = job["state"]
    if state not in cs.TERMINAL:
        # embedded: no service runs, so nothing more will be written until one does
        print(f"hived logs: the job is {state} and no service runs on this data directory "
              f"to go on with it; start 'hived serve' and follow again", file=sys.stderr)
        return cs.UNREACHABLE
    if state == "succeeded":
        return cs.OK
    print(f"hived logs: job {args.job} {cs.outcome(job)}", file=sys.stderr)
    return cs.JOB_FAILED
