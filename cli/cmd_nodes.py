"""``hived nodes``: every node, its cells and GPUs (free, used, unhealthy) and who holds them,
as Slurm's ``sinfo -N`` shows nodes. Holders of other VCs show their VC only (the service
hides their job ids and users from non-admins)."""
from __future__ import annotations

from hived.cli import support as cs


def register(subparsers, summary: str) -> None:
    p = subparsers.add_parser("nodes", help=summary, description=__doc__, epilog=cs.EXIT_CODES_HELP)
    p.add_argument("--chain", default=None, help="only the nodes of this cell chain")
    cs.add_common(p)
    p.set_defaults(func=cs.guarded("hived nodes", run))


def rows(doc: dict, chain: str | None = None) -> list[list]:
    out = []
    for name, ch in sorted((doc.get("chains") or {}).items()):
        if chain is not None and name != chain:
            continue
        cell = ch["levels"][ch["node_level"] - 1] if ch.get("levels") else name
        for node, info in sorted((ch.get("nodes") or {}).items()):
            gpus = info.get("gpus") or []
            bad = [g for g in gpus if not g.get("healthy", True)]
            used = [g for g in gpus if g.get("holder") or g.get("vc")]
            holders = []
            for g in used:
                who = g.get("holder") or "?"
                if g.get("user"):
                    who += f" ({g['user']}, {g.get('vc')})"
                elif g.get("vc"):
                    who = f"VC {g['vc']}"
                if who not in holders:
                    holders.append(who)
            out.append([node, name if cell == name else f"{name}.{cell}", len(gpus), len(gpus) - len(used) - len(
                [g for g in bad if g not in used]), len(used), len(bad), ", ".join(holders) or "-"])
    return out


def run(args, backend) -> int:
    doc = backend.cluster()
    if args.chain is not None and args.chain not in (doc.get("chains") or {}):
        raise LookupError(f"--chain: no chain named {args.chain!r}; chains: "
                          f"{', '.join(sorted(doc.get('chains') or {}))}")
    table = rows(doc, args.chain)
    if args.json:
        cs.print_json({"nodes": [dict(zip(("node", "cell", "gpus", "free", "used", "unhealthy", "holders"), r))
                                 for r in table]})
        return cs.OK
    print(cs.table(table, ["NODE", "CELL", "GPUS", "FREE", "USED", "UNHEALTHY", "HOLDERS"],
                   shrink=("HOLDERS",)))
    return cs.OK
