"""``simulate(trace, scheme, ...)``: replay a trace through the engine.

The loop jumps from event to event (a submission, a simulated exit, or an
engine timer such as a soft-affinity relaxation), reports the events to the
engine, runs one scheduling round ``step(now)`` and acts on its decisions
with the simulated launcher. Nothing is written or drawn here: the result
holds per-job rows, time series and a summary; reports/ writes
CSV/JSON and plots.
"""
from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..engine import Engine, EngineConfig
from ..jobs import HOLDING, Affinity, Decision, DecisionKind, JobClass, JobRequest, PodGroup
from .idle import idle_fit_gpus
from .launcher import SimLauncher
from .safety import blocked_heads
from .schemes import SCHEMES, Sizing, build_engine, private_specs, shared_spec, size_cluster, sizing_from_spec
from .traces import Trace, TraceJob

ROW_FIELDS = ("job_id", "tenant", "gpus", "pods", "submit", "start", "end", "queue_delay", "queued_total",
              "preemptions", "gpus_preempted", "opportunistic", "state", "nodes", "head_waited_with_vc_room")


Row = dict[str, Any]                       # one job's outcome (ROW_FIELDS)
Sample = tuple[float, float]               # (t, share)
Preempted = tuple[float, int, str]         # (t, GPUs preempted, tenant)
Replayed = tuple[list[Row], list[Sample], list[Sample], list[Preempted], list[Sample], int | None, float]


@dataclass
class SimResult:
    scheme: str
    cells: str
    rows: list[Row]                 # one dict per job (ROW_FIELDS)
    # (t, share of nodes unable to host an 8-GPU guaranteed job)
    frag: list[Sample] = field(default_factory=list)
    util: list[Sample] = field(default_factory=list)            # (t, share of GPUs bound)
    preempted: list[Preempted] = field(default_factory=list)    # (t, GPUs preempted, tenant)
    nodes: int = 0
    load: float | None = 0.0        # offered load; None: the trace is too short to have one
    wall_s: float = 0.0
    quotas: dict[str, int] = field(default_factory=dict)
    # (t, share of GPUs held by guaranteed jobs): HiveD (OSDI '20) §5.2's load
    guaranteed: list[Sample] = field(default_factory=list)
    breach_rounds: int | None = None  # rounds with a VC head that fit its VC's free cells and waited
    idle_gpu_hours: float = 0.0       # GPU-hours idle while a queued job that fits them waited (idle.py)

    def tenant_delays(self, only: set[str] | None = None) -> dict[str, float]:
        """tenant -> average queueing delay (s) of its jobs that started (of ``only`` if given)."""
        acc: dict[str, list[float]] = {}
        for r in self.rows:
            if r["start"] is not None and (only is None or r["job_id"] in only):
                acc.setdefault(r["tenant"], []).append(r["queue_delay"])
        return {t: sum(v) / len(v) for t, v in sorted(acc.items())}

    def started_ids(self) -> set[str]:
        return {r["job_id"] for r in self.rows if r["start"] is not None}

    def summary(self) -> dict[str, Any]:
        started = [r for r in self.rows if r["start"] is not None]
        delays = [r["queue_delay"] for r in started]
        pre = sum(g for _, g, _ in self.preempted)
        refused = [r for r in self.rows if str(r["state"]).startswith("refused")]
        breached = [r["job_id"] for r in self.rows if r["head_waited_with_vc_room"]]
        return {
            "scheme": self.scheme, "cells": self.cells, "nodes": self.nodes, "gpus": self.nodes * 8,
            "offered_load": None if self.load is None else round(self.load, 4),
            "jobs": len(self.rows), "started": len(started),
            "never_started": len(self.rows) - len(started) - len(refused),
            "refused": len(refused),
            "refused_examples": [f"{r['job_id']}: {r['state'][len('refused: '):]}" for r in refused[:5]],
            # the guarantee (HiveD, OSDI '20, §3): after every round, no VC's head fits its VC's free cells and waits
            "guarantee_breach_jobs": None if self.breach_rounds is None else len(breached),
            "guarantee_breach_rounds": self.breach_rounds,
            "guarantee_breach_examples": breached[:5],
            "avg_queue_delay_s": statistics.fmean(delays) if delays else 0.0,
            "p95_queue_delay_s": _pct(delays, 95),
            "tenant_avg_queue_delay_s": self.tenant_delays(),
            "preempted_gpus": pre, "preemptions": sum(r["preemptions"] for r in self.rows),
            "avg_fragmentation": statistics.fmean(f for _, f in self.frag) if self.frag else None,
            "avg_utilization": statistics.fmean(u for _, u in self.util) if self.util else None,
            "idle_gpu_hours_job_fits": round(self.idle_gpu_hours, 2),
            "avg_guaranteed_share": statistics.fmean(g for _, g in self.guaranteed) if self.guaranteed else None,
            "quotas_gpus": self.quotas, "wall_s": round(self.wall_s, 3),
            "jobs_per_s": round(len(self.rows) / self.wall_s, 1) if self.wall_s > 0 else None,
        }


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return 0.0
    s = sorted(xs)
    return s[min(len(s) - 1, int(math.ceil(q / 100 * len(s))) - 1)]


