"""Files and plots for sharing-safety simulations (core/sim/simulate.py results).

``write_run(result, out_dir)`` writes ``jobs_<run>.csv`` (one row per job)
and ``summary_<run>.json``; ``write_comparison(results, out_dir)`` writes
``summary.json`` for all runs and the plots a person wants (matplotlib, Agg):

* ``queue_delay_over_time.png``: each tenant's queueing delay over submit
  time, 12-hour moving average, one line per scheme (HiveD, OSDI '20, Figures 5a/6);
* ``normalized_delay.png``: per tenant average queueing delay normalized to
  its private cluster (HiveD, OSDI '20, Figure 7);
* ``fragmentation.png``: share of 8-GPU nodes that cannot host an 8-GPU
  guaranteed job, over time (HiveD, OSDI '20, Figures 6 and 11);
* ``preempted_gpus.png``: GPUs preempted per 12 hours, static vs dynamic
  binding (HiveD, OSDI '20, Figure 10).
"""
from __future__ import annotations

import csv
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from hived.core.sim.simulate import ROW_FIELDS, SimResult  # noqa: E402

WINDOW = 12 * 3600.0
DAY = 86400.0


def run_name(r: SimResult) -> str:
    return r.scheme if r.scheme in ("private", "private-quota", "quota") else f"{r.scheme}-{r.cells}"


def baseline(results: dict, name: str):
    """The private run a shared run is compared with: the one placed by the same
    allocator (``private-quota`` for ``quota``), else ``private``."""
    from hived.core.sim.schemes import PRIVATE_OF
    return results.get(PRIVATE_OF.get(name, "private")) or results.get("private")


def is_private(name: str) -> bool:
    return name.startswith("private")


