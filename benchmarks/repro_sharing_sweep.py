"""Sweep of documented settings for the all-tenant Philly sharing-anomaly check.

For every (window, load) setting: all tenants of the Philly trace, quotas from
each VC's share of the WHOLE trace's GPU-hours (``--shares whole``), the
cluster sized for the offered load over the window (8-GPU nodes), schemes
private, quota and hived (node cells). Prints one row per setting: how many
tenants wait longer on average than in their private cluster under quota and
under hived, the worst ratio (shared / private average queueing delay), the
share of GPUs held by guaranteed jobs under quota (the paper's load, HiveD (OSDI '20) §5.2:
"around 90% of the GPUs are used by high-priority jobs"), and the jobs that
started at once in private but waited in the shared cluster with room in
their VC (head_waited_with_vc_room). ``--out`` writes the table as JSON and CSV.

    .venv/bin/python benchmarks/repro_sharing_sweep.py [--quick] [--out DIR] [--jobs 2]
    .venv/bin/python benchmarks/repro_sharing_sweep.py --windows 0: --loads 0.85 --figures DIR

``--figures DIR`` runs only the first setting given, in this process, and
writes the simulator's own outputs there (summary.json, per-job CSVs and the
plots of reports/sharing.py), the delay-over-time plot showing the
tenants that wait longer than in private first.

The runs are deterministic; ``--jobs`` runs that many simulations at once
(processes), default 2. ``--quick``: one 10-day window at load 0.9 (< 60 s).
"""
import argparse
import csv
import json
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor

WINDOWS = [(0, None), (0, 60), (25, 60), (49, 60), (0, 30), (20, 30), (40, 30), (60, 30), (79, 30)]
LOADS = [0.85, 0.9, 0.95]
QUICK = ([(60, 10)], [0.9])

_TRACE = None


def _trace():
    global _TRACE
    if _TRACE is None:
        from hived.cli.cmd_simulate import PHILLY_DEFAULT  # what `--trace philly` reads
        from hived.core.sim.traces import read_philly
        _TRACE = read_philly(PHILLY_DEFAULT)
    return _TRACE


def setting(window, load):
    """(trace of the window, sizing): whole-trace GPU-hour shares of the tenants present."""
    from hived.core.sim.schemes import size_cluster
    whole = _trace()
    tr = whole.window(*window) if window != (0, None) else whole
    gs = whole.gpu_seconds()
    return tr, size_cluster(tr, load, shares={t: gs[t] for t in tr.tenants})


def run_one(task):
    """One simulation; returns what the table needs (small: it crosses processes)."""
    from hived.core.sim.schemes import busy_bounds
    from hived.core.sim.simulate import simulate
    window, load, scheme = task
    tr, sz = setting(window, load)
    r = simulate(tr, scheme, cells="node", sizing=sz)
    lo, hi = busy_bounds(tr) or (float("-inf"), float("inf"))   # the window size_cluster sizes for
    g = [s for t, s in r.guaranteed if lo <= t <= hi]
    return {
        "task": task, "nodes": sz.nodes, "load": sz.load, "jobs": len(tr.jobs), "tenants": len(tr.tenants),
        "delays": r.tenant_delays(), "wall_s": r.wall_s,
        "at_once": [x["job_id"] for x in r.rows if x["queue_delay"] is not None and x["queue_delay"] <= 0],
        "waited": [x["job_id"] for x in r.rows if x["queue_delay"] is None or x["queue_delay"] > 0],
        "blocked": sum(1 for x in r.rows if x["head_waited_with_vc_room"]),
        "gshare": statistics.fmean(g) if g else None,
        "preempted_gpus": sum(p for _, p, _ in r.preempted),
    }


def compare(res: dict) -> dict:
    """One table row from the three runs of a setting."""
    from hived.reports.sharing import worse_than_private
    priv = res["private"]["delays"]
    row = {"nodes": res["private"]["nodes"], "offered_load": round(res["private"]["load"], 3),
           "jobs": res["private"]["jobs"], "tenants": res["private"]["tenants"]}
    at_once = set(res["private"]["at_once"])
    for s in ("quota", "hived"):
        d = res[s]["delays"]
        ratios = {t: d[t] / max(priv[t], 1.0) for t in d if t in priv}
        worse = {t: ratios[t] for t in worse_than_private(priv, d)}
        worst = max(ratios, key=ratios.get)
        row[f"{s}_worse"] = len(worse)
        row[f"{s}_worse_tenants"] = " ".join(f"{t}:{worse[t]:.2f}" for t in sorted(worse, key=worse.get,
                                                                                   reverse=True))
        row[f"{s}_worst"] = f"{worst}:{ratios[worst]:.2f}"
        row[f"{s}_worst_ratio"] = round(ratios[worst], 3)
        row[f"{s}_avg_delay_min"] = round(sum(d.values()) / len(d) / 60, 1)
        row[f"{s}_at_once_waited"] = len(at_once & set(res[s]["waited"]))
        row[f"{s}_head_waited_with_vc_room"] = res[s]["blocked"]
        row[f"{s}_guaranteed_share"] = round(res[s]["gshare"], 3) if res[s]["gshare"] is not None else None
        row[f"{s}_preempted_gpus"] = res[s]["preempted_gpus"]
    row["private_avg_delay_min"] = round(sum(priv.values()) / len(priv) / 60, 1)
    row["private_delay_min"] = {t: round(v / 60, 1) for t, v in priv.items()}
    row["quota_delay_min"] = {t: round(v / 60, 1) for t, v in res["quota"]["delays"].items()}
    row["hived_delay_min"] = {t: round(v / 60, 1) for t, v in res["hived"]["delays"].items()}
    return row


