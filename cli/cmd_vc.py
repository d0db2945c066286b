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


LEVEL_COLUMNS = ("total", "used", "free", "opportunistic", "borrowed", "lent", "unhealthy")


def cell_name(key: str, view: dict) -> str:
    """``CHAIN/LEVEL`` -> the spelling ``--cell-type`` and ``spec check`` use: ``CHAIN`` for the
    chain's own top cell type, else ``CHAIN.TYPE``."""
    chain = key.split("/", 1)[0]
    cell_type = ((view.get("levels") or {}).get(key) or {}).get("cell_type") or key
    return chain if cell_type == chain else f"{chain}.{cell_type}"


def _view_rows(view: dict) -> list[list]:
    """One row per cell level of the VC: its cells counted by what holds them."""
    return [[cell_name(key, view), lv.get("gpus_per_cell", "-")] + [lv.get(c, 0) for c in LEVEL_COLUMNS]
            for key, lv in (view.get("levels") or {}).items()]


def _cells_text(v: dict) -> str:
    return ", ".join(f"{cs.visible(cell_name(k, v.get('view') or {}))} x{n}" for k, n in v["cells"].items())


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
        print("  cells: " + _cells_text(v))
        table = cs.table(_view_rows(v["view"]), ["CELL", "GPUS/CELL", *(c.upper() for c in LEVEL_COLUMNS)],
                         shrink=("CELL",))
        print("\n".join("  " + line for line in table.splitlines()))
        print(f"  running: {' '.join(v['running']) or '-'}")
        print(f"  queue:   {' '.join(v['queue']) or '-'}")
        return cs.OK
    vcs = backend.vcs()["vcs"]
    if args.json:
        cs.print_json({"vcs": vcs})
        return cs.OK
    rows = [[n, f"{v['gpus_used']}/{v['gpus_total']}{_loans(v)}", len(v["running"]), len(v["queue"]),
             _cells_text(v)] for n, v in vcs.items()]
    print(cs.table(rows, ["VC", "GPUS USED", "RUNNING", "QUEUED", "CELLS"], shrink=("CELLS",)))
    return cs.OK


def _loans(v: dict) -> str:
    """`` (spec 8: 4 lent)`` while cell exchange moved some of the VC's cells; empty otherwise."""
    lent, borrowed = v.get("gpus_lent") or 0, v.get("gpus_borrowed") or 0
    if not lent and not borrowed:
        return ""
    moved = ", ".join(t for t in (f"{lent} lent" if lent else "", f"{borrowed} borrowed" if borrowed else "") if t)
    return f" (spec {v.get('gpus_spec', '?')}: {moved})"
