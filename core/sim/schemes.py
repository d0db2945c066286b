"""The four ways of sharing a cluster the simulator compares, and their sizes.

* ``private``: each tenant alone on a cluster the size of its quota (whole
  8-GPU nodes; never smaller than its largest job, so that every job can run),
  placed by HiveD's buddy cell allocator: with no sharing, ``hived`` is this
  run exactly (same allocator, same order), so a difference is sharing's;
* ``private-quota``: the same private clusters placed by the quota baseline's
  best fit, the baseline ``quota`` is compared with (same packing);
* ``quota``: one shared cluster, quota counted in GPUs, YARN-CS best-fit
  packing, jobs over quota run as low priority (core/quota.py);
* ``hived``: the same cluster, VCs of cells, buddy cell allocation with
  dynamic binding (core/allocator.py); ``hived-static``: static binding.

Cluster size (documented choice, ``size_cluster``): the offered load is
``sum(GPUs x duration) / (cluster GPUs x window)`` over the jobs submitted in
the central 90% of submissions (``busy_window``); the cluster is the number of
8-GPU nodes that makes it ``load``. Quotas are each tenant's share
of GPU-hours (or given shares), in whole nodes, at least one node each and at
least the tenant's largest job (the private cluster is the quota, and must run
every job; Philly: only e13805, 16 -> 32 GPUs); the cluster grows to hold them.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..engine import Engine, EngineConfig
from ..quota import QuotaAllocator
from ..spec import load_spec
from .cluster import NODE_GPUS, level_for, node_spec, private_spec
from .traces import Trace

if TYPE_CHECKING:
    from ..allocator import Allocator

MAX_NODES = 20000   # a simulated cluster (each node is a cell tree in memory)
SCHEMES = ("private", "private-quota", "quota", "hived", "hived-static")
PRIVATE_OF = {"quota": "private-quota"}   # the private baseline with the same allocator (else "private")


@dataclass
class Sizing:
    nodes: int
    quotas: dict[str, int]                # tenant -> GPUs (multiple of 8)
    load: float | None                    # offered load on ``nodes``; None: trace too short to have one
    demand: dict[str, dict[int, float]]   # tenant -> {level: GPU-seconds} (for multi-level cells)
    # tenant -> {level: cells} its largest gang needs
    min_cells: dict[str, dict[int, int]] = field(default_factory=dict)

    @property
    def gpus(self) -> int:
        return self.nodes * NODE_GPUS


def size_cluster(trace: Trace, load: float = 0.9, *, nodes: int | None = None,
                 shares: dict[str, float] | None = None) -> Sizing:
    if not trace.jobs:
        raise ValueError("trace: no jobs")
    if nodes is None and not (0 < load <= 10):
        raise ValueError(f"load: must be in (0, 10], got {load}")
    gs = trace.gpu_seconds()
    total = sum(gs.values())
    if total <= 0:
        raise ValueError("trace: no GPU demand (every job asks 0 GPUs or lasts 0 s); nothing to size a cluster by")
    win_gpu_s, span = busy_window(trace)
    fixed = nodes is not None
    if fixed and not (isinstance(nodes, int) and 1 <= nodes <= MAX_NODES):
        raise ValueError(f"--nodes: must be an integer in 1..{MAX_NODES}, got {nodes!r}")
    if nodes is None:
        nodes = max(1, math.ceil(win_gpu_s / (span * load) / NODE_GPUS))
    tenants = trace.tenants
    if shares is None:
        shares = {t: gs.get(t, 0.0) / total for t in tenants}
    else:
        missing = [t for t in tenants if t not in shares]
        if missing:
            raise ValueError(f"shares: no quota share for tenants {missing}")
        s = sum(shares[t] for t in tenants)
        shares = {t: shares[t] / s for t in tenants}
    want = {t: shares[t] * nodes for t in tenants}
    biggest: dict[str, int] = defaultdict(int)
    for j in trace.jobs:
        biggest[j.tenant] = max(biggest[j.tenant], j.gpus)
    # at least one node, and room for the tenant's largest job: its private cluster
    # (= its quota) must be able to run every job it submits
    q = {t: max(1, int(want[t]), math.ceil(biggest[t] / NODE_GPUS)) for t in tenants}
    left = nodes - sum(q.values())
    for t in sorted(tenants, key=lambda t: want[t] - int(want[t]), reverse=True):
        if left <= 0:
            break
        q[t] += 1
        left -= 1
    if fixed and sum(q.values()) > nodes:
        raise ValueError(f"--nodes {nodes} is too small: the tenants' quotas need {sum(q.values())} nodes (each "
                         "tenant at least one node and room for its largest job); give more nodes or use --load")
    nodes = max(nodes, sum(q.values()))
    if nodes > MAX_NODES:
        raise ValueError(f"cluster: {nodes} nodes of 8 GPUs, at most {MAX_NODES} are simulated")
    demand: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    for j in trace.jobs:
        demand[j.tenant][level_for(j.gpus_per_pod)] += j.gpu_seconds
    return Sizing(nodes, {t: n * NODE_GPUS for t, n in q.items()},
                  offered_load(trace, nodes * NODE_GPUS), {t: dict(d) for t, d in demand.items()},
                  gang_cells(trace))


def offered_load(trace: Trace, gpus: int) -> float | None:
    """GPU-seconds submitted over the central 90% of submissions / (``gpus`` x that window);
    None when the trace is too short to have a busy window (under 20 jobs, or all its
    central submissions at one time): two jobs over a few minutes are no load."""
    bounds = busy_bounds(trace)
    if bounds is None or bounds[1] <= bounds[0] or gpus <= 0:
        return None
    win_gpu_s, span = busy_window(trace)
    return win_gpu_s / (span * gpus)


def gang_cells(trace: Trace) -> dict[str, dict[int, int]]:
    """tenant -> {level: cells}: per level, the most pods of that level one job asks.

    Multi-level VCs keep at least these cells, so every job that fits the
    tenant's private cluster also fits its VC."""
    out: dict[str, dict[int, int]] = defaultdict(dict)
    for j in trace.jobs:
        per: dict[int, int] = defaultdict(int)
        for g in j.pod_sizes:
            per[level_for(g)] += 1
        for lvl, n in per.items():
            if n > out[j.tenant].get(lvl, 0):
                out[j.tenant][lvl] = n
    return dict(out)


