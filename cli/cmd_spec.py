"""``hived spec check FILE`` and ``hived spec show FILE``: validate a cluster spec, print VC views.

Reads the file only (no service). A refused spec is one line on stderr,
``hived spec check: YAML.PATH: problem``, and exit code 2 (4 when the file
does not exist), matching the other commands' exit codes (docs/cli.md).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from hived.cli import support as cs

OK, BAD_INPUT, NOT_FOUND = 0, 2, 4


def register(subparsers, summary: str) -> None:
    p = subparsers.add_parser(
        "spec", help=summary,
        description="Validate a cluster spec (YAML in hivedscheduler's shape, see docs/spec.md) and show "
                    "the virtual clusters it defines.",
        epilog="exit codes: 0 ok, 2 the spec is refused (the message names the YAML path and the problem), "
               "4 file not found")
    sub = p.add_subparsers(dest="spec_command", metavar="ACTION")
    check = sub.add_parser("check", help="validate FILE and print a summary (chains, levels, GPUs, VC cells)",
                           description="Validate FILE: shape, cell types (no cycles, one node level per "
                                       "chain), uniform children, unique addresses and pinned ids, VC cell "
                                       "types, and that every VC's cells fit the chain at once "
                                       "(HiveD eq. (1)/(2)). Prints a summary.")
    show = sub.add_parser("show", help="print each VC's view (cells per level, as the allocator sees them)",
                          description="Load FILE into an allocator and print every VC's view: cells per "
                                      "chain and level, how many are bound, and the VC's free cells.")
    for q in (check, show):
        q.add_argument("file", metavar="FILE", help="spec file (YAML or JSON)")
        q.add_argument("--json", action="store_true", help="print JSON instead of text")
        q.set_defaults(func=run)
    show.add_argument("--static", action="store_true",
                      help="bind every VC cell up front (static binding) before showing the views")
    reload = sub.add_parser(
        "reload", help="reconfigure the running service with FILE (or its own spec file); cluster admins only",
        description="Send FILE to the running service, which swaps it in as POST hived/api/spec/reload "
                    "and SIGHUP do: the same checks, the same answer. Running guaranteed jobs whose cells "
                    "no longer fit their VC carry on as opportunistic; a spec that a job fits not even so "
                    "is refused and nothing changes. Without FILE the service re-reads its own spec file.",
        epilog=cs.EXIT_CODES_HELP)
    reload.add_argument("file", metavar="FILE", nargs="?", help="spec file (YAML or JSON) to send")
    cs.add_common(reload)
    reload.set_defaults(func=cs.guarded("hived spec reload", _reload))
    p.set_defaults(func=lambda args: _usage(p))


def _usage(parser) -> int:
    parser.print_help(sys.stderr)
    return BAD_INPUT


def run(args) -> int:
    from hived.core.spec import SpecError, load_spec

    cmd = f"hived spec {args.spec_command}"
    try:
        spec = load_spec(Path(args.file))  # a Path: always read as a file, never as YAML text
    except SpecError as exc:
        code = NOT_FOUND if exc.problem == "file not found" else BAD_INPUT
        if args.json:
            print(json.dumps({"ok": False, "file": str(args.file), "where": exc.path, "error": exc.problem}))
        print(f"{cmd}: {exc}", file=sys.stderr)
        return code
    if args.spec_command == "check":
        return _check(spec, args)
    return _show(spec, args)


def summary(spec) -> dict:
    """The spec in numbers: chains with levels and GPU counts, VCs with cells per level."""
    chains = {}
    for name, ch in spec.chains.items():
        chains[name] = {
            "levels": [{"level": k + 1, "cell_type": t, "gpus": ch.gpus_per_level[k],
                        "node": k + 1 == ch.node_level} for k, t in enumerate(ch.levels)],
            "top_cells": len(ch.cells), "gpus": ch.gpus, "nodes": len(ch.cells) * (
                ch.gpus_per_level[-1] // ch.node_gpus),
        }
    vcs = {}
    for name, vc in spec.vcs.items():
        cells = {f"{c}.{spec.chains[c].levels[k - 1]}": n for (c, k), n in sorted(vc.cells.items(),
                                                                                   key=lambda x: (x[0][0], -x[0][1]))}
        vcs[name] = {"cells": cells, "pinned": list(vc.pinned), "gpus": spec.vc_gpus(name), "weight": vc.weight,
                     "users": list(vc.users), "admins": list(vc.admins), "max_preemptions": vc.max_preemptions,
                     "queue_policy": vc.queue_policy or "fifo",
                     "account": vc.account}
    return {"ok": True, "source": spec.source, "gpus": spec.total_gpus, "chains": chains, "vcs": vcs,
            "admins": list(spec.admins), "accounts": dict(spec.accounts)}


def _check(spec, args) -> int:
    data = summary(spec)
    if args.json:
        print(json.dumps(data, indent=2))
        return OK
    reserved = sum(v["gpus"] for v in data["vcs"].values())
    print(f"{spec.source}: ok - {len(data['chains'])} chain(s), {data['gpus']} GPUs, "
          f"{len(data['vcs'])} VC(s) holding {reserved} GPUs")
    for name, ch in data["chains"].items():
        levels = " / ".join(f"{lv['cell_type']}{' (node)' if lv['node'] else ''} x{lv['gpus']}"
                            for lv in ch["levels"])
        print(f"  chain {name}: {ch['top_cells']} top cell(s), {ch['nodes']} node(s), {ch['gpus']} GPUs")
        print(f"    levels (GPUs per cell): {levels}")
    for name, vc in data["vcs"].items():
        cells = ", ".join(f"{t} x{n}" for t, n in vc["cells"].items())
        if vc["pinned"]:
            cells += (", " if cells else "") + "pinned " + ", ".join(vc["pinned"])
        who = f"; users {', '.join(vc['users'])}" if vc["users"] else ""
        who += f"; admins {', '.join(vc['admins'])}" if vc["admins"] else ""
        who += f"; at most {vc['max_preemptions']} preemptions per job" if vc["max_preemptions"] is not None else ""
        who += f"; runs as {vc['account']}" if vc["account"] else ""
        who += f"; queue {vc['queue_policy']}" if vc["queue_policy"] != "fifo" else ""
        print(f"  VC {name}: {vc['gpus']} GPUs, weight {vc['weight']:g}: {cells}{who}")
    if data["admins"]:
        print(f"  cluster admins: {', '.join(data['admins'])}")
    if data["accounts"]:
        print(f"  Unix accounts: {', '.join(f'{u} -> {a}' for u, a in sorted(data['accounts'].items()))}")
    return OK


def _show(spec, args) -> int:
    from hived.core.allocator import Allocator

    alloc = Allocator(spec, binding="static" if args.static else "dynamic")
    views = {vc: alloc.vc_view(vc) for vc in spec.vcs}
    if args.json:
        out = {}
        for vc, v in views.items():
            out[vc] = {
                "gpus_total": v.gpus_total, "gpus_used": v.gpus_used,
                "levels": [{"chain": c, "level": k, "cell_type": lv.cell_type, "gpus_per_cell": lv.gpus_per_cell,
                            "total": lv.total, "bound": lv.used, "free": lv.free}
                           for (c, k), lv in sorted(v.levels.items(), key=lambda x: (x[0][0], -x[0][1]))],
                "bound_cells": v.bound_cells,
            }
        print(json.dumps({"ok": True, "binding": alloc.binding, "vcs": out}, indent=2))
        return OK
    print(f"{spec.source}: {len(views)} VC(s), {alloc.binding} binding")
    for v in views.values():
        print(v.render())
    return OK


def _reload(args, backend) -> int:
    text = None
    if args.file is not None:
        try:
            text = Path(args.file).read_text(encoding="utf-8")
        except OSError as exc:
            print(f"hived spec reload: {args.file}: cannot read: {exc.strerror}", file=sys.stderr)
            return NOT_FOUND if isinstance(exc, FileNotFoundError) else BAD_INPUT
    out = backend.reload_spec(text)
    if args.json:
        cs.print_json(out)
        return OK
    down = ", ".join(out.get("downgraded") or []) or "none"
    print(f"spec reloaded: VCs {', '.join(out['vcs'])}; downgraded to opportunistic: {down}")
    return OK