def to_request(j: TraceJob, allow_opportunistic: bool = True) -> JobRequest:
    cls = JobClass(j.job_class)
    sizes = j.pod_sizes
    if not j.gpus:
        raise ValueError("gpus: a CPU-only job (0 GPUs): hived places GPU cells, CPU-only pods are not simulated")
    groups = [PodGroup(sizes.count(g), g, cpus=j.cpus, memory_gb=j.memory_gb) for g in sorted(set(sizes), reverse=True)]
    return JobRequest(user=j.tenant, vc=j.tenant, job_class=cls, groups=groups,
                      affinity=Affinity(j.affinity), grace_period=j.grace_period, duration=j.duration,
                      allow_opportunistic=allow_opportunistic and cls.guaranteed, name=j.job_id,
                      time_limit=j.time_limit)


def replay(eng: Engine, jobs: list[TraceJob], *, sample_every: float = 3600.0,
           progress: Callable[[int], object] | None = None,
           allow_opportunistic: bool = True, guarantee: bool = True, idle_every: float = 3600.0) -> Replayed:
    """Run ``jobs`` (sorted by submit) through ``eng``; returns
    (rows, frag, util, preempted, guaranteed, breach rounds or None, idle GPU-hours).

    Every ``idle_every`` seconds it counts the idle GPUs queued jobs could take by node
    counts (``idle.idle_fit_gpus``); their sum times the interval is the GPU-hours idle
    while a job that fits waited.

    ``guarantee``: after every round, look for VC heads that fit their VC's
    free cells and yet wait (``safety.blocked_heads``); off for private
    clusters, where a tenant waiting on its own fragmentation is no breach.

    ``frag``, ``util`` and ``guaranteed`` are sampled every ``sample_every``
    seconds; ``guaranteed`` is the share of GPUs held by guaranteed jobs, the
    paper's load ("around 90% of the GPUs are used by high-priority jobs", HiveD (OSDI '20) §5.2)."""
    r = _Replay(eng, jobs, sample_every=sample_every, progress=progress, allow_opportunistic=allow_opportunistic,
                guarantee=guarantee, idle_every=idle_every)
    r.run()
    return (r.rows(), r.frag, r.util, r.preempted, r.guaranteed, (r.breach_rounds if guarantee else None),
            r.idle_gpu_s / 3600.0)


