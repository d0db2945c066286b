"""HTML for the dashboards, from the REST answers (pure functions, no widgets).

Every element the tests and the browser test look at carries a class and
``data-*`` attributes (node, gpu, vc, priority), so that what is asserted is
what a person sees, not an internal structure.
"""
from __future__ import annotations

import html
from collections.abc import Iterable

from hived.core.jobs import class_text

# one hue per VC (by sorted name); the shade says the priority
PALETTE = ["#268bd2", "#859900", "#d33682", "#b58900", "#6c71c4", "#2aa198", "#cb4b16", "#7f8c8d"]
PRIORITY_NAMES = {"te": "guaranteed TE", "be": "guaranteed BE", "opportunistic": "opportunistic"}


def esc(value) -> str:
    return html.escape("" if value is None else str(value))


def vc_colours(names: Iterable[str]) -> dict[str, str]:
    return {vc: PALETTE[i % len(PALETTE)] for i, vc in enumerate(sorted(set(names)))}


def priority_of(gpu: dict) -> str | None:
    """te / be / opportunistic for a held GPU, None when free."""
    if not gpu.get("vc") and not gpu.get("holder"):
        return None
    if gpu.get("opportunistic") or gpu.get("job_class") == "opportunistic":
        return "opportunistic"
    return gpu.get("job_class") or "te"


def gpu_style(colour: str, priority: str | None, healthy: bool) -> str:
    if priority is None:
        fill = "background:#eee8d5"
    elif priority == "opportunistic":   # hatched: low priority, preempted first
        fill = f"background:repeating-linear-gradient(45deg,{colour} 0 4px,#fdf6e3 4px 8px)"
    elif priority == "be":              # lighter: guaranteed but preemptible by TE
        fill = f"background:{colour};opacity:0.55"
    else:
        fill = f"background:{colour}"
    border = "2px solid #dc322f" if not healthy else "1px solid #93a1a1"
    return (f"{fill};border:{border};width:26px;height:26px;display:inline-flex;align-items:center;"
            f"justify-content:center;margin:1px;border-radius:3px;font:11px monospace;color:#002b36")


def picture_html(cluster: dict, colours: dict[str, str], highlight: str | None = None) -> str:
    """The physical cluster: one row per node, one square per GPU."""
    rows = []
    for chain_name, chain in sorted((cluster.get("chains") or {}).items()):
        rows.append(f'<div class="hived-chain" style="margin-top:4px"><b>{esc(chain_name)}</b> '
                    f'<span style="color:#657b83">({esc(chain.get("free_gpus"))} GPUs free)</span></div>')
        for node, info in sorted((chain.get("nodes") or {}).items()):
            cells = []
            for g in info.get("gpus") or []:
                vc, healthy, prio = g.get("vc"), g.get("healthy", True) is not False, priority_of(g)
                colour = colours.get(vc, "#93a1a1")
                dim = highlight and vc and vc != highlight
                title = (f"{node} GPU {g.get('index')}: " +
                         (f"{vc} {PRIORITY_NAMES.get(prio, prio)}" + (f" job {g['holder']}" if g.get("holder") else "")
                          if prio else "free") +
                         ("" if healthy else f"; UNHEALTHY: {g.get('problem') or 'bad GPU'}"))
                mark = "&#10007;" if not healthy else ""
                cells.append(
                    f'<span class="hived-gpu" data-node="{esc(node)}" data-gpu="{esc(g.get("index"))}" '
                    f'data-vc="{esc(vc or "")}" data-priority="{esc(prio or "free")}" '
                    f'data-healthy="{str(healthy).lower()}" title="{esc(title)}" '
                    f'style="{gpu_style(colour, prio, healthy)}{";filter:grayscale(0.8)" if dim else ""}">'
                    f'{mark}</span>')
            rows.append(f'<div class="hived-node" data-node="{esc(node)}" style="display:flex;align-items:center">'
                        f'<span style="width:90px;font:12px monospace">{esc(node)}</span>{"".join(cells)}</div>')
    return f'<div class="hived-picture">{"".join(rows)}</div>'


