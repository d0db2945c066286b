"""FitGpp's (OpML '19) experiment: FIFO, LRTP, RAND and FitGpp on the synthetic workload.

``simulate(jobs, policy)`` replays a workload (core/sim/fitgpp_workload.py)
with the paper's model: single-pod jobs on nodes of CPUs, RAM and GPUs, a
scheduler that decides once per simulated minute, strict FIFO with
head-of-line blocking, and for the preemptive policies TE jobs queued ahead
of BE jobs, a TE job that does not fit preempting BE jobs chosen by the
policy (core/policies/), victims holding their resources for their grace
period, then going back to the head of the BE queue with their progress kept.
The victims are chosen by the very functions the engine's PreemptionPolicy
hooks call (``fitgpp.choose``, ``lrtp.choose``, ``rand.choose``).

``run(args)`` is what ``hived simulate --workload fitgpp`` calls: it builds the
workload, runs the policies (and the optional sweep over FitGpp's s) and
returns an ``ExperimentResult`` (Table 1: slowdown percentiles, Table 2:
re-scheduling intervals, Table 3: preempted share, plus the raw slowdowns for
CDF plots). It prints and plots nothing; reports/fitgpp.py does.
"""
from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hived.core.policies import fitgpp as fitgpp_mod
from hived.core.policies import lrtp as lrtp_mod
from hived.core.policies import rand as rand_mod
from hived.core.policies.fitgpp import Candidate, Choice, Vec, size

from .fitgpp_workload import JOBS, LOAD, NODE_CPUS, NODE_GPUS, NODE_MEMORY_GB, NODES, SynthJob, generate

POLICIES = ("fifo", "lrtp", "rand", "fitgpp")
BACKENDS = ("model", "engine", "engine-hived")
CAPACITY = (float(NODE_CPUS), float(NODE_MEMORY_GB), float(NODE_GPUS))
EPS = 1e-9


@dataclass
class PolicyResult:
    policy: str
    s: float | None
    cap: float
    jobs: int
    te_slowdown: list[float]
    be_slowdown: list[float]
    intervals_min: list[int]          # preemption signal -> re-start, per preemption
    preempted_jobs: int               # jobs preempted at least once
    preemptions: int                  # preemptions in all
    fallbacks: int                    # FitGpp: TE arrivals where no single job fit (eq. 4 empty)
    makespan_min: int
    # jobs preempted once, twice, three times or more (Table 4)
    times_preempted: tuple[int, int, int] = (0, 0, 0)

    def percentiles(self, which: str, qs: Sequence[float] = (50, 95, 99)) -> list[float]:
        data = self.te_slowdown if which == "te" else self.be_slowdown
        return [float(np.percentile(data, q)) for q in qs] if data else [math.nan] * len(qs)

    def interval_percentiles(self, qs: Sequence[float] = (50, 75, 95, 99)) -> list[float]:
        return [float(np.percentile(self.intervals_min, q)) for q in qs] if self.intervals_min else [math.nan] * len(qs)

    @property
    def preempted_share(self) -> float:
        return self.preempted_jobs / self.jobs if self.jobs else 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "policy": self.policy, "s": self.s, "cap": self.cap, "jobs": self.jobs,
            "te_p50_p95_p99": self.percentiles("te"), "be_p50_p95_p99": self.percentiles("be"),
            "interval_p50_p75_p95_p99_min": self.interval_percentiles(),
            "preempted_share": self.preempted_share, "preemptions": self.preemptions,
            "fallbacks": self.fallbacks, "makespan_min": self.makespan_min,
            "times_preempted_1_2_3plus": list(self.times_preempted),
        }


@dataclass
class ExperimentResult:
    jobs: int
    seed: int
    nodes: int
    load: float
    results: dict[str, PolicyResult] = field(default_factory=dict)
    sweep: list[PolicyResult] = field(default_factory=list)
    backend: str = "model"

    def to_dict(self) -> dict[str, Any]:
        return {"jobs": self.jobs, "seed": self.seed, "nodes": self.nodes, "load": self.load, "backend": self.backend,
                "results": {k: v.summary() for k, v in self.results.items()},
                "sweep": [r.summary() for r in self.sweep]}


# ---------------------------------------------------------------------------
# the minute-tick simulator