class _Replay:
    """One ``replay``: the loop's state between events, and what it records."""

    def __init__(self, eng: Engine, jobs: list[TraceJob], *, sample_every: float,
                 progress: Callable[[int], object] | None, allow_opportunistic: bool, guarantee: bool,
                 idle_every: float) -> None:
        self.eng, self.jobs, self.progress = eng, jobs, progress
        self.sample_every, self.idle_every = sample_every, idle_every
        self.allow_opportunistic, self.check = allow_opportunistic, guarantee
        self.launcher = SimLauncher()
        self.frag: list[Sample] = []
        self.util: list[Sample] = []
        self.preempted: list[Preempted] = []
        self.guaranteed: list[Sample] = []
        self.first_nodes: dict[str, str] = {}
        self.first_opp: dict[str, bool] = {}
        self.total_gpus = max(1, sum(st.gpus_total for st in eng.view.nodes.values()))
        self.next_sample = 0.0
        self.next_idle = 0.0
        self.idle_gpu_s = 0.0
        self.refused: list[tuple[TraceJob, str]] = []
        self.breached: set[str] = set()   # heads of VC queues that fit their VC's free cells after a round and waited
        self.breach_rounds = 0
        self.waiting: set[str] = set()    # VCs whose head breached at the last check
        self.room: dict[str, tuple[object, bool]] = {}   # safety.vc_room's memo: VC -> (head and version, fits)

    def run(self) -> None:
        eng, jobs, launcher = self.eng, self.jobs, self.launcher
        i, n = 0, len(jobs)
        while True:
            cands = [t for t in (jobs[i].submit if i < n else None, launcher.next_time(), eng.next_wakeup())
                     if t is not None]
            if not cands:
                break
            now = min(cands)
            self._sample(now)
            while i < n and jobs[i].submit <= now:
                self._submit(jobs[i], now)
                i += 1
            for kind, jid in launcher.due(now):
                if kind == SimLauncher.FINISHED:
                    eng.on_finished(jid, now, 0)
                elif eng.job(jid).state in HOLDING:
                    eng.on_preempted(jid, now)
            self._act(eng.step(now), now)
            if self.check:
                # a VC the round did not walk changed in nothing since the last check: only
                # re-check those it walked, and those that breached before
                heads = blocked_heads(eng, now, eng.scanned | self.waiting, self.room)
                self.waiting = {eng.job(h).request.vc for h in heads}
                if heads:
                    self.breach_rounds += 1
                    self.breached.update(heads)

    def _sample(self, now: float) -> None:
        """The time series up to ``now`` (each sample sees the state the last round left)."""
        view = self.eng.view
        while self.next_sample <= now and self.sample_every > 0:
            t = self.next_sample
            self.frag.append((t, view.fragmentation()))
            self.util.append((t, 1.0 - sum(max(0, st.gpus_free) for st in view.nodes.values()) / self.total_gpus))
            self.guaranteed.append((t, sum(st.guaranteed_gpus for st in view.nodes.values()) / self.total_gpus))
            self.next_sample += self.sample_every
        if self.idle_every > 0 and self.next_idle <= now:
            k = math.floor((now - self.next_idle) / self.idle_every) + 1   # samples up to now see the same state
            self.idle_gpu_s += k * self.idle_every * idle_fit_gpus(self.eng, now)
            self.next_idle += k * self.idle_every

    def _submit(self, j: TraceJob, now: float) -> None:
        try:
            self.eng.submit(to_request(j, self.allow_opportunistic), now, job_id=j.job_id)
        except ValueError as e:
            self.refused.append((j, str(e)))
        if self.progress is not None:
            self.progress(1)

    def _act(self, decisions: list[Decision], now: float) -> None:
        """Carry out a round's decisions with the simulated launcher."""
        eng, launcher = self.eng, self.launcher
        for d in decisions:
            if d.kind is DecisionKind.START:
                rec = eng.job(d.job_id)
                eng.on_started(d.job_id, now)
                if d.job_id not in self.first_nodes and d.placement is not None:   # a START carries its placement
                    self.first_nodes[d.job_id] = " ".join(sorted({p.node for p in d.placement.pods}))
                    self.first_opp[d.job_id] = d.placement.opportunistic
                launcher.launch(d.job_id, now, rec.remaining or 0.0, rec.attempts)
            elif d.kind is DecisionKind.PREEMPT:
                rec = eng.job(d.job_id)
                self.preempted.append((now, rec.gpus, rec.request.vc))
                launcher.terminate(d.job_id, now, d.grace_period)

    def rows(self) -> list[Row]:
        """One row per job (ROW_FIELDS): the engine's jobs, then the refused ones."""
        rows = []
        for rec in self.eng.jobs():
            st = rec.first_started
            rows.append({
                "job_id": rec.job_id, "tenant": rec.request.vc, "gpus": rec.gpus, "pods": len(rec.pod_gpus),
                "submit": rec.submitted, "start": st, "end": rec.ended,
                "queue_delay": (st - rec.submitted) if st is not None else None,
                "queued_total": rec.queued_time, "preemptions": rec.preemptions, "gpus_preempted": rec.gpus_preempted,
                "opportunistic": self.first_opp.get(rec.job_id), "state": rec.state.value,
                "nodes": self.first_nodes.get(rec.job_id, ""), "head_waited_with_vc_room": rec.job_id in self.breached,
            })
        for j, why in self.refused:
            rows.append({"job_id": j.job_id, "tenant": j.tenant, "gpus": j.gpus, "pods": j.pods, "submit": j.submit,
                         "start": None, "end": None, "queue_delay": None, "queued_total": 0.0, "preemptions": 0,
                         "gpus_preempted": 0, "opportunistic": None, "state": f"refused: {why}", "nodes": "",
                         "head_waited_with_vc_room": False})
        return rows