def legend_html(colours: dict[str, str]) -> str:
    items = [f'<span style="{gpu_style(c, "te", True)};width:14px;height:14px"></span>{esc(vc)}'
             for vc, c in colours.items()]
    items += [f'<span style="{gpu_style("#93a1a1", p, True)};width:14px;height:14px"></span>{esc(n)}'
              for p, n in (("te", "TE"), ("be", "BE"), ("opportunistic", "opportunistic"))]
    items.append(f'<span style="{gpu_style("#eee8d5", None, False)};width:14px;height:14px">&#10007;</span>unhealthy')
    return '<div class="hived-legend" style="font:12px sans-serif;display:flex;gap:10px;align-items:center">' \
           + " ".join(f"<span>{i}</span>" for i in items) + "</div>"


LEVEL_COLUMNS = ("total", "used", "free", "opportunistic", "borrowed", "lent", "unhealthy")
LEVEL_HEADERS = ("cells", "used", "free", "GPUs lent (opportunistic)", "borrowed (exchange)",
                 "lent (exchange)", "unhealthy")


TABLE_CSS = (".hived-vcs td,.hived-vcs th,.hived-jobs td,.hived-jobs th{padding:2px 8px;text-align:left;"
             "border-bottom:1px solid #eee8d5}")


def vc_table_html(vcs: dict, colours: dict[str, str]) -> str:
    """Per VC and level: its cells and what happens to them; then its queue."""
    head = "".join(f"<th>{h}</th>" for h in ("VC", "level", *LEVEL_HEADERS, "GPUs used", "queued", "running"))
    body = []
    for name, doc in sorted(vcs.items()):
        view = doc.get("view") or {}
        levels = sorted((view.get("levels") or {}).items(), key=lambda kv: kv[0])
        first = True
        for key, lv in levels or [("-", {})]:
            label = f"{lv.get('cell_type', key)} ({lv.get('gpus_per_cell', '?')} GPUs)" if lv else "-"
            cols = "".join(f'<td data-col="{c}">{esc(lv.get(c, ""))}</td>' for c in LEVEL_COLUMNS)
            lead = (f'<td rowspan="{max(1, len(levels))}"><span style="color:{colours.get(name, "#000")}">'
                    f'&#9632;</span> <b>{esc(name)}</b></td>') if first else ""
            tail = (f'<td rowspan="{max(1, len(levels))}" data-col="gpus_used">{esc(doc.get("gpus_used"))}/'
                    f'{esc(doc.get("gpus_total"))}{esc(loan_note(doc))}</td>'
                    f'<td rowspan="{max(1, len(levels))}" data-col="queue">{len(doc.get("queue") or [])}</td>'
                    f'<td rowspan="{max(1, len(levels))}" data-col="running">{len(doc.get("running") or [])}</td>'
                    ) if first else ""
            body.append(f'<tr class="hived-vc-row" data-vc="{esc(name)}" data-level="{esc(key)}">{lead}'
                        f'<td>{esc(label)}</td>{cols}{tail}</tr>')
            first = False
    return (f"<style>{TABLE_CSS}</style>"
            f'<table class="hived-vcs" style="border-collapse:collapse;font:12px sans-serif">'
            f"<tr>{head}</tr>{''.join(body)}</table>")


def loan_note(doc: dict) -> str:
    """`` (spec 8: 4 lent)`` while cell exchange moved some of a VC's cells; empty otherwise."""
    lent, borrowed = doc.get("gpus_lent") or 0, doc.get("gpus_borrowed") or 0
    moved = ", ".join(t for t in (f"{lent} lent" if lent else "", f"{borrowed} borrowed" if borrowed else "") if t)
    return f" (spec {doc.get('gpus_spec', '?')}: {moved})" if moved else ""


