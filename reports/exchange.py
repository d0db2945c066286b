"""Tables and plots of the cell-exchange reproduction (HiveD, earlier version, §5.4, Tables 4 and 5).

``main(argv)`` is what ``hived simulate --workload exchange`` runs: it calls
``hived.core.sim.exchange_experiment.run``, prints one table per VC
assignment (default = vc_nodes.csv shares, balanced = shares of requested
GPU-hours) with effective utilisation, the increase through exchanges, the
gain and the relative fluctuation (eq. 3), beside the paper's range, and
writes ``exchange_gain.png`` (gain per VC, both assignments) and
``exchange_ledger.png`` (GPU-hours contributed and consumed per VC).
"""
from __future__ import annotations

import argparse
import os
import sys

from hived.core.allox.workload import PHILLY
from hived.core.sim import exchange_experiment as E
from hived.reports.staged_run import run_with_stages, write_outputs

TITLE = {"default": "Table 4 (default assignment)", "balanced": "Table 5 (balanced assignment)"}


def format_tables(res: E.Result) -> str:
    c = res.config
    out = [f"Cell exchange on Philly {c.start} .. {c.end} ({res.span_h:.0f} h): {res.total_gpus} GPUs in 8-GPU cells, "
           f"mean demand {c.load:.0%} of them, {c.window_h:g} h windows, policy {c.policy}"]
    for a, ar in res.results.items():
        paper = E.PAPER_T4 if a == "default" else E.PAPER_T5
        gains = sorted((v[2] for v in paper.values()), reverse=True)
        out += ["", f"{TITLE[a]}: {ar.exchanges} exchanges, {ar.failed} refused by the allocator",
                f"{'VC':<8}{'GPUs':>6}{'effective':>11}{'increase':>10}{'gain':>8}{'RF':>6}{'on borrowed':>13}"
                f"{'contrib h':>11}{'consumed h':>12}{'surplus h':>11}{'preempted':>10}{'wait h':>14}"]
        for r in ar.rows:
            out.append(f"{r.vc:<8}{r.gpus:>6}{r.effective:>11.1%}{r.increase:>10.1%}{r.gain:>8.1%}{r.rf:>6.2f}"
                       f"{r.borrowed_used:>13.1%}{r.contributed_h:>11.0f}{r.consumed_h:>12.0f}{r.surplus_h:>11.0f}"
                       f"{r.preempted:>10}{f'{r.wait_h_before:.1f}->{r.wait_h_after:.1f}':>14}")
        ours = [r.gain for r in ar.rows]
        over10 = sum(g > 0.10 for g in ours)
        out.append(f"ours: gain up to {max(ours):.1%}, {over10} of {len(ours)} VCs above 10%; "
                   f"paper: up to {gains[0]:.1f}%, {sum(g > 10 for g in gains)} of {len(gains)} above 10%")
    return "\n".join(out)


def plot(res: E.Result, out_dir: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    paths = []
    names = sorted({r.vc for ar in res.results.values() for r in ar.rows})
    fig, ax = plt.subplots(figsize=(8, 3.5))
    width = 0.8 / max(len(res.results), 1)
    for n, (a, ar) in enumerate(res.results.items()):
        g = {r.vc: r.gain * 100 for r in ar.rows}
        ax.bar([i + n * width for i in range(len(names))], [g.get(v, 0) for v in names], width, label=a)
    ax.set_xticks([i + width * (len(res.results) - 1) / 2 for i in range(len(names))])
    ax.set_xticklabels(names, rotation=45, fontsize=8)
    ax.set_ylabel("gain in guaranteed utilisation [%]")
    ax.set_title("Cell exchange gain per VC (HiveD, earlier version, Tables 4/5)")
    ax.legend()
    fig.tight_layout()
    paths.append(os.path.join(out_dir, "exchange_gain.png"))
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    fig, axes = plt.subplots(1, len(res.results), figsize=(4.5 * len(res.results), 3.5), squeeze=False)
    for ax, (a, ar) in zip(axes[0], res.results.items()):
        rows = sorted(ar.rows, key=lambda r: r.vc)
        x = range(len(rows))
        ax.bar([i - 0.2 for i in x], [r.contributed_h for r in rows], 0.4, label="contributed")
        ax.bar([i + 0.2 for i in x], [r.consumed_h for r in rows], 0.4, label="consumed")
        ax.set_xticks(list(x))
        ax.set_xticklabels([r.vc for r in rows], rotation=45, fontsize=8)
        ax.set_ylabel("GPU-hours")
        ax.set_title(f"ledger, {a} assignment")
        ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(os.path.join(out_dir, "exchange_ledger.png"))
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths


def build_parser(prog: str = "hived simulate --workload exchange") -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", choices=["exchange"], default="exchange", help=argparse.SUPPRESS)
    g = ap.add_argument_group("exchange workload (HiveD, earlier version, §5.4)")
    g.add_argument("--start", default="2017-10-01", help="first day replayed (default 2017-10-01)")
    g.add_argument("--end", default="2017-12-15", help="day the replay stops (default 2017-12-15)")
    g.add_argument("--window-h", dest="window_h", type=float, default=10.0, help="exchange window, hours (default 10)")
    g.add_argument("--load", type=float, default=0.5, help="mean demand / cluster GPUs (default 0.5)")
    g.add_argument("--policy", default="balanced", help="exchange policy: balanced (default) or first_fit")
    g.add_argument("--assignments", default="default,balanced", help="comma list of default, balanced")
    g.add_argument("--trace", default=PHILLY, help="philly_jobs.csv.gz")
    g.add_argument("--vc-nodes", dest="vc_nodes", default=E.VC_NODES, help="vc_nodes.csv (default assignment)")
    g.add_argument("--plots", default="exchange-plots", help="folder for the PNG plots (default ./exchange-plots)")
    g.add_argument("--no-plots", dest="plots", action="store_const", const=None, help="write no plots")
    g.add_argument("--json", dest="json_out", default=None, help="write the results as JSON here")
    g.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar (stderr)")
    return ap


def main(argv: list[str] | None = None, out=None) -> int:
    out = out or sys.stdout
    args = build_parser().parse_args(argv)
    try:
        cfg = E.Config(start=args.start, end=args.end, window_h=args.window_h, load=args.load, policy=args.policy,
                       assignments=[a.strip() for a in args.assignments.split(",") if a.strip()],
                       trace=args.trace, vc_nodes=args.vc_nodes)
        cfg.check()
        res = run_with_stages(E.run, cfg, 2 * len(cfg.assignments), args.progress)
    except (ValueError, FileNotFoundError) as exc:
        print(f"hived simulate --workload exchange: {exc}", file=sys.stderr)
        return 2
    write_outputs(res, format_tables(res), plot, args.plots, args.json_out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