def busy_bounds(trace: Trace, lo: float = 0.05, hi: float = 0.95) -> tuple[float, float] | None:
    """(first, last) submit time of the central 90% of submissions; None for under 20 jobs."""
    sub = sorted(j.submit for j in trace.jobs)
    n = len(sub)
    if n < 20:
        return None
    return sub[int(lo * n)], sub[min(n - 1, int(hi * n))]


def busy_window(trace: Trace, lo: float = 0.05, hi: float = 0.95) -> tuple[float, float]:
    """(GPU-seconds submitted, seconds) over the central 90% of submissions.

    Real traces start and end thin (Philly: a few jobs in its first two weeks),
    so the load over the whole span understates the load jobs actually meet."""
    bounds = busy_bounds(trace, lo, hi)
    if bounds is None:
        return sum(j.gpu_seconds for j in trace.jobs), max(trace.span, 1.0)
    a, b = bounds
    if b - a <= 0:
        return sum(j.gpu_seconds for j in trace.jobs), max(trace.span, 1.0)
    return sum(j.gpu_seconds for j in trace.jobs if a <= j.submit <= b), b - a


def shared_spec(sizing: Sizing, cells: str = "node") -> dict[str, Any]:
    return node_spec(sizing.nodes, sizing.quotas, cells=cells, demand=sizing.demand, min_cells=sizing.min_cells)


def build_engine(scheme: str, spec_dict: dict[str, Any], *, config: EngineConfig | None = None,
                 preemption_policy: Any = "none", queue_policy: Any = "fifo") -> Engine:
    if scheme not in SCHEMES:
        raise ValueError(f"scheme: must be one of {', '.join(SCHEMES)}, got {scheme!r}")
    spec = load_spec(spec_dict)
    alloc: QuotaAllocator | Allocator
    if scheme in ("quota", "private-quota"):
        alloc = QuotaAllocator(spec)
    else:
        from ..allocator import Allocator
        alloc = Allocator(spec, binding="static" if scheme == "hived-static" else "dynamic")
    import dataclasses
    # no person reads a simulated job's waiting reason: skip writing them (speed). HiveD's
    # evaluation queues FIFO without backfill (YARN-CS): backfill only when the caller asks
    config = dataclasses.replace(config or EngineConfig(backfill=False), wait_reasons=False)
    return Engine(alloc, queue_policy=queue_policy, preemption_policy=preemption_policy, config=config)


def private_specs(trace: Trace, sizing: Sizing) -> dict[str, dict[str, Any]]:
    """tenant -> spec dict of its private cluster: its quota in whole nodes.

    Jobs larger than that can never start there (``size_cluster`` makes
    quotas large enough; a given ``--spec`` may not)."""
    return {t: private_spec(t, gpus) for t, gpus in sizing.quotas.items()}


def sizing_from_spec(spec_dict: str | dict[str, Any], trace: Trace) -> Sizing:
    """Sizing read from a given spec (its nodes and VC GPUs); tenants must be its VCs."""
    spec = load_spec(spec_dict)
    missing = sorted(set(trace.tenants) - set(spec.vcs))
    if missing:
        raise ValueError(f"spec: trace tenants {missing[:5]} are not VCs of the spec "
                         f"(VCs: {', '.join(sorted(spec.vcs))})")
    nodes = sum(len(c.cells) * (c.gpus_per_level[-1] // c.node_gpus) for c in spec.chains.values())
    gpus = spec.total_gpus
    demand: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    for j in trace.jobs:
        demand[j.tenant][level_for(j.gpus_per_pod)] += j.gpu_seconds
    return Sizing(nodes, {v: spec.vc_gpus(v) for v in spec.vcs}, offered_load(trace, gpus),
                  {t: dict(d) for t, d in demand.items()}, gang_cells(trace))