class _Cluster:
    """Free resources per node; a node may go negative while a TE job bound
    to it waits for its victims' grace periods to end."""

    def __init__(self, nodes: int):
        self.free = [list(CAPACITY) for _ in range(nodes)]

    def best_fit(self, d: Vec) -> int:
        """The feasible node with the fewest free GPUs (then CPUs): packing."""
        best = -1
        key: tuple[float, float, float] | None = None
        for i, f in enumerate(self.free):
            if f[0] + EPS >= d[0] and f[1] + EPS >= d[1] and f[2] + EPS >= d[2]:
                k = (f[2], f[0], f[1])
                if key is None or k < key:
                    best, key = i, k
        return best

    def take(self, i: int, d: Vec) -> None:
        f = self.free[i]
        f[0] -= d[0]
        f[1] -= d[1]
        f[2] -= d[2]

    def give(self, i: int, d: Vec) -> None:
        f = self.free[i]
        f[0] += d[0]
        f[1] += d[1]
        f[2] += d[2]

    def ok(self, i: int) -> bool:
        f = self.free[i]
        return f[0] > -EPS and f[1] > -EPS and f[2] > -EPS


# (TE pod, running BE candidates, free resources per node, minute) -> victims
Chooser = Callable[[Vec, list[Candidate], dict[str, Vec], int], Choice]


def _chooser(policy: str, s: float, cap: float, seed: int) -> Chooser | None:
    capi = cap if math.isinf(cap) else int(cap)
    if policy == "fifo":
        return None
    if policy == "fitgpp":
        rng = random.Random(seed)
        return lambda pod, cands, free, now: fitgpp_mod.choose([pod], cands, free, s=s, cap=capi, rng=rng)
    if policy == "lrtp":
        return lambda pod, cands, free, now: lrtp_mod.choose([pod], cands, free, cap=capi)
    if policy == "rand":
        rng = random.Random(seed)
        return lambda pod, cands, free, now: rand_mod.choose([pod], cands, free, cap=capi, rng=rng)
    raise ValueError(f"fitgpp experiment: unknown policy {policy!r}; choose from {', '.join(POLICIES)}")