def write_run(r: SimResult, out_dir: str) -> dict:
    os.makedirs(out_dir, exist_ok=True)
    name = run_name(r)
    with open(os.path.join(out_dir, f"jobs_{name}.csv"), "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(ROW_FIELDS))
        w.writeheader()
        for row in r.rows:
            w.writerow(row)
    summ = r.summary()
    with open(os.path.join(out_dir, f"summary_{name}.json"), "w", encoding="utf-8") as f:
        json.dump(summ, f, indent=2, sort_keys=True)
    return summ


def moving_average(points: list, window: float = WINDOW) -> tuple:
    """(times, averages): at each point, the mean of values in the trailing ``window``."""
    pts = sorted(points)
    xs, ys = [], []
    lo, acc = 0, 0.0
    for hi, (t, v) in enumerate(pts):
        acc += v
        while pts[lo][0] < t - window:
            acc -= pts[lo][1]
            lo += 1
        xs.append(t)
        ys.append(acc / (hi - lo + 1))
    return xs, ys


def worse_than_private(private: dict, shared: dict) -> list:
    """Tenants whose average queueing delay (tenant -> s) in the shared run exceeds the private one."""
    return [t for t in sorted(shared) if t in private and shared[t] > private[t] + 1e-9]


def paired_delays(results: dict):
    """(run, shared delays, private delays) per shared run that has a private baseline, each
    tenant's average over the jobs that started in both runs: a job refused or never started
    in one run would otherwise move one average and not the other (summary: refused,
    never_started)."""
    for name, r in results.items():
        priv = baseline(results, name)
        if is_private(name) or priv is None:
            continue
        common = priv.started_ids() & r.started_ids()
        yield name, r.tenant_delays(common), priv.tenant_delays(common)


def anomalies(results: dict) -> dict:
    """Per shared run: tenants whose average queueing delay exceeds the private one."""
    return {name: {t: {"private_s": round(base[t], 1), "shared_s": round(d[t], 1),
                       "ratio": round(d[t] / base[t], 3) if base[t] > 0 else None}
                   for t in worse_than_private(base, d)}
            for name, d, base in paired_delays(results)}


def waited_for_others(results: dict) -> dict:
    """Per shared run: guaranteed jobs that started at once in their private cluster
    but waited in the shared one (count and share)."""
    out = {}
    for name, r in results.items():
        priv = baseline(results, name)
        if is_private(name) or priv is None:
            continue
        at_once = {r["job_id"] for r in priv.rows if r["queue_delay"] is not None and r["queue_delay"] <= 0}
        waited = [row for row in r.rows if row["job_id"] in at_once
                  and (row["queue_delay"] is None or row["queue_delay"] > 0)]
        # of those, the ones that headed their VC's queue after a round with room for
        # them in their VC's free cells: they waited for other tenants (HiveD: never)
        others = [row for row in waited if row.get("head_waited_with_vc_room")]
        out[name] = {"jobs_at_once_in_private": len(at_once), "waited_in_shared": len(waited),
                     "examples": [row["job_id"] for row in waited[:5]],
                     "waited_with_vc_room": len(others), "examples_with_vc_room": [row["job_id"] for row in others[:5]]}
    return out


def write_comparison(results: dict, out_dir: str, *, tenants: list | None = None) -> dict:
    """``results``: run name -> SimResult. Writes summary.json and the plots; returns the summary."""
    os.makedirs(out_dir, exist_ok=True)
    summary = {name: r.summary() for name, r in results.items()}
    doc = {"runs": summary, "anomalies": anomalies(results), "waited_for_others": waited_for_others(results)}
    pre = {n: s["preempted_gpus"] for n, s in summary.items()}
    if "hived-node" in pre and "hived-static-node" in pre and pre["hived-static-node"]:
        doc["dynamic_vs_static_preempted_gpus_reduction"] = round(1 - pre["hived-node"] / pre["hived-static-node"], 4)
    frag = {n: s["avg_fragmentation"] for n, s in summary.items() if s["avg_fragmentation"] is not None}
    if "hived-node" in frag and "hived-multi" in frag:
        doc["fragmentation_node_minus_multi"] = round(frag["hived-node"] - frag["hived-multi"], 4)
    with open(os.path.join(out_dir, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2, sort_keys=True)
    plot_delay_over_time(results, os.path.join(out_dir, "queue_delay_over_time.png"), tenants)
    if any(is_private(n) for n in results):
        plot_normalized(results, os.path.join(out_dir, "normalized_delay.png"))
    if any(r.frag for r in results.values()):
        plot_fragmentation(results, os.path.join(out_dir, "fragmentation.png"))
    plot_preempted(results, os.path.join(out_dir, "preempted_gpus.png"))
    return doc


def _tenants_by_jobs(results: dict) -> list:
    any_r = next(iter(results.values()))
    count: dict = {}
    for row in any_r.rows:
        count[row["tenant"]] = count.get(row["tenant"], 0) + 1
    return sorted(count, key=lambda t: -count[t])


def plot_delay_over_time(results: dict, path: str, tenants: list | None = None) -> list:
    """Each tenant's delay over time, one line per run (every run); returns the runs drawn."""
    tenants = tenants or _tenants_by_jobs(results)
    cols = 3
    rows_n = (len(tenants) + cols - 1) // cols
    fig, axes = plt.subplots(rows_n, cols, figsize=(5 * cols, 2.6 * rows_n), squeeze=False, sharex=True)
    for ax, t in zip(axes.flat, tenants):
        for name, r in results.items():
            pts = [(row["submit"], row["queue_delay"] / 60.0) for row in r.rows
                   if row["tenant"] == t and row["queue_delay"] is not None]
            if pts:
                xs, ys = moving_average(pts)
                ax.plot([x / DAY for x in xs], ys, label=name, lw=1)
        ax.set_title(t, fontsize=9)
        ax.set_ylabel("delay (min)", fontsize=8)
    for ax in list(axes.flat)[len(tenants):]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel("submit time (days)", fontsize=8)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    for name in results:       # a run with no delay for the first tenant still gets its legend entry
        if name not in labels:
            axes.flat[0].plot([], [], label=name, lw=1)
    axes.flat[0].legend(fontsize=7)
    fig.suptitle("Queueing delay, 12-hour moving average over submit time")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return list(results)


def normalized(results: dict) -> dict:
    """run -> tenant -> (shared delay s, private delay s, ratio or None when private is 0),
    each run against its own private baseline, over the jobs that started in both."""
    return {name: {t: (d[t], base[t], (d[t] / base[t]) if base[t] > 0 else None) for t in d if t in base}
            for name, d, base in paired_delays(results)}


def bar_height(v: tuple, lo: float, hi: float) -> tuple:
    """(top of the bar on the log axis, its label) for one tenant's (shared s, private s, ratio):
    no wait in the shared run is no bar, marked "0 s" (whatever the private delay); a private
    delay of 0 with a shared wait has no ratio: a bar to the top, labelled with both waits."""
    shared, _, ratio = v
    if shared <= 0:
        return lo, "0 s"
    if ratio is None:
        return hi, f"private 0 s\nshared {shared / 60:.0f} min"
    return max(ratio, lo), ""


def plot_normalized(results: dict, path: str) -> None:
    """Bars of shared / private delay on a log axis (1 = as in the private cluster).

    A tenant that did not wait in the shared run gets no bar and a "0 s" mark; one whose
    private delay is 0 and that waited in the shared run has no ratio: its bar is drawn
    hatched to the top of the axis, labelled with that wait (``bar_height``)."""
    norm = normalized(results)
    runs = list(norm)
    tenants = [t for t in _tenants_by_jobs(results) if any(t in norm[n] for n in runs)]
    if not runs or not tenants:
        return
    ratios = [v[2] for n in runs for v in norm[n].values() if v[2] is not None and v[2] > 0]
    lo = min([0.5] + [x / 1.5 for x in ratios])
    hi = max([2.0] + [x * 1.5 for x in ratios])
    fig, ax = plt.subplots(figsize=(max(8, 0.22 * len(tenants) * len(runs) + 3), 4.6))
    width = 0.8 / len(runs)
    for k, name in enumerate(runs):
        xs, hs, bottoms, hatched = [], [], [], []
        for i, t in enumerate(tenants):
            v = norm[name].get(t)
            if v is None:
                continue
            x = i + k * width
            top, label = bar_height(v, lo, hi)
            if label == "0 s":      # no wait at all in the shared run: say so, draw no bar
                ax.annotate("0 s", (x, lo), fontsize=6, ha="center", va="bottom", rotation=90,
                            xytext=(0, 2), textcoords="offset points")
            elif label:             # private delay 0, shared not: no ratio, a hatched bar to the top
                hatched.append(x)
                ax.annotate(label, (x, hi), fontsize=6,
                            ha="center", va="top", rotation=90, xytext=(0, -4), textcoords="offset points")
            xs.append(x)
            hs.append(top - lo)
            bottoms.append(lo)
        bars = ax.bar(xs, hs, width, bottom=bottoms, label=name)
        for b in bars:
            if b.get_x() + b.get_width() / 2 in hatched:
                b.set_hatch("//")
                b.set_alpha(0.6)
    ax.axhline(1.0, color="k", lw=0.8, ls="--", label="private = 1")
    ax.set_yscale("log")
    ax.set_ylim(lo, hi)
    ticks = [x for x in (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500,
                         1000, 2000, 5000, 10000) if lo <= x <= hi]
    ax.set_yticks(ticks)
    ax.set_yticklabels([f"{x:g}x" for x in ticks])
    ax.minorticks_off()
    ax.set_xticks([i + width * (len(runs) - 1) / 2 for i in range(len(tenants))])
    ax.set_xticklabels(tenants, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("avg queueing delay / private")
    ax.legend(fontsize=7, ncol=min(3, len(runs) + 1))
    ax.set_title("Queueing delay normalized to each tenant's private cluster\n"
                 "(cf. HiveD (OSDI '20) Fig. 7; hatched: private delay 0; \"0 s\": no wait)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_fragmentation(results: dict, path: str) -> list:
    """Fragmented nodes over time, one line per run (a private run, which is one cluster
    per tenant and not sampled, is listed as such); returns the runs drawn."""
    fig, ax = plt.subplots(figsize=(9, 3.5))
    for name, r in results.items():
        if r.frag:
            xs, ys = moving_average([(t, f * 100) for t, f in r.frag])
            ax.plot([x / DAY for x in xs], ys, label=name, lw=1)
        else:
            ax.plot([], [], label=f"{name} (not sampled: one cluster per tenant)")
    ax.set_xlabel("time (days)")
    ax.set_ylabel("fragmented nodes (%)")
    ax.set_title("Nodes that cannot host an 8-GPU guaranteed job (12-h average)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return list(results)


def plot_preempted(results: dict, path: str) -> list:
    """GPUs preempted per 12 h, one line per run; returns the runs drawn."""
    fig, ax = plt.subplots(figsize=(9, 3.5))
    for name, r in results.items():
        buckets: dict = {}
        for t, g, _ in r.preempted:
            b = int(t // WINDOW)
            buckets[b] = buckets.get(b, 0) + g
        if not r.preempted:
            ax.plot([], [], label=f"{name} (0)")
            continue
        last = max(buckets)
        xs = [b * WINDOW / DAY for b in range(last + 1)]
        ax.step(xs, [buckets.get(b, 0) for b in range(last + 1)], where="post", lw=1,
                label=f"{name} ({sum(buckets.values())} GPUs)")
    ax.set_xlabel("time (days)")
    ax.set_ylabel("GPUs preempted per 12 h")
    ax.set_title("Preempted GPUs: dynamic vs static binding (cf. HiveD (OSDI '20) Fig. 10)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return list(results)