def exchange_html(board: dict, ledger: dict | None) -> str:
    """The exchange panel: open posts, loans (pending and active exchanges), the GPU-hour ledger."""
    from hived.core.timefmt import clock
    posts = [p for key in ("offers", "requests") for p in board.get(key) or []]
    rows = "".join(
        f'<tr class="hived-post-row" data-id="{esc(p["id"])}" data-kind="{esc(p["kind"])}"><td>{esc(p["id"])}</td>'
        f'<td>{esc(p["kind"])}</td><td>{esc(p["vc"])}</td><td>{esc(p["count"])} x {esc(p["chain"])} level '
        f'{esc(p["level"])}</td><td>{esc(clock(p["start"]))}</td><td>{esc(clock(p["end"]))}</td></tr>'
        for p in posts)
    loans = [x for x in board.get("exchanges") or [] if x.get("state") in ("pending", "active")]
    loan_rows = "".join(
        f'<tr class="hived-loan-row" data-id="{esc(x["id"])}" data-state="{esc(x["state"])}"><td>{esc(x["id"])}</td>'
        f'<td>{esc(x["state"])}</td><td>'
        + esc("; ".join(f"{g['lender']} -> {g['borrower']} {g['count']} x {g['chain']} level {g['level']}"
                        for g in x["legs"]))
        + f'</td><td>{esc(clock(x["start"]))}</td><td>{esc(clock(x["end"]))}</td></tr>'
        for x in loans)
    out = ['<div class="hived-exchange" style="font:12px sans-serif"><b>cell exchange</b>',
           _table("hived-posts", ("post", "kind", "VC", "cells", "from", "to"), rows, "no open posts"),
           _table("hived-loans", ("exchange", "state", "cells", "from", "to"), loan_rows, "no loans")]
    if ledger is not None:
        led = "".join(f'<tr class="hived-ledger-row" data-vc="{esc(vc)}"><td>{esc(vc)}</td>'
                      f'<td>{e["contributed"]:.2f}</td><td>{e["consumed"]:.2f}</td><td>{e["surplus"]:.2f}</td></tr>'
                      for vc, e in sorted(ledger.items()))
        out.append(_table("hived-ledger", ("VC", "contributed h", "consumed h", "surplus h"), led, "no VCs"))
    return "".join(out) + "</div>"


def _table(cls: str, heads: tuple[str, ...], rows: str, empty: str) -> str:
    if not rows:
        return f'<div class="{cls}">{esc(empty)}</div>'
    head = "".join(f"<th>{esc(h)}</th>" for h in heads)
    return f'<table class="{cls}" style="font:12px monospace"><tr>{head}</tr>{rows}</table>'


def jobs_html(jobs: list[dict], title: str) -> str:
    from .widgets_job import STATE_COLOURS, elapsed, fmt_seconds, placement_text
    if not jobs:
        return f'<div class="hived-jobs"><b>{esc(title)}</b>: none</div>'
    rows = "".join(
        f'<tr class="hived-job-row" data-id="{esc(j["id"])}" data-state="{esc(j["state"])}">'
        f'<td>{esc(j["id"])}</td><td style="color:{STATE_COLOURS.get(j["state"], "#000")}">{esc(j["state"])}</td>'
        f'<td>{esc(j.get("queue_position") if j.get("queue_position") is not None else "")}</td>'
        f'<td>{esc(j["vc"])}</td><td>{esc(j["user"])}</td><td>{esc(class_text(j))}</td>'
        f'<td>{esc(j.get("gpus"))}</td><td>{esc(fmt_seconds(elapsed(j)))}</td>'
        f'<td>{esc(j.get("name") or "")}</td><td>{esc(placement_text(j))}</td>'
        f'<td class="hived-wait">{esc(j.get("wait_reason") or "")}</td></tr>'
        for j in jobs)
    head = "".join(f"<th>{h}</th>" for h in ("job", "state", "pos", "VC", "user", "class", "GPUs", "time",
                                             "name", "where", "waits because"))
    return (f'<div class="hived-jobs"><b>{esc(title)}</b><table style="font:12px monospace">'
            f"<tr>{head}</tr>{rows}</table></div>")
