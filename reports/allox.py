"""Tables and plots of the AlloX reproduction (AlloX, EuroSys '20, Fig. 13 and Fig. 16).

``main(argv)`` is what ``hived simulate --workload allox`` runs: it calls
``hived.core.sim.allox_experiment.run``, prints the policies' average
completion times beside the paper's relative cuts, the alpha sweep, and
writes two plots (matplotlib, Agg): ``allox_policies.png`` (average
completion per policy) and ``allox_alpha.png`` (completion time and
progress spread against alpha, with ES and SRPT as references).
"""
from __future__ import annotations

import argparse
import os
import sys

from hived.core.allox.workload import PHILLY
from hived.core.sim import allox_experiment as E
from hived.reports.staged_run import run_with_stages, write_outputs

LABEL = {"es": "ES", "drff": "DRFF", "drfs": "DRFS", "drfa": "DRFA", "jsq+": "JSQ+", "sjf+": "SJF+",
         "allox+": "AlloX+", "allox": "AlloX", "srpt": "SRPT"}


def format_tables(res: E.Result) -> str:
    c = res.config
    out = [f"AlloX reproduction: {c.jobs} Philly 1-GPU jobs, {c.users} users, {c.gpus} GPUs + {c.cpus} CPUs, "
           f"load {c.load:g}, estimate error {c.error:.0%}, seed {c.seed}; CPU time = GPU time x U[1.8, 10] "
           f"(mean speedup {res.mean_speedup:.2f})", "",
           f"{'policy':<12}{'avg JCT [min]':>15}{'longest 1% [min]':>18}{'GPU util':>10}{'CPU util':>10}"
           f"{'on CPU':>8}{'progress sd':>13}{'AlloX cut':>11}{'paper cut':>11}"]
    for p, r in res.rows.items():
        cut = f"{res.cut(p):.0%}" if "allox" in res.rows and p not in ("allox",) else "-"
        paper = f"{E.PAPER_CUT[p]:.0%}" if p in E.PAPER_CUT else "-"
        name = LABEL.get(p, p) + (f" a={c.alpha:g}" if p == "allox" else "")
        out.append(f"{name:<12}{r.avg_completion_min:>15.1f}{r.longest1_min:>18.1f}{r.gpu_util:>10.1%}"
                   f"{r.cpu_util:>10.1%}{r.on_cpu:>8.0%}{r.progress_std:>13.4f}{cut:>11}{paper:>11}")
    if "allox" in res.rows and "srpt" in res.rows:
        gap = res.rows["allox"].avg_completion_min / res.rows["srpt"].avg_completion_min - 1
        out.append(f"AlloX vs SRPT: {gap:+.0%} [paper +{E.PAPER_SRPT_GAP:.0%}]")
    if res.sweep:
        out += ["", "Fig. 16: AlloX against alpha (smaller = fairer)",
                f"{'alpha':>6}{'avg JCT [min]':>15}{'progress sd':>13}"]
        for r in res.sweep:
            out.append(f"{r.policy.split('=')[1].rstrip(')'):>6}{r.avg_completion_min:>15.1f}{r.progress_std:>13.4f}")
    return "\n".join(out)


def plot(res: E.Result, out_dir: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    paths = []
    names = list(res.rows)
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.bar([LABEL.get(n, n) for n in names], [res.rows[n].avg_completion_min for n in names],
           color=["tab:red" if n == "allox" else "tab:gray" for n in names])
    ax.set_ylabel("average completion time [min]")
    ax.set_title(f"AlloX vs baselines ({res.config.jobs} Philly jobs, {res.config.gpus} GPUs + {res.config.cpus} CPUs)")
    fig.tight_layout()
    paths.append(os.path.join(out_dir, "allox_policies.png"))
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    if res.sweep:
        alphas = [float(r.policy.split("=")[1].rstrip(")")) for r in res.sweep]
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.plot(alphas, [r.avg_completion_min for r in res.sweep], "o-", color="tab:red", label="AlloX")
        for ref, style in (("es", "--"), ("srpt", ":")):
            if ref in res.rows:
                ax.axhline(res.rows[ref].avg_completion_min, ls=style, color="k", label=LABEL[ref])
        ax.set_xlabel("alpha (fairness knob; smaller = fairer)")
        ax.set_ylabel("average completion time [min]")
        ax2 = ax.twinx()
        ax2.plot(alphas, [r.progress_std for r in res.sweep], "s--", color="tab:blue", label="progress sd")
        ax2.set_ylabel("std of users' progress", color="tab:blue")
        ax.legend(loc="upper center", fontsize=8)
        ax.set_title("Fig. 16: performance vs fairness")
        fig.tight_layout()
        paths.append(os.path.join(out_dir, "allox_alpha.png"))
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths


def _floats(text: str, what: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{what}: expected a comma list of numbers, got {text!r}") from None


def build_parser(prog: str = "hived simulate --workload allox") -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", choices=["allox"], default="allox", help=argparse.SUPPRESS)
    g = ap.add_argument_group("allox workload (AlloX, EuroSys '20)")
    g.add_argument("--jobs", type=int, default=1000, help="Philly 1-GPU jobs to replay (default 1000)")
    g.add_argument("--load", type=float, default=1.2, help="GPU work offered / GPU capacity (default 1.2)")
    g.add_argument("--gpus", type=int, default=20, help="GPUs (default 20, as the paper's simulator)")
    g.add_argument("--cpus", type=int, default=20, help="CPUs of 20 cores (default 20)")
    g.add_argument("--users", type=int, default=10, help="users (default 10)")
    g.add_argument("--seed", type=int, default=0, help="speedups, users and estimate errors (default 0)")
    g.add_argument("--error", type=float, default=0.1, help="relative estimate error sd (default 0.1)")
    g.add_argument("--alpha", type=float, default=0.1, help="AlloX fairness knob for the comparison (default 0.1)")
    g.add_argument("--alphas", default=",".join(f"{a:g}" for a in E.ALPHAS),
                   help="alpha sweep, comma list ('' for none)")
    g.add_argument("--policies", default=",".join(E.POLICIES), help="comma list (default all)")
    g.add_argument("--timeout-h", dest="timeout_h", type=float, default=4.0, help="AlloX+ starvation timeout, hours")
    g.add_argument("--start", default="2017-10-10", help="first trace day used (default 2017-10-10)")
    g.add_argument("--trace", default=PHILLY, help="philly_jobs.csv.gz")
    g.add_argument("--plots", default="allox-plots", help="folder for the PNG plots (default ./allox-plots)")
    g.add_argument("--no-plots", dest="plots", action="store_const", const=None, help="write no plots")
    g.add_argument("--json", dest="json_out", default=None, help="write the results as JSON here")
    g.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar (stderr)")
    return ap


def main(argv: list[str] | None = None, out=None) -> int:
    out = out or sys.stdout
    args = build_parser().parse_args(argv)
    try:
        cfg = E.Config(jobs=args.jobs, load=args.load, gpus=args.gpus, cpus=args.cpus, users=args.users,
                       seed=args.seed, error=args.error, alpha=args.alpha, alphas=_floats(args.alphas, "--alphas"),
                       policies=[p.strip() for p in args.policies.split(",") if p.strip()],
                       timeout_h=args.timeout_h, start=args.start, trace=args.trace)
        cfg.check()
        res = run_with_stages(E.run, cfg, E.stages(cfg), args.progress)
    except (ValueError, FileNotFoundError) as exc:
        print(f"hived simulate --workload allox: {exc}", file=sys.stderr)
        return 2
    write_outputs(res, format_tables(res), plot, args.plots, args.json_out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
