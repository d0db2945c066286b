"""``hived vc``: VC views (cells per level: total, used, free, lent) and usage."""
from __future__ import annotations

from hived.cli import support as cs


def register(subparsers, summary: str) -> None:
    p = subparsers.add_parser("vc", help=summary,
                              description="Without NAME: every VC's GPUs in use and queue. With NAME: "
                                          "that VC's cells per level, its queue and running jobs.",
                              epilog=cs.EXIT_CODES_HELP)
    p.add_argument("name", nargs="?", help="VC name")
    cs.add_common(p)
    p.set_defaults(func=cs.guarded("hived vc", run))


def _view_rows(view) -> list[list]:
    """The allocator's view is a dict (or nested dicts) of counters per chain/level."""
    rows = []

    def walk(prefix, v):
        if isinstance(v, dict) and v and all(not isinstance(x, dict) for x in v.values()):
            rows.append([prefix] + [_pair(k, x) for k, x in v.items()
                                    if not isinstance(x, (list, dict)) and x is not None and x is not False])
        elif isinstance(v, dict):
            for k, x in v.items():
                walk(f"{prefix}/{k}" if prefix else str(k), x)
        elif isinstance(v, list):
            for i, x in enumerate(v):
                walk(f"{prefix}[{i}]", x)
    walk("", view)
    return rows


def _pair(key, value) -> str:
    """``free=3``; a flag that is set shows as its name alone (no Python True/False)."""
    return cs.visible(key) if value is True else f"{cs.visible(key)}={cs.visible(value)}"


def run(args, backend) -> int:
    if args.name:
        v = backend.vc(args.name)
        if args.json:
            cs.print_json(v)
            return cs.OK
        print(f"VC {cs.visible(v['name'])}: {v['gpus_used']}/{v['gpus_total']} guaranteed GPUs in use"
              f"{_loans(v)}; "
              f"users {cs.visible(', '.join(v['users'])) or 'anyone'}; "
              f"admins {cs.visible(', '.join(v['admins'])) or '-'}")
        print("  cells: " + ", ".join(f"{cs.visible(k)} x{n}" for k, n in v["cells"].items()))
        for row in _view_rows(v["view"]):
            print("  " + "  ".join(cs.visible(c) for c in row))
        print(f"  running: {' '.join(v['running']) or '-'}")
        print(f"  queue:   {' '.join(v['queue']) or '-'}")
        return cs.OK
    vcs = backend.vcs()["vcs"]
    if args.json:
        cs.print_json({"vcs": vcs})
        return cs.OK
    rows = [[n, f"{v['gpus_used']}/{v['gpus_total']}{_loans(v)}", len(v["running"]), len(v["queue"]),
             ", ".join(f"{k} x{c}" for k, c in v["cells"].items())] for n, v in vcs.items()]
    print(cs.table(rows, ["VC", "GPUS USED", "RUNNING", "QUEUED", "CELLS"], shrink=("CELLS",)))
    return cs.OK


def _loans(v: dict) -> str:
    """`` (spec 8: 4 lent)`` while cell exchange moved some of the VC's cells; empty otherwise."""
    lent, borrowed = v.get("gpus_lent") or 0, v.get("gpus_borrowed") or 0
    if not lent and not borrowed:
        return ""
    moved = ", ".join(t for t in (f"{lent} lent" if lent else "", f"{borrowed} borrowed" if borrowed else "") if t)
    return f" (spec {v.get('gpus_spec', '?')}: {moved})"
