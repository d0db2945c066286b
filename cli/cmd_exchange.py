"""``hived exchange``: cell exchange between VCs (HiveD, earlier version, §3.3).

Online, against a running service (``hived serve``; found like every other
command: --url/--token, $HIVED_URL/$HIVED_TOKEN, or the data dir)::

    hived exchange board                      # open offers and requests
    hived exchange ledger                     # GPU-hours contributed/consumed/surplus per VC
    hived exchange offer   --vc A --cell-type NODE --count 1 --duration 10h [--start 1h]
    hived exchange request --vc B --cell-type NODE --count 1 --duration 10h
    hived exchange withdraw o3                # take an open post off the board

Offline, a dry run of the matching over a spec and a file of posts (YAML
or JSON), nothing sent anywhere::

    hived exchange dry-run --spec cluster.yaml --posts posts.yaml [--policy balanced]

posts.yaml: ``{now: 0, ledger: {VC: {contributed: h, consumed: h}},
posts: [{kind: offer|request, vc, cell_type, count, duration, start,
in_return: {cell_type, count}}]}`` (times in seconds; ``in_return`` makes
a spatial exchange, e.g. one 8-GPU cell for eight 1-GPU cells).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> float:
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([smhd]?)\s*", str(text))
    if not m:
        raise argparse.ArgumentTypeError(f"expected a duration like 3600, 90m, 10h or 2d, got {text!r}")
    return float(m.group(1)) * _UNITS[m.group(2)]


def register(subparsers, summary: str) -> None:
    p = subparsers.add_parser("exchange", help=summary, description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    for name, text in (("board", "open offers and requests"), ("ledger", "GPU-hour ledger per VC"),
                       ("offers", "open offers"), ("requests", "open requests")):
        q = sub.add_parser(name, help=text)
        _conn(q)
    for name, text in (("offer", "offer cells of a VC for a time window (VC admins)"),
                       ("request", "ask for cells for a time window (VC admins)")):
        q = sub.add_parser(name, help=text)
        _conn(q)
        q.add_argument("--vc", required=True, help="the VC posting")
        q.add_argument("--cell-type", dest="cell_type", required=True,
                       help="cell type, e.g. NODE or DGX2-V100.NODE (CHAIN.TYPE)")
        q.add_argument("--count", type=int, required=True, help="number of cells")
        q.add_argument("--duration", type=duration, required=True, help="window length: 36000, 600m, 10h, 1d")
        q.add_argument("--start", type=duration, default=0.0, help="window start from now (default 0)")
    w = sub.add_parser("withdraw", help="take an open offer or request off the board (VC admins)")
    _conn(w)
    w.add_argument("post_id", metavar="ID", help="the post's id, as the board shows it (o3, r4)")
    d = sub.add_parser("dry-run", help="match a file of posts offline against a spec (nothing is sent)")
    d.add_argument("--spec", required=True, help="cluster spec (YAML)")
    d.add_argument("--posts", required=True, help="posts file (YAML or JSON), see 'hived exchange --help'")
    d.add_argument("--policy", default="balanced", help="balanced (default) or first_fit")
    d.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=run, action=None)


def _conn(q) -> None:
    q.add_argument("--url", default=None, help="service URL (default $HIVED_URL or the local 'hived serve')")
    q.add_argument("--token", default=None, help="API token (default $HIVED_TOKEN)")
    q.add_argument("--user", default=None, help="act as this user (default $HIVED_USER)")
    q.add_argument("--json", action="store_true", help="print the raw JSON answer")


def _fail(msg: str) -> int:
    print(f"hived exchange: {msg}", file=sys.stderr)
    return 2


def run(args) -> int:
    if not args.action:
        return _fail("say what to do: board, ledger, offers, requests, offer, request, withdraw or dry-run "
                     "(see --help)")
    if args.action == "dry-run":
        return dry_run(args)
    from hived.service.client import HivedClient, HivedError

    try:
        client = HivedClient(url=args.url, token=args.token, user=args.user)
        if args.action in ("offer", "request"):
            body = {"vc": args.vc, "cell_type": args.cell_type, "count": args.count,
                    "duration": args.duration, "start": args.start}
            doc = (client.post_offer if args.action == "offer" else client.post_request)(body)
        elif args.action == "withdraw":
            doc = client.withdraw(args.post_id)
        else:
            doc = client.exchange(args.action)
    except HivedError as exc:
        from hived.cli import support as cs
        return cs.error_exit("hived exchange", exc)   # the documented exit codes and `field: problem`
    if args.json:
        print(json.dumps(doc, indent=2, sort_keys=True))
    elif args.action == "ledger":
        print(_ledger_table(doc.get("ledger", doc)))
    elif args.action == "withdraw":
        print(f"withdrew {doc['kind']} {doc['id']} of VC {doc['vc']}: {doc['count']} x {doc['chain']} "
              f"level {doc['level']} over [{_clock(doc['start'])}, {_clock(doc['end'])})")
    else:
        print(_board_text(doc))
    return 0


def _board_text(doc: dict) -> str:
    """Posts and exchanges as tables (a post answer is one post with what it matched)."""
    from hived.cli import support as cs
    if "kind" in doc:        # the answer to offer/request
        doc = {doc["kind"] + "s": [doc], "exchanges": doc.get("matched") or []}
    out = []
    posts = [p for key in ("offers", "requests") for p in doc.get(key) or []]
    if "offers" in doc or "requests" in doc:
        out.append(cs.table([[p["id"], p["kind"], p["vc"], f"{p['chain']} level {p['level']}", p["count"],
                              _clock(p["start"]), _clock(p["end"])] for p in posts],
                            ["ID", "KIND", "VC", "CELLS", "COUNT", "FROM", "TO"]) if posts else "no open posts")
    if "exchanges" in doc:
        rows = [[x["id"], x["state"] + (f": {x['reason']}" if x.get("reason") else ""),
                 "; ".join(f"{g['lender']} -> {g['borrower']} {g['count']} x {g['chain']} level {g['level']}"
                           for g in x["legs"]), _clock(x["start"]), _clock(x["end"])]
                for x in doc["exchanges"]]
        out.append(cs.table(rows, ["EXCHANGE", "STATE", "LEGS", "FROM", "TO"], shrink=("STATE", "LEGS"))
                   if rows else "no exchanges")
    return "\n".join(out)


def _clock(t) -> str:
    from hived.core.timefmt import clock
    return clock(t) if isinstance(t, (int, float)) else "-"


def _ledger_table(ledger: dict) -> str:
    lines = [f"{'VC':<16}{'contributed h':>15}{'consumed h':>12}{'surplus h':>11}"]
    for vc, e in sorted(ledger.items()):
        lines.append(f"{vc:<16}{e['contributed']:>15.2f}{e['consumed']:>12.2f}{e['surplus']:>11.2f}")
    return "\n".join(lines)


def dry_run(args) -> int:
    import yaml

    from hived.core.exchange import ExchangeArbiter, ExchangeError
    from hived.core.spec import SpecError, load_spec

    try:
        spec = load_spec(args.spec)
    except (SpecError, OSError) as exc:
        return _fail(str(exc))
    try:
        with open(args.posts) as f:
            doc = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as exc:
        return _fail(f"{args.posts}: {exc}")
    if not isinstance(doc, dict) or not isinstance(doc.get("posts"), list):
        return _fail(f"{args.posts}: expected a mapping with a 'posts' list")
    try:
        arb = ExchangeArbiter(None, spec, args.policy)
    except ValueError as exc:
        return _fail(str(exc))
    now = float(doc.get("now", 0.0))
    for vc, e in (doc.get("ledger") or {}).items():
        if vc not in spec.vcs:
            return _fail(f"{args.posts}: ledger.{vc}: unknown VC")
        arb.ledger.entry(vc).contributed = float(e.get("contributed", 0.0))
        arb.ledger.entry(vc).consumed = float(e.get("consumed", 0.0))
    for n, p in enumerate(doc["posts"]):
        if not isinstance(p, dict) or p.get("kind") not in ("offer", "request"):
            return _fail(f"{args.posts}: posts[{n}].kind: must be offer or request")
        try:
            arb.post_payload(p["kind"], {k: v for k, v in p.items() if k != "kind"}, now)
        except ExchangeError as exc:
            return _fail(f"{args.posts}: posts[{n}].{exc}")
    made = arb.match(now, start=False)
    result: dict[str, Any] = {"exchanges": [e.to_dict() for e in made], "left": arb.board(),
                              "ledger": arb.ledger_view()}
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
        return 0
    print(f"{len(made)} exchange(s) matched by policy {arb.policy.name}:")
    for e in made:
        legs = "; ".join(f"{g.lender} -> {g.borrower}: {g.cells}" for g in e.legs)
        print(f"  {e.id} [{_clock(e.start)}, {_clock(e.end)}) {legs}{' (spatial)' if e.spatial else ''}")
    left = result["left"]
    print(f"left on the board: {len(left['offers'])} offer(s), {len(left['requests'])} request(s)")
    print(_ledger_table(result["ledger"]))
    return 0