def label(window) -> str:
    a, n = window
    return "whole" if n is None else f"{a:g}-{a + n:g}"


COLS = ["window", "load", "nodes", "offered_load", "jobs", "quota_guaranteed_share", "quota_worse", "quota_worst",
        "hived_worse", "hived_worst", "quota_at_once_waited", "hived_at_once_waited",
        "quota_head_waited_with_vc_room", "hived_head_waited_with_vc_room"]


def figures(window, load, out_dir) -> int:
    """One setting's private, quota and hived runs, written with the simulator's report code."""
    from hived.core.sim.simulate import simulate
    from hived.reports.sharing import anomalies, run_name, write_comparison, write_run
    tr, sz = setting(window, load)
    results = {}
    for scheme in ("private", "quota", "hived"):
        r = simulate(tr, scheme, cells="node", sizing=sz)
        results[run_name(r)] = r
        write_run(r, out_dir)
    bad = anomalies(results)
    worse = sorted({t for per in bad.values() for t in per})
    busiest = sorted(results["private"].tenant_delays(), key=lambda t: -sum(
        1 for x in results["private"].rows if x["tenant"] == t))
    shown = worse + [t for t in busiest if t not in worse][:max(0, 6 - len(worse))]
    doc = write_comparison(results, out_dir, tenants=shown)
    print(f"{label(window)} load {load}: {sz.nodes} nodes, offered load {sz.load:.3f}")
    for name, per in doc["anomalies"].items():
        print(f"{name}: {len(per)} tenant(s) worse than private: "
              + (", ".join(f"{t} {v['shared_s'] / 60:.1f} vs {v['private_s'] / 60:.1f} min" for t, v in per.items())
                 or "-"))
    print(f"wrote {out_dir}/summary.json and plots")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 epilog="Columns: *_worse = tenants whose average queueing delay exceeds their "
                                        "private cluster's; *_worst = tenant:ratio with the largest shared/private "
                                        "ratio; quota_guaranteed_share = share of GPUs held by guaranteed jobs under "
                                        "quota, averaged over the busy window.")
    ap.add_argument("--quick", action="store_true", help="one 10-day window (days 60-70) at load 0.9")
    ap.add_argument("--loads", default=None, help="comma list of offered loads (default 0.85,0.9,0.95)")
    ap.add_argument("--windows", default=None,
                    help="comma list FROM:DAYS (DAYS empty = to the end), default the 60- and 30-day windows and whole")
    ap.add_argument("--jobs", type=int, default=2, help="simulations at once (default 2)")
    ap.add_argument("--out", help="write sweep.json and sweep.csv here")
    ap.add_argument("--figures", metavar="DIR", help="run the first setting only and write its outputs and plots here")
    a = ap.parse_args(argv)
    windows, loads = QUICK if a.quick else (WINDOWS, LOADS)
    if a.loads:
        loads = [float(x) for x in a.loads.split(",")]
    if a.windows:
        windows = []
        for part in a.windows.split(","):
            f, _, d = part.partition(":")
            windows.append((float(f), float(d) if d else None))
    if a.jobs < 1:
        ap.error(f"--jobs: must be >= 1, got {a.jobs}")
    if a.figures:
        return figures(windows[0], loads[0], a.figures)
    tasks = [(w, ld, s) for w in windows for ld in loads for s in ("private", "quota", "hived")]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=a.jobs) as ex:
        done = list(ex.map(run_one, tasks))
    by = {}
    for r in done:
        w, ld, s = r["task"]
        by.setdefault((tuple(w), ld), {})[s] = r
    rows = []
    print(" | ".join(COLS))
    for (w, ld), res in by.items():
        row = {"window": label(w), "load": ld, **compare(res)}
        rows.append(row)
        print(" | ".join(str(row[c]) for c in COLS), flush=True)
    n = len(rows)
    print(f"{n} settings, {len(tasks)} simulations, {time.perf_counter() - t0:.0f} s wall; "
          f"quota anomaly in {sum(1 for r in rows if r['quota_worse'])}, hived anomaly in "
          f"{sum(1 for r in rows if r['hived_worse'])}, quota-only in "
          f"{sum(1 for r in rows if r['quota_worse'] and not r['hived_worse'])}")
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "sweep.json"), "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
        with open(os.path.join(a.out, "sweep.csv"), "w", encoding="utf-8", newline="") as f:
            w = csv.DictWriter(f, fieldnames=COLS + ["quota_worse_tenants", "hived_worse_tenants"],
                               extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)
        print(f"wrote {a.out}/sweep.json, sweep.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