def simulate(jobs: Sequence[SynthJob], policy: str, *, nodes: int = NODES, s: float = fitgpp_mod.DEFAULT_S,
             cap: float = fitgpp_mod.DEFAULT_CAP, seed: int = 0,
             keep_load: float | None = None, te_on_arrival: bool = True,
             tick: Callable[[int], object] | None = None) -> PolicyResult | list[int]:
    """Replay ``jobs`` under ``policy``; with ``keep_load`` (FIFO only) return
    the arrival minutes that keep the load at that level instead.

    ``te_on_arrival`` (default): jobs that arrived during the last minute are
    queued, and the TE ones placed or given victims, against the cluster as
    the last round left it, before this minute's completions free anything.
    That is the paper's "when a TE job arrives ... BE jobs are suspended";
    with False, completions go first and TE jobs rarely need to preempt.
    ``tick(k)`` is told every ~1,000 finished jobs (progress bars)."""
    choose = _chooser(policy, s, cap, seed)
    n = len(jobs)
    cl = _Cluster(nodes)
    sizes = [size(j.demand, CAPACITY) for j in jobs]
    arrival = [j.arrival_min for j in jobs]
    remaining = [j.exec_min for j in jobs]       # minutes of work left
    node_of = [-1] * n
    end_at = [0] * n                             # completion minute while running
    finish = [0] * n
    preempted = [0] * n
    running_be: dict[int, None] = {}             # running BE jobs (insertion-ordered set)
    run_started = [0] * n
    intervals: list[int] = []
    signal_at: dict[int, int] = {}
    events: list[tuple[int, int, int]] = []      # (minute, kind 0=end 1=kill, job)
    te_q: deque[int] = deque()
    be_q: deque[int] = deque()                   # FIFO uses this one for everything
    bound: list[tuple[int, int]] = []            # (TE job, node) waiting for victims
    fallbacks = 0
    preemptions = 0
    done = 0
    next_arrival = 0
    cap_load = keep_load * nodes if keep_load else None
    load = [0.0, 0.0, 0.0]                       # demand in the system (calibration)
    arrivals_out = [0] * n

    def start(j: int, node: int, t: int, *, taken: bool = False) -> None:
        if not taken:
            cl.take(node, jobs[j].demand)
        node_of[j] = node
        run_started[j] = t
        end_at[j] = t + remaining[j]
        heapq.heappush(events, (end_at[j], 0, j))
        if j in signal_at:
            intervals.append(t - signal_at.pop(j))
        if not jobs[j].te:
            running_be[j] = None

    def try_queue(q: deque[int], t: int) -> None:
        while q:
            j = q[0]
            node = cl.best_fit(jobs[j].demand)
            if node < 0:
                return  # head-of-line blocking, as FIFO does
            q.popleft()
            start(j, node, t)

    def try_preempt(j: int, t: int) -> bool:
        nonlocal fallbacks, preemptions
        assert choose is not None   # FIFO never preempts
        cands = []
        for b in running_be:
            cands.append(Candidate(str(b), {str(node_of[b]): jobs[b].demand}, sizes[b],
                                   float(jobs[b].grace_min), preempted[b], float(end_at[b] - t)))
        free: dict[str, Vec] = {str(i): (f[0], f[1], f[2]) for i, f in enumerate(cl.free)}
        ch = choose(jobs[j].demand, cands, free, t)
        if not ch.victims:
            return False
        fallbacks += ch.fallback
        victims = [int(v) for v in ch.victims]
        freed: dict[int, list[float]] = {}
        for v in victims:
            nd = node_of[v]
            f = freed.setdefault(nd, [0.0, 0.0, 0.0])
            for k in range(3):
                f[k] += jobs[v].demand[k]
        d = jobs[j].demand
        target = -1
        key: tuple[float, int] | None = None
        for nd, f in freed.items():
            a = [cl.free[nd][k] + f[k] for k in range(3)]
            if all(a[k] + EPS >= d[k] for k in range(3)):
                kk = (a[2] - d[2], nd)
                if key is None or kk < key:
                    target, key = nd, kk
        if target < 0:  # the policy promised room; guard against a broken promise
            raise AssertionError(f"{policy}: victims {victims} leave no node for TE job {j}")
        for v in victims:
            del running_be[v]
            remaining[v] = end_at[v] - t           # progress up to the signal is kept
            end_at[v] = -1                         # its pending end event is now stale
            preempted[v] += 1
            preemptions += 1
            signal_at[v] = t
            heapq.heappush(events, (t + jobs[v].grace_min, 1, v))
        cl.take(target, d)                         # bind the TE job now (may over-commit)
        bound.append((j, target))
        return True

    def schedule_te(t: int) -> None:
        while te_q:
            j = te_q[0]
            node = cl.best_fit(jobs[j].demand)
            if node >= 0:
                te_q.popleft()
                start(j, node, t)
            elif try_preempt(j, t):
                te_q.popleft()
            else:
                return  # TE blocks the queue; BE jobs wait behind it

    def schedule(t: int) -> None:
        if choose is not None:
            schedule_te(t)
            if te_q:
                return
        try_queue(be_q, t)

    def arrive(j: int, t: int) -> None:
        (te_q if (jobs[j].te and choose is not None) else be_q).append(j)

    killed: list[int] = []
    t = 0
    while done < n:
        # 0. arrivals of the last minute meet the cluster as the last round left it
        if te_on_arrival and cap_load is None:
            while next_arrival < n and arrival[next_arrival] <= t:
                arrive(next_arrival, t)
                next_arrival += 1
            if choose is not None:
                schedule_te(t)
        # 1. what ended by now: completions and victims at the end of their grace period
        while events and events[0][0] <= t:
            _, kind, j = heapq.heappop(events)
            if kind == 0:
                if end_at[j] != _ or node_of[j] < 0:
                    continue  # stale end event of a job preempted meanwhile
                cl.give(node_of[j], jobs[j].demand)
                running_be.pop(j, None)
                node_of[j] = -1
                finish[j] = t
                done += 1
                if tick is not None and done & 1023 == 0:
                    tick(1024)
                if cap_load:
                    for k in range(3):
                        load[k] -= jobs[j].demand[k]
            else:
                cl.give(node_of[j], jobs[j].demand)
                node_of[j] = -1
                killed.append(j)
        # victims go back to the head of the BE queue; several at once keep submission order
        for j in sorted(killed, reverse=True):
            be_q.appendleft(j)
        killed.clear()
        # 2. TE jobs whose victims have left start now
        if bound:
            still = []
            for j, nd in bound:
                if cl.ok(nd):
                    start(j, nd, t, taken=True)
                else:
                    still.append((j, nd))
            bound = still
        # 3. arrivals, 4. scheduling
        if cap_load is None:
            while next_arrival < n and arrival[next_arrival] <= t:
                arrive(next_arrival, t)
                next_arrival += 1
            schedule(t)
        else:
            schedule(t)
            while next_arrival < n and max(load[0] / CAPACITY[0], load[1] / CAPACITY[1],
                                           load[2] / CAPACITY[2]) < cap_load:
                j = next_arrival
                arrivals_out[j] = t
                for k in range(3):
                    load[k] += jobs[j].demand[k]
                arrive(j, t)
                next_arrival += 1
                schedule(t)
        # 5. jump to the next minute where anything can change
        nxt = []
        if events:
            nxt.append(events[0][0])
        if cap_load is None and next_arrival < n:
            nxt.append(arrival[next_arrival])
        if not nxt:
            if done < n:
                raise AssertionError(f"{policy}: stuck at minute {t} with {n - done} jobs unfinished")
            break
        t = max(t, min(nxt))  # == t when a victim with grace 0 must leave this very minute

    if tick is not None and n & 1023:
        tick(n & 1023)
    if cap_load is not None:
        return arrivals_out
    te_sd: list[float] = []
    be_sd: list[float] = []
    for j, job in enumerate(jobs):
        wait = finish[j] - job.arrival_min - job.exec_min
        (te_sd if job.te else be_sd).append(1.0 + wait / job.exec_min)
    return PolicyResult(policy, s if policy == "fitgpp" else None, cap, n, te_sd, be_sd, intervals,
                        sum(1 for p in preempted if p), preemptions, fallbacks, max(finish) if n else 0,
                        histogram(preempted))


