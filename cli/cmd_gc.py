"""``hived gc``: remove the finished jobs a VC's retention policy lets go of (admins)."""
from __future__ import annotations

import argparse
import re

from hived.cli import support as cs

_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> float:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"want a duration like 3600, 90m, 12h or 7d, got {text!r}")
    return float(m.group(1)) * _UNITS[m.group(2)]


_BYTES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def size(text: str):
    if text == "none":
        return None
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", text, re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"want a size like 500M, 20G or none, got {text!r}")
    return int(float(m.group(1)) * _BYTES[m.group(2).upper()])


def count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"want a whole number >= 0, got {text!r}")
    return int(text)


def register(subparsers, summary: str) -> None:
    p = subparsers.add_parser(
        "gc", help=summary,
        description="Remove finished jobs (succeeded, failed, cancelled) beyond their VC's retention "
                    "policy: their journal rows and their jobs/<id>/ folder (logs, work files). Unfinished "
                    "jobs, preempted ones waiting to resume included, are never touched. With --keep or "
                    "--max-age, first set the policy of --vc (kept by the service and applied every 10 "
                    "minutes). VC admins and cluster admins only.",
        epilog=cs.EXIT_CODES_HELP)
    p.add_argument("--vc", default=None, help="one VC (default: every VC you administer)")
    p.add_argument("--keep", type=count, default=None, metavar="N", help="policy: keep the N newest finished jobs")
    p.add_argument("--max-age", type=duration, default=None, metavar="AGE",
                   help="policy: keep finished jobs AGE after they ended (3600, 90m, 12h, 7d)")
    p.add_argument("--clear", action="store_true", help="remove the policy of --vc (keep everything)")
    p.add_argument("--disk-quota", type=size, default=..., metavar="SIZE",
                   help="set the disk quota of --vc's job folders (500M, 20G; none removes it): over it, "
                        "the VC's writing jobs are stopped and its submissions refused")
    p.add_argument("--dry-run", action="store_true",
                   help="say what would be removed (with --keep/--max-age: under that policy, not setting it)")
    cs.add_common(p)
    p.set_defaults(func=cs.guarded("hived gc", run))


def run(args, backend) -> int:
    policy = None
    if args.keep is not None or args.max_age is not None or args.clear:
        if args.vc is None:
            raise ValueError("--vc: a policy is set for one VC")
        if args.clear and (args.keep is not None or args.max_age is not None):
            raise ValueError("--clear: give it alone, not with --keep or --max-age")
        policy = {} if args.clear else {k: v for k, v in (("keep", args.keep), ("max_age", args.max_age))
                                        if v is not None}
    if args.disk_quota is not ... and args.vc is None:
        raise ValueError("--vc: a disk quota is set for one VC")
    out = backend.gc(args.vc, args.dry_run, policy, args.disk_quota)
    if args.json:
        cs.print_json(out)
        return cs.OK
    if "quota" in out:
        q = out["quota"]
        print(f"{args.vc}: " + ("no disk quota" if q["max_bytes"] is None else
                                 f"disk quota {q['max_bytes'] / 2 ** 20:.1f} MiB for job folders, "
                                 f"{(q['used_bytes'] or 0) / 2 ** 20:.1f} MiB used"))
    if "policy" in out and not args.dry_run:
        pol = out["policy"]
        print(f"{args.vc}: " + ("no retention policy (finished jobs are kept)" if not pol else
                                 "keep " + ", ".join(p for p in (
                                     f"the {pol['keep']} newest" if pol.get("keep") is not None else "",
                                     f"{pol['max_age']:g} s after the end" if pol.get("max_age") is not None else "")
                                     if p)))
    verb = "would remove" if out["dry_run"] else "removed"
    ids = out["removed"]
    print(f"{verb} {len(ids)} finished job{'s' * (len(ids) != 1)} ({out['freed_bytes'] / 2 ** 20:.1f} MiB) "
          f"in {', '.join(out['vcs'])}" + (f": {' '.join(ids)}" if ids else ""))
    return cs.OK