def simulate(trace: Trace, scheme: str, *, cells: str = "node", load: float = 0.9, nodes: int | None = None,
             sizing: Sizing | None = None, config: EngineConfig | None = None,
             sample_every: float = 3600.0, progress: Callable[[int], object] | None = None,
             preemption_policy: Any = "none", spec: dict[str, Any] | None = None) -> SimResult:
    """Replay ``trace`` under ``scheme`` (private|private-quota|quota|hived|hived-static).

    ``sizing`` (from ``size_cluster``) fixes the cluster and quotas so that
    several schemes compare on the same cluster; otherwise it is computed
    from ``load`` (or ``nodes``). ``cells`` is "node" or "multi" (VC cells).
    ``spec`` (a spec dict) replaces the generated cluster for the shared
    schemes; its VCs must be the trace's tenants.
    """
    if scheme not in SCHEMES:
        raise ValueError(f"scheme: must be one of {', '.join(SCHEMES)}, got {scheme!r}")
    if cells not in ("node", "multi"):
        raise ValueError(f"cells: must be 'node' or 'multi', got {cells!r}")
    if sizing is None:
        sizing = sizing_from_spec(spec, trace) if spec is not None else size_cluster(trace, load, nodes=nodes)
    t0 = time.perf_counter()
    if scheme.startswith("private"):
        rows: list[Row] = []
        frag: list[Sample] = []
        util: list[Sample] = []
        pre: list[Preempted] = []
        gshare: list[Sample] = []
        idle = 0.0
        by_tenant: dict[str, list[TraceJob]] = {}
        for j in trace.jobs:
            by_tenant.setdefault(j.tenant, []).append(j)
        for t, spec in private_specs(trace, sizing).items():
            eng = build_engine(scheme, spec, config=config, preemption_policy=preemption_policy)
            r, _, _, p, _, _, idle_h = replay(eng, by_tenant.get(t, []), sample_every=0, progress=progress,
                                              allow_opportunistic=False, guarantee=False, idle_every=sample_every)
            rows += r
            pre += p
            idle += idle_h
        rows.sort(key=lambda r: (r["submit"], r["job_id"]))
        breach = None
    else:
        eng = build_engine(scheme, spec if spec is not None else shared_spec(sizing, cells), config=config,
                           preemption_policy=preemption_policy)
        rows, frag, util, pre, gshare, breach, idle = replay(eng, trace.jobs, sample_every=sample_every,
                                                             progress=progress, idle_every=sample_every)
    return SimResult(scheme, cells, rows, frag, util, pre, sizing.nodes, sizing.load,
                     time.perf_counter() - t0, dict(sizing.quotas), gshare, breach, idle)