def histogram(preempted: Sequence[int]) -> tuple[int, int, int]:
    """Jobs preempted exactly once, exactly twice, and three times or more."""
    return (sum(1 for p in preempted if p == 1), sum(1 for p in preempted if p == 2),
            sum(1 for p in preempted if p >= 3))


def calibrate_arrivals(jobs: Sequence[SynthJob], *, nodes: int = NODES, load: float = LOAD,
                       tick: Callable[[int], object] | None = None) -> list[int]:
    """Arrival minutes keeping the load at ``load`` when the jobs run under FIFO (paper §4.2)."""
    minutes = simulate(jobs, "fifo", nodes=nodes, keep_load=load, tick=tick)
    assert isinstance(minutes, list)   # with keep_load: the arrival minutes
    return minutes


def _model_replay(jobs: Sequence[SynthJob], policy: str, **kw: Any) -> PolicyResult:
    res = simulate(jobs, policy, **kw)
    assert isinstance(res, PolicyResult)   # without keep_load: the policy's result
    return res


# ---------------------------------------------------------------------------
# the entry point of `hived simulate --workload fitgpp`


def parse_list(text: str, kind: Callable[[str], Any] = float, what: str = "value") -> list[Any]:
    try:
        out = [kind(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"fitgpp experiment: {what} must be a comma-separated list, got {text!r}") from None
    if not out:
        raise ValueError(f"fitgpp experiment: {what} list is empty")
    return out


@dataclass(frozen=True)
class Config:
    """The experiment's settings, checked (bad values raise ValueError naming the option)."""

    jobs: int = JOBS
    seed: int = 0
    policies: tuple[str, ...] = POLICIES
    s: float = fitgpp_mod.DEFAULT_S
    cap: float = fitgpp_mod.DEFAULT_CAP
    s_sweep: tuple[float, ...] = ()
    load: float = LOAD
    nodes: int = NODES
    rand_repeats: int = 1
    backend: str = "model"   # "model": the paper's minute-tick model; "engine"/"engine-hived": core/engine.py

    @property
    def simulations(self) -> int:
        """Replays the run makes, the FIFO calibration included (for progress bars)."""
        return 1 + sum(self.rand_repeats if p == "rand" else 1 for p in self.policies) + len(self.s_sweep)


def config_from(args: object) -> Config:
    """A Config from an argparse-like namespace; missing or None attributes take the defaults.

    ``policies`` and ``s_sweep`` may be comma-separated strings or lists;
    ``cap`` may be ``inf`` (no cap); ``backend`` is ``model`` (the paper's
    minute-tick model, default), ``engine`` (the real Engine with the quota
    allocator, fitgpp_engine.py) or ``engine-hived`` (the Engine with HiveD's
    buddy cell allocator).
    """
    def g(k: str, d: Any) -> Any:
        return getattr(args, k) if getattr(args, k, None) is not None else d

    n = int(g("jobs", JOBS))
    if n < 1:
        raise ValueError(f"fitgpp experiment: --jobs must be >= 1, got {n}")
    pols = g("policies", list(POLICIES))
    pols = parse_list(pols, str, "policies") if isinstance(pols, str) else list(pols)
    for p in pols:
        if p not in POLICIES:
            raise ValueError(f"fitgpp experiment: unknown policy {p!r}; choose from {', '.join(POLICIES)}")
    s = float(g("s", fitgpp_mod.DEFAULT_S))
    if s < 0:
        raise ValueError(f"fitgpp experiment: --s must be >= 0, got {s:g}")
    cap = float(g("cap", fitgpp_mod.DEFAULT_CAP))
    if cap < 0 or (not math.isinf(cap) and cap != int(cap)):
        raise ValueError(f"fitgpp experiment: --cap P must be a whole number >= 0 or inf, got {cap:g}")
    sweep = g("s_sweep", ())
    sweep = (parse_list(sweep, float, "s sweep") if sweep.strip() else []) if isinstance(sweep, str) else list(sweep)
    if any(v < 0 for v in sweep):
        raise ValueError(f"fitgpp experiment: --s-sweep values must be >= 0, got {sweep}")
    load = float(g("load", LOAD))
    if load <= 0:
        raise ValueError(f"fitgpp experiment: --load must be > 0, got {load:g}")
    nodes = int(g("nodes", NODES))
    if nodes < 1:
        raise ValueError(f"fitgpp experiment: --nodes must be >= 1, got {nodes}")
    repeats = int(g("rand_repeats", 1))
    if repeats < 1:
        raise ValueError(f"fitgpp experiment: --rand-repeats must be >= 1, got {repeats}")
    backend = str(g("backend", "model"))
    if backend not in BACKENDS:
        raise ValueError(f"fitgpp experiment: --backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    return Config(n, int(g("seed", 0)), tuple(pols), s, cap, tuple(float(v) for v in sweep), load, nodes, repeats,
                  backend)


def run(args: object, *, on_stage: Callable[[str], None] | None = None,
        tick: Callable[[int], object] | None = None) -> ExperimentResult:
    """Run the experiment from a Config or an argparse-like namespace (see ``config_from``).

    ``on_stage(label)`` is told before each replay and ``tick(k)`` as jobs
    finish, so a caller can show progress; core itself prints nothing.
    """
    cfg = args if isinstance(args, Config) else config_from(args)
    stage: Callable[[str], None] = on_stage or (lambda _label: None)
    stage("workload (FIFO calibration)")
    jobs = generate(cfg.jobs, cfg.seed, load=cfg.load, nodes=cfg.nodes, tick=tick)
    res = ExperimentResult(cfg.jobs, cfg.seed, cfg.nodes, cfg.load, backend=cfg.backend)
    if cfg.backend.startswith("engine"):
        from functools import partial

        from .fitgpp_engine import simulate_engine
        replay: Callable[..., PolicyResult] = partial(
            simulate_engine, allocator="hived" if cfg.backend == "engine-hived" else "quota")
    else:
        replay = _model_replay
    for p in cfg.policies:
        runs = []
        for k in range(cfg.rand_repeats if p == "rand" else 1):
            stage(p if k == 0 else f"{p} #{k + 1}")
            runs.append(replay(jobs, p, nodes=cfg.nodes, s=cfg.s, cap=cfg.cap, seed=cfg.seed + 1000 * k, tick=tick))
        res.results[p] = runs[0] if len(runs) == 1 else _pool(runs)
    for sv in cfg.s_sweep:
        stage(f"fitgpp s={sv:g}")
        res.sweep.append(replay(jobs, "fitgpp", nodes=cfg.nodes, s=sv, cap=cfg.cap, seed=cfg.seed, tick=tick))
    return res


def _pool(runs: list[PolicyResult]) -> PolicyResult:
    """Runs of a random policy as one sample: distributions pooled, counts averaged."""
    a, k = runs[0], len(runs)

    def cat(attr: str) -> list[Any]:
        return [x for r in runs for x in getattr(r, attr)]

    def mean_count(i: int) -> int:
        return round(sum(r.times_preempted[i] for r in runs) / k)

    return PolicyResult(a.policy, a.s, a.cap, a.jobs, cat("te_slowdown"), cat("be_slowdown"), cat("intervals_min"),
                        round(sum(r.preempted_jobs for r in runs) / k), round(sum(r.preemptions for r in runs) / k),
                        round(sum(r.fallbacks for r in runs) / k), max(r.makespan_min for r in runs),
                        (mean_count(0), mean_count(1), mean_count(2)))
