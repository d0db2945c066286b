"""``hived simulate``: replay a trace through the scheduler engine, or run a named workload.

Trace replay (sharing safety, HiveD (OSDI '20) §5.2-5.3)::

    hived simulate --trace philly --scheme all --out runs/philly --load 0.9
    hived simulate --trace jobs.csv --spec cluster.yaml --scheme hived --out runs/x

Named workloads are the papers' experiments (FitGpp, AlloX, cell exchange): ``--workload NAME ARGS...``
hands ``ARGS`` to ``hived.reports.NAME.main`` (e.g. ``fitgpp``,
``allox``, ``exchange``).
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from hived.core.sim.traces import PHILLY_DIR as PHILLY_DEFAULT  # the trace shipped with hived

RUNS = {"private": ("private", "node"), "private-quota": ("private-quota", "node"), "quota": ("quota", "node"),
        "hived": ("hived", None), "hived-static": ("hived-static", None)}


def register(subparsers, summary: str) -> None:
    p = subparsers.add_parser(
        "simulate", help=summary, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trace", metavar="T",
                   help="'philly' (the Philly trace), a Philly .csv.gz/folder, "
                        "'table1' (synthetic, HiveD (OSDI '20) Table 1) "
                        "or a CSV in our format (docs/simulator.md)")
    p.add_argument("--spec", metavar="S", help="cluster spec whose VCs are the trace's tenants "
                                               "(default: a cluster sized by --load, quotas by GPU-hours)")
    p.add_argument("--scheme", default="all",
                   help="private|quota|hived|hived-static, a comma list, or 'all' (default: all, both cell kinds)")
    p.add_argument("--cells", choices=("multi", "node"), default=None,
                   help="VC cells for hived: node-level only or multi-level "
                        "(default: both with --scheme all, else node)")
    p.add_argument("--out", metavar="DIR", help="output folder (CSV, JSON, PNG); required with --trace")
    p.add_argument("--load", type=float, default=0.9, help="offered load that sizes the cluster (default 0.9)")
    p.add_argument("--nodes", type=int, default=None,
                   help="cluster size in 8-GPU nodes instead of --load (refused when the quotas need more)")
    p.add_argument("--preemption", choices=("none", "fitgpp", "lrtp", "rand"), default="none",
                   help="preemption policy among a VC's own jobs: TE jobs preempt BE jobs (default none)")
    p.add_argument("--max-preemptions", type=int, default=None, metavar="P",
                   help="the preemption cap P (default 1; a spec VC's maxPreemptions overrides it)")
    p.add_argument("--backfill", choices=("off", "on"), default="off",
                   help="on: later jobs pass a blocked VC head that holds a reservation, from the trace's "
                        "durations (docs/engine.md); default off, HiveD's FIFO")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="only the first N jobs of the trace")
    p.add_argument("--scale", type=float, default=0.05, help="table1: share of the 141,950 jobs (default 0.05)")
    p.add_argument("--days", type=float, default=None,
                   help="table1: days of arrivals (default 14); other traces: keep only this many days "
                        "of submissions from --from-day")
    p.add_argument("--from-day", type=float, default=0.0, help="skip the trace's first D days (default 0)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tenants", metavar="T1,T2", default=None, help="only these tenants' jobs")
    p.add_argument("--shares", metavar="T=W,...|whole", default=None,
                   help="quota shares per tenant (weights), or 'whole': each tenant's share of the GPU-hours "
                        "of the whole trace before --tenants/--from-day/--days/--limit (default: of the replayed jobs)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--workload", nargs=argparse.REMAINDER, metavar="NAME ARGS",
                   help="run hived.reports.NAME.main(ARGS) instead (e.g. fitgpp, allox, exchange)")
    p.set_defaults(func=run)


def _fail(msg: str) -> int:
    print(f"hived simulate: {msg}", file=sys.stderr)
    return 2


def run_workload(argv: list) -> int:
    name, rest = argv[0], list(argv[1:])
    if name == "trace":  # the trace replay itself, with its own options
        parser = argparse.ArgumentParser(prog="hived")
        register(parser.add_subparsers(), "replay a trace")
        args = parser.parse_args(["simulate", *rest])
        return run(args) if not args.workload else _fail("--workload trace: nested --workload")
    if not name.replace("_", "").isalnum():
        return _fail(f"--workload: bad name {name!r}")
    try:
        mod = importlib.import_module(f"hived.reports.{name}")
    except ModuleNotFoundError as e:
        if e.name == f"hived.reports.{name}":
            return _fail(f"--workload: no workload named {name!r} (no module hived.reports.{name})")
        raise
    if not hasattr(mod, "main"):
        return _fail(f"--workload: hived.reports.{name} has no main(argv)")
    return int(mod.main(rest) or 0)


def load_trace(args):
    from hived.core.sim import generator
    from hived.core.sim.traces import read_csv, read_philly
    t = args.trace
    if t == "table1":
        return generator.generate(scale=args.scale, days=args.days or 14.0, seed=args.seed).head(args.limit)
    if t == "philly":
        tr = read_philly(PHILLY_DEFAULT)
    elif t.endswith(".csv.gz") or (not t.endswith(".csv") and os.path.isdir(t)):
        tr = read_philly(t)
    else:
        tr = read_csv(t)
    args.whole_gpu_seconds = tr.gpu_seconds()
    if args.tenants:
        tr = tr.only([x.strip() for x in args.tenants.split(",") if x.strip()])
    if args.from_day or args.days:
        tr = tr.window(args.from_day, args.days)
    return tr.head(args.limit)


def parse_shares(args, trace):
    """--shares: None (GPU-hours of the replayed jobs), 'whole', or T=W pairs naming every tenant."""
    if not args.shares:
        return None
    if args.shares == "whole":
        whole = getattr(args, "whole_gpu_seconds", None) or trace.gpu_seconds()
        return {t: whole.get(t, 0.0) for t in trace.tenants}
    out = {}
    for part in args.shares.split(","):
        name, eq, w = part.partition("=")
        try:
            weight = float(w)
        except ValueError:
            weight = -1.0
        if not eq or not name.strip() or not weight > 0:
            raise ValueError(f"--shares: {part!r} must be TENANT=WEIGHT with WEIGHT > 0")
        out[name.strip()] = weight
    return out


def plan(args) -> list:
    """[(scheme, cells)] to run."""
    names = list(RUNS) if args.scheme == "all" else [s.strip() for s in args.scheme.split(",") if s.strip()]
    bad = [n for n in names if n not in RUNS]
    if bad or not names:
        raise ValueError(f"--scheme: unknown {bad or names}; choose from {', '.join(RUNS)} or all")
    out = []
    for n in names:
        scheme, cells = RUNS[n]
        if cells is not None:
            out.append((scheme, cells))
        elif args.cells:
            out.append((scheme, args.cells))
        elif args.scheme == "all" and scheme == "hived":
            out += [(scheme, "node"), (scheme, "multi")]
        else:
            out.append((scheme, "node"))
    return out


def run(args) -> int:
    if args.workload:
        return run_workload(args.workload)
    if args.workload is not None:
        return _fail("--workload: give a NAME")
    if not args.trace:
        return _fail("give --trace T (or --workload NAME)")
    if not args.out:
        return _fail("give --out DIR")
    if args.limit is not None and args.limit < 1:
        return _fail(f"--limit: must be >= 1, got {args.limit}")
    if args.nodes is None and not (0 < args.load <= 10):
        return _fail(f"--load: must be in (0, 10], got {args.load}")
    from tqdm import tqdm

    from hived.core.sim.schemes import size_cluster, sizing_from_spec
    from hived.core.sim.simulate import simulate
    from hived.core.sim.traces import TraceError
    from hived.core.spec import SpecError, load_spec
    from hived.reports.sharing import run_name, write_comparison, write_run
    try:
        runs = plan(args)
        trace = load_trace(args)
        if not trace.jobs:
            filters = [f for f, v in (("--tenants", args.tenants), ("--from-day", args.from_day),
                                      ("--days", args.days), ("--limit", args.limit)) if v]
            return _fail(f"--trace: no jobs in {args.trace}" + (
                f" after the filters {', '.join(filters)}" if filters and args.trace != "table1" else ""))
        spec = None
        if args.spec and args.nodes is not None:
            return _fail("--nodes: the cluster is the one in --spec; give one of --spec and --nodes")
        if args.max_preemptions is not None and args.max_preemptions < 0:
            return _fail(f"--max-preemptions: must be >= 0, got {args.max_preemptions}")
        if args.spec:
            load_spec(args.spec)  # refuse a bad spec before any run
            spec = args.spec
            sizing = sizing_from_spec(spec, trace)
        else:
            sizing = size_cluster(trace, args.load, nodes=args.nodes, shares=parse_shares(args, trace))
    except (TraceError, SpecError, ValueError, OSError) as e:
        return _fail(str(e))
    for w in trace.warnings:
        print(f"warning: {w}", file=sys.stderr)
    print(f"{len(trace.jobs)} jobs, {len(trace.tenants)} tenants, {sizing.nodes} nodes x 8 GPUs, "
          + ("no offered load (under 20 jobs or one submit time: too short to have one)" if sizing.load is None
             else f"offered load {sizing.load:.2f}"), file=sys.stderr)
    from hived.core.engine import EngineConfig
    config = EngineConfig(backfill=args.backfill == "on", backfill_estimates="oracle")
    if args.max_preemptions is not None:
        config.preemption_cap = args.max_preemptions
    results = {}
    for scheme, cells in runs:
        plain = scheme in ("private", "private-quota", "quota")
        bar = tqdm(total=len(trace.jobs), desc=f"{scheme}{'' if plain else '/' + cells}",
                   unit="job", file=sys.stderr, disable=args.no_progress, mininterval=0.5)
        try:
            r = simulate(trace, scheme, cells=cells, sizing=sizing, spec=spec, progress=bar.update,
                         preemption_policy=args.preemption, config=config)
        except (SpecError, ValueError) as e:
            bar.close()
            return _fail(f"{scheme}: {e}")
        bar.close()
        results[run_name(r)] = r
        s = write_run(r, args.out)
        print(f"{run_name(r)}: avg queueing delay {s['avg_queue_delay_s'] / 60:.1f} min, "
              f"preempted GPUs {s['preempted_gpus']}, idle while a job fit {s['idle_gpu_hours_job_fits']:g} "
              f"GPU-h, {s['wall_s']:.1f} s ({s['jobs_per_s']} jobs/s)")
        if s["refused"]:
            print(f"{run_name(r)}: {s['refused']} job(s) refused, left out of every average "
                  f"(e.g. {s['refused_examples'][0]})")
        if s["guarantee_breach_rounds"]:
            print(f"{run_name(r)}: {s['guarantee_breach_jobs']} job(s) headed their VC's queue with room in its "
                  f"free cells and waited ({s['guarantee_breach_rounds']} rounds)")
    doc = write_comparison(results, args.out)
    for name, bad in doc["anomalies"].items():
        print(f"{name}: {len(bad)} tenant(s) wait longer than in their private cluster"
              + (f": {', '.join(bad)}" if bad else ""))
    print(f"wrote {args.out}/summary.json and plots")
    return 0
