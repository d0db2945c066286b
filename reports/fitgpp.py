"""Tables and plots of the FitGpp reproduction (FitGpp, OpML '19, Tables 1-4, Fig. 3 and 4).

``main(argv)`` is what ``hived simulate --workload fitgpp [options]`` runs:
it replays the paper's synthetic workload under FIFO, LRTP, RAND and FitGpp
(``hived.core.sim.fitgpp_experiment``) with a progress bar on stderr, prints
Tables 1-3 (and 4 with ``--cap inf``) beside the paper's numbers, writes the slowdown CDFs (Fig. 3) and,
with ``--s-sweep``, the sensitivity plot (Fig. 4) as PNG (matplotlib, Agg),
and with ``--json`` the summary.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

from hived.core.sim import fitgpp_experiment as E

# FitGpp (OpML '19), Table 1 (slowdown percentiles 50/95/99), Table 2 (re-scheduling
# intervals, minutes, 50/75/95/99) and Table 3 (share of preempted jobs, P = 1).
PAPER_T1 = {
    "fifo": ([9.38, 33.4, 48.5], [2.78, 4.89, 8.21]),
    "lrtp": ([1.00, 1.17, 1.58], [3.78, 7.25, 12.5]),
    "rand": ([1.00, 1.17, 1.58], [3.87, 7.49, 12.9]),
    "fitgpp": ([1.00, 1.15, 1.54], [3.28, 6.06, 10.3]),
}
PAPER_T2 = {"lrtp": [4.0, 4.0, 5.0, 7.0], "rand": [4.0, 4.0, 6.0, 7.0], "fitgpp": [2.0, 2.0, 4.0, 6.0]}
PAPER_T3 = {"lrtp": 0.096, "rand": 0.097, "fitgpp": 0.0063}
PAPER_T4 = {"lrtp": [0.063, 0.012, 0.0034], "rand": [0.088, 0.0048, 0.00019], "fitgpp": [0.0052, 0.00038, 0.000098]}
LABEL = {"fifo": "FIFO", "lrtp": "LRTP", "rand": "RAND", "fitgpp": "FitGpp"}


def _f(x: float | None) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3g}"


def format_tables(res: E.ExperimentResult) -> str:
    """Tables 1-3 as text, ours and (in brackets) the paper's."""
    out = [f"FitGpp reproduction: {res.jobs} jobs, seed {res.seed}, {res.nodes} nodes, load {res.load:g} "
           f"({res.backend})", "",
           "Table 1: slowdown percentiles, ours [paper]",
           f"{'policy':<14}{'TE 50th':>16}{'TE 95th':>16}{'TE 99th':>16}{'BE 50th':>16}{'BE 95th':>16}{'BE 99th':>16}"]
    for p, r in res.results.items():
        ours = r.percentiles("te") + r.percentiles("be")
        paper = sum(PAPER_T1.get(p, ([None] * 3, [None] * 3)), [])
        name = LABEL[p] + (f" (s={r.s:g})" if p == "fitgpp" else "")
        out.append(f"{name:<14}" + "".join(f"{_f(o) + ' [' + _f(q) + ']':>16}" for o, q in zip(ours, paper)))
    if "fifo" in res.results and "fitgpp" in res.results:
        fifo, fit = res.results["fifo"], res.results["fitgpp"]
        te_cut = 1 - fit.percentiles("te")[1] / fifo.percentiles("te")[1]
        be_up = fit.percentiles("be")[0] / fifo.percentiles("be")[0] - 1
        out.append(f"FitGpp vs FIFO: TE 95th {te_cut:+.1%} cut [paper 96.6%], BE median {be_up:+.1%} [paper +18.0%]")
    out += ["", "Table 2: re-scheduling intervals [min] (preemption signal -> restart), ours [paper]",
            f"{'policy':<14}{'50th':>14}{'75th':>14}{'95th':>14}{'99th':>14}"]
    for p, r in res.results.items():
        if p == "fifo":
            continue
        out.append(f"{LABEL[p]:<14}" + "".join(f"{_f(o) + ' [' + _f(q) + ']':>14}"
                                               for o, q in zip(r.interval_percentiles(), PAPER_T2.get(p, [None] * 4))))
    cap = _f(next(iter(res.results.values())).cap) if res.results else 1
    out += ["", f"Table 3: share of preempted jobs (P = {cap}), ours [paper, P = 1]"]
    for p, r in res.results.items():
        if p == "fifo":
            continue
        share = PAPER_T3.get(p)
        out.append(f"{LABEL[p]:<14}{r.preempted_share:>10.2%}  [{share:.2%}]   preemptions {r.preemptions}, "
                   f"fallbacks {r.fallbacks}")
    if any(math.isinf(r.cap) for r in res.results.values()):
        out += ["", "Table 4: share of jobs preempted N times (P = inf), ours [paper]",
                f"{'policy':<14}{'1':>20}{'2':>20}{'>= 3':>20}"]
        for p, r in res.results.items():
            if p == "fifo":
                continue
            paper = PAPER_T4.get(p, [None] * 3)
            out.append(f"{LABEL[p]:<14}" + "".join(
                f"{f'{k / r.jobs:.2%} [{q:.2%}]':>20}" for k, q in zip(r.times_preempted, paper)))
    if res.sweep:
        out += ["", "Fig. 4: FitGpp slowdown percentiles vs s",
                f"{'s':>6}{'TE 50':>9}{'TE 95':>9}{'TE 99':>9}{'BE 50':>9}{'BE 95':>9}{'BE 99':>9}{'preempted':>11}"]
        for r in res.sweep:
            out.append(f"{r.s:>6g}" + "".join(f"{_f(x):>9}" for x in r.percentiles("te") + r.percentiles("be"))
                       + f"{r.preempted_share:>10.2%}")
    return "\n".join(out)


