"""Sharing-anomaly check with quotas proportional to Philly's own VC sizes.

Reads the per-scheme outputs of ``hived simulate`` (run with
``--shares`` from the packaged Philly trace's vc_nodes.csv, see
docs/reproduction-sharing.md) and prints, per tenant, the average queueing
delay under private / quota / hived, which tenants wait longer than in their
private cluster, and the HiveD jobs left waiting with room in their VC.
Optionally writes a bar plot of delay normalised to private.

    .venv/bin/python benchmarks/repro_sharing_vcsize.py RUNS_DIR [--plot PNG]

RUNS_DIR is the ``--out`` of one run of all three schemes, or holds
sub-folders private/, quota/, hived/ (one ``--out`` each).
"""
import argparse
import csv
import json
import os
import sys

from hived.core.sim.traces import PHILLY_DIR


def vc_shares(path: str = os.path.join(PHILLY_DIR, "vc_nodes.csv")) -> str:
    """The --shares argument: each VC's machine count as its weight."""
    with open(path, encoding="utf-8") as f:
        rows = list(csv.reader(f))[1:]
    return ",".join(f"{vc.strip()}={n.strip()}" for vc, n in rows)


def load(runs: str, scheme: str) -> tuple:
    """(summary dict, job rows) of one scheme's run folder."""
    d = os.path.join(runs, scheme)
    if not os.path.isdir(d):  # one --out for all schemes
        d = runs
    name = "hived-node" if scheme == "hived" else scheme  # hived's run name carries its cell kind
    with open(os.path.join(d, f"summary_{name}.json"), encoding="utf-8") as f:
        summ = json.load(f)
    with open(os.path.join(d, f"jobs_{name}.csv"), encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return summ, rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="?", help="folder with private/, quota/, hived/ runs")
    ap.add_argument("--plot", help="write a normalised-delay bar plot here")
    ap.add_argument("--print-shares", action="store_true", help="print the --shares value and exit")
    a = ap.parse_args(argv)
    if a.print_shares:
        print(vc_shares())
        return 0
    if not a.runs:
        ap.error("give RUNS_DIR")
    res = {s: load(a.runs, s) for s in ("private", "quota", "hived")}
    delay = {s: res[s][0]["tenant_avg_queue_delay_s"] for s in res}
    quotas = res["quota"][0]["quotas_gpus"]
    print(f"nodes {res['quota'][0]['nodes']}, offered load {res['quota'][0]['offered_load']}")
    print(f"{'tenant':8} {'quota GPUs':>10} {'private':>10} {'quota':>10} {'hived':>10}   (avg queueing delay, min)")
    worse = {"quota": [], "hived": []}
    for t in sorted(delay["private"], key=lambda t: -quotas[t]):
        p = delay["private"][t]
        cols = []
        for s in ("private", "quota", "hived"):
            v = delay[s][t]
            mark = ""
            if s != "private" and v > p:
                worse[s].append(t)
                mark = "*"
            cols.append(f"{v / 60:,.0f}{mark}")
        print(f"{t:8} {quotas[t]:>10} " + " ".join(f"{c:>10}" for c in cols))
    for s in ("quota", "hived"):
        print(f"{s}: {len(worse[s])} tenant(s) worse than private: {', '.join(worse[s]) or '-'}")
    # Jobs started at once in private, and how they fare when shared.
    at_once = {r["job_id"] for r in res["private"][1] if float(r["queue_delay"] or 0) == 0}
    for s in ("quota", "hived"):
        rows = res[s][1]
        blocked = sum(1 for r in rows if r["head_waited_with_vc_room"] in ("1", "True", "true"))
        waited = sum(1 for r in rows if r["job_id"] in at_once and float(r["queue_delay"] or 0) > 0)
        print(f"{s}: head_waited_with_vc_room {blocked}; of {len(at_once)} jobs started at once in private, "
              f"{waited} waited")
    if a.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        ts = sorted(delay["private"], key=lambda t: -quotas[t])
        fig, ax = plt.subplots(figsize=(8, 3.5))
        w = 0.38
        for i, s in enumerate(("quota", "hived")):
            ys = [delay[s][t] / max(delay["private"][t], 1.0) for t in ts]
            ax.bar([x + (i - 0.5) * w for x in range(len(ts))], ys, w, label=s)
        ax.axhline(1.0, color="k", lw=0.8, ls="--")
        ax.set_yscale("log")
        ax.set_xticks(range(len(ts)))
        ax.set_xticklabels(ts, rotation=45, fontsize=8)
        ax.set_ylabel("avg delay / private")
        ax.set_title("Philly, quotas by VC size: delay relative to private (above 1 = anomaly)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(a.plot, dpi=110)
        print(f"wrote {a.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