def plot(res: E.ExperimentResult, out_dir: str) -> list[str]:
    """CDFs of TE and BE slowdowns per policy (Fig. 3) and, with a sweep, Fig. 4. Returns the paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    os.makedirs(out_dir, exist_ok=True)
    paths = []
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, which, title in ((axes[0], "te_slowdown", "TE jobs"), (axes[1], "be_slowdown", "BE jobs")):
        for p, r in res.results.items():
            data = np.sort(np.asarray(getattr(r, which)))
            if data.size:
                ax.plot(data, np.arange(1, data.size + 1) / data.size, label=LABEL[p])
        ax.set_xscale("log")
        ax.set_xlabel("slowdown (1 + wait / exec)")
        ax.set_ylabel("CDF")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(f"Slowdown CDFs, {res.jobs} jobs, load {res.load:g}")
    fig.tight_layout()
    path = os.path.join(out_dir, "fitgpp_cdf.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    paths.append(path)
    if res.sweep:
        s = [r.s for r in res.sweep]
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for ax, which, title in ((axes[0], "te", "TE jobs"), (axes[1], "be", "BE jobs")):
            pct = np.array([r.percentiles(which) for r in res.sweep])
            for k, q in enumerate((50, 95, 99)):
                ax.plot(s, pct[:, k], marker="o", label=f"{q}th")
            ax.set_xlabel("s (weight of the grace period, eq. 3)")
            ax.set_ylabel("slowdown")
            ax.set_title(title)
            ax.grid(True, alpha=0.3)
            ax.legend()
        fig.suptitle("FitGpp sensitivity to s (paper Fig. 4)")
        fig.tight_layout()
        path = os.path.join(out_dir, "fitgpp_s_sweep.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


DEFAULT_SWEEP = "0,0.5,1,2,4,8,16"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``hived simulate --workload fitgpp``."""
    g = parser.add_argument_group("fitgpp workload (FitGpp, OpML '19)")
    g.add_argument("--jobs", type=int, default=None, help="number of jobs (default 65536 = 2^16, as the paper)")
    g.add_argument("--seed", type=int, default=None, help="workload and RAND seed (default 0)")
    g.add_argument("--policies", default=None, help="comma list of fifo,lrtp,rand,fitgpp (default all)")
    g.add_argument("--s", dest="s", type=float, default=None, help="FitGpp weight s of eq. 3 (default 4.0)")
    g.add_argument("--cap", type=float, default=None, help="preemption cap P per BE job (default 1; 'inf' for none)")
    g.add_argument("--s-sweep", dest="s_sweep", nargs="?", const=DEFAULT_SWEEP, default=None,
                   help=f"also run FitGpp for each s in this comma list and plot Fig. 4 "
                        f"(no value: {DEFAULT_SWEEP})")
    g.add_argument("--load", type=float, default=None, help="cluster load kept under FIFO (default 2.0)")
    g.add_argument("--nodes", type=int, default=None, help="nodes of 32 CPUs, 256 GB, 8 GPUs (default 84)")
    g.add_argument("--rand-repeats", dest="rand_repeats", type=int, default=None,
                   help="RAND runs with different seeds, pooled (paper: 4; default 1)")
    g.add_argument("--backend", choices=["model", "engine", "engine-hived"], default=None,
                   help="model: the paper's minute-tick simulator (default); engine: the same workload "
                        "through hived's Engine, quota allocator and registered policies; engine-hived: "
                        "the Engine with HiveD's buddy cell allocator")
    g.add_argument("--plots", default="fitgpp-plots",
                   help="folder for the CDF and s-sweep plots, PNG (default ./fitgpp-plots)")
    g.add_argument("--no-plots", dest="plots", action="store_const", const=None, help="write no plots")
    g.add_argument("--json", dest="json_out", default=None, help="write the summary as JSON to this file")
    g.add_argument("--no-progress", dest="progress", action="store_false",
                   help="no progress bar (it is drawn on stderr)")


def _run_with_progress(cfg: E.Config, show: bool) -> E.ExperimentResult:
    """The experiment with a tqdm bar over all finished jobs of all replays."""
    if not show:
        return E.run(cfg)
    from tqdm import tqdm

    with tqdm(total=cfg.jobs * cfg.simulations, unit="job", unit_scale=True, file=sys.stderr,
              dynamic_ncols=True, mininterval=0.5) as bar:
        return E.run(cfg, on_stage=bar.set_description_str, tick=bar.update)


def cli(args: argparse.Namespace, out=None) -> int:
    out = out or sys.stdout
    try:
        cfg = E.config_from(args)
    except ValueError as exc:
        print(f"hived simulate: {exc}", file=sys.stderr)
        return 2
    res = _run_with_progress(cfg, bool(getattr(args, "progress", False)))
    print(format_tables(res), file=out)
    plots_dir: str | None = getattr(args, "plots", None)
    if plots_dir:
        for p in plot(res, plots_dir):
            print(f"wrote {p}", file=out)
    json_out = getattr(args, "json_out", None)
    if json_out:
        with open(json_out, "w") as fh:
            json.dump(res.to_dict(), fh, indent=2)
        print(f"wrote {json_out}", file=out)
    return 0


def build_parser(prog: str = "hived simulate --workload fitgpp") -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    # accepted so that the whole `simulate` command line may be passed through
    ap.add_argument("--workload", choices=["fitgpp"], default="fitgpp", help=argparse.SUPPRESS)
    add_arguments(ap)
    return ap


def main(argv=None) -> int:
    """``hived simulate --workload fitgpp [options]`` (also ``python -m hived.reports.fitgpp``)."""
    return cli(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
