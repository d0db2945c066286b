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
    m = _Model(jobs, policy, nodes=nodes, cap=cap, choose=_chooser(policy, s, cap, seed), keep_load=keep_load,
               tick=tick)
    m.run(te_on_arrival)
    if tick is not None and m.n & 1023:
        tick(m.n & 1023)
    if m.cap_load is not None:
        return m.arrivals_out
    te_sd: list[float] = []
    be_sd: list[float] = []
    for j, job in enumerate(jobs):
        wait = m.finish[j] - job.arrival_min - job.exec_min
        (te_sd if job.te else be_sd).append(1.0 + wait / job.exec_min)
    return PolicyResult(policy, s if policy == "fitgpp" else None, cap, m.n, te_sd, be_sd, m.intervals,
                        sum(1 for p in m.preempted if p), m.preemptions, m.fallbacks, max(m.finish) if m.n else 0,
                        histogram(m.preempted))


class _Model:
    """The state of one ``simulate`` run: the cluster, the queues, and each job's progress."""

    def __init__(self, jobs: Sequence[SynthJob], policy: str, *, nodes: int, cap: float, choose: Chooser | None,
                 keep_load: float | None, tick: Callable[[int], object] | None) -> None:
        self.jobs, self.policy, self.choose, self.tick = jobs, policy, choose, tick
        n = self.n = len(jobs)
        self.cl = _Cluster(nodes)
        self.sizes = [size(j.demand, CAPACITY) for j in jobs]
        self.arrival = [j.arrival_min for j in jobs]
        self.remaining = [j.exec_min for j in jobs]       # minutes of work left
        self.node_of = [-1] * n
        self.end_at = [0] * n                             # completion minute while running
        self.finish = [0] * n
        self.preempted = [0] * n
        self.running_be: dict[int, None] = {}             # running BE jobs (insertion-ordered set)
        self.run_started = [0] * n
        self.intervals: list[int] = []
        self.signal_at: dict[int, int] = {}
        self.events: list[tuple[int, int, int]] = []      # (minute, kind 0=end 1=kill, job)
        self.te_q: deque[int] = deque()
        self.be_q: deque[int] = deque()                   # FIFO uses this one for everything
        self.bound: list[tuple[int, int]] = []            # (TE job, node) waiting for victims
        self.fallbacks = 0
        self.preemptions = 0
        self.done = 0
        self.next_arrival = 0
        self.cap_load = keep_load * nodes if keep_load else None
        self.load = [0.0, 0.0, 0.0]                       # demand in the system (calibration)
        self.arrivals_out = [0] * n
        self.killed: list[int] = []

    def start(self, j: int, node: int, t: int, *, taken: bool = False) -> None:
        if not taken:
            self.cl.take(node, self.jobs[j].demand)
        self.node_of[j] = node
        self.run_started[j] = t
        self.end_at[j] = t + self.remaining[j]
        heapq.heappush(self.events, (self.end_at[j], 0, j))
        if j in self.signal_at:
            self.intervals.append(t - self.signal_at.pop(j))
        if not self.jobs[j].te:
            self.running_be[j] = None

    def try_queue(self, q: deque[int], t: int) -> None:
        while q:
            j = q[0]
            node = self.cl.best_fit(self.jobs[j].demand)
            if node < 0:
                return  # head-of-line blocking, as FIFO does
            q.popleft()
            self.start(j, node, t)

    def try_preempt(self, j: int, t: int) -> bool:
        assert self.choose is not None   # FIFO never preempts
        jobs, cl = self.jobs, self.cl
        cands = []
        for b in self.running_be:
            cands.append(Candidate(str(b), {str(self.node_of[b]): jobs[b].demand}, self.sizes[b],
                                   float(jobs[b].grace_min), self.preempted[b], float(self.end_at[b] - t)))
        free: dict[str, Vec] = {str(i): (f[0], f[1], f[2]) for i, f in enumerate(cl.free)}
        ch = self.choose(jobs[j].demand, cands, free, t)
        if not ch.victims:
            return False
        self.fallbacks += ch.fallback
        victims = [int(v) for v in ch.victims]
        target = self._victims_node(j, victims)
        for v in victims:
            del self.running_be[v]
            self.remaining[v] = self.end_at[v] - t        # progress up to the signal is kept
            self.end_at[v] = -1                           # its pending end event is now stale
            self.preempted[v] += 1
            self.preemptions += 1
            self.signal_at[v] = t
            heapq.heappush(self.events, (t + jobs[v].grace_min, 1, v))
        cl.take(target, jobs[j].demand)                   # bind the TE job now (may over-commit)
        self.bound.append((j, target))
        return True

    def _victims_node(self, j: int, victims: list[int]) -> int:
        """The node where ``victims`` leaving makes room for TE job ``j``, the tightest fit."""
        jobs, cl = self.jobs, self.cl
        freed: dict[int, list[float]] = {}
        for v in victims:
            nd = self.node_of[v]
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
            raise AssertionError(f"{self.policy}: victims {victims} leave no node for TE job {j}")
        return target

    def schedule_te(self, t: int) -> None:
        te_q = self.te_q
        while te_q:
            j = te_q[0]
            node = self.cl.best_fit(self.jobs[j].demand)
            if node >= 0:
                te_q.popleft()
                self.start(j, node, t)
            elif self.try_preempt(j, t):
                te_q.popleft()
            else:
                return  # TE blocks the queue; BE jobs wait behind it

    def schedule(self, t: int) -> None:
        if self.choose is not None:
            self.schedule_te(t)
            if self.te_q:
                return
        self.try_queue(self.be_q, t)

    def arrive(self, j: int, t: int) -> None:
        (self.te_q if (self.jobs[j].te and self.choose is not None) else self.be_q).append(j)

    def run(self, te_on_arrival: bool) -> None:
        t = 0
        while self.done < self.n:
            # 0. arrivals of the last minute meet the cluster as the last round left it
            if te_on_arrival and self.cap_load is None:
                self._arrivals(t)
                if self.choose is not None:
                    self.schedule_te(t)
            self._ended(t)   # 1. completions and victims at the end of their grace period
            # 2. TE jobs whose victims have left start now
            if self.bound:
                still = []
                for j, nd in self.bound:
                    if self.cl.ok(nd):
                        self.start(j, nd, t, taken=True)
                    else:
                        still.append((j, nd))
                self.bound = still
            # 3. arrivals, 4. scheduling
            if self.cap_load is None:
                self._arrivals(t)
                self.schedule(t)
            else:
                self._keep_load(t, self.cap_load)
            # 5. jump to the next minute where anything can change
            nxt = []
            if self.events:
                nxt.append(self.events[0][0])
            if self.cap_load is None and self.next_arrival < self.n:
                nxt.append(self.arrival[self.next_arrival])
            if not nxt:
                if self.done < self.n:
                    raise AssertionError(f"{self.policy}: stuck at minute {t} with {self.n - self.done} "
                                         f"jobs unfinished")
                break
            t = max(t, min(nxt))  # == t when a victim with grace 0 must leave this very minute

    def _arrivals(self, t: int) -> None:
        while self.next_arrival < self.n and self.arrival[self.next_arrival] <= t:
            self.arrive(self.next_arrival, t)
            self.next_arrival += 1

    def _keep_load(self, t: int, cap_load: float) -> None:
        """Calibration: admit the next jobs while the load stays under ``cap_load``."""
        self.schedule(t)
        load, jobs = self.load, self.jobs
        while self.next_arrival < self.n and max(load[0] / CAPACITY[0], load[1] / CAPACITY[1],
                                                 load[2] / CAPACITY[2]) < cap_load:
            j = self.next_arrival
            self.arrivals_out[j] = t
            for k in range(3):
                load[k] += jobs[j].demand[k]
            self.arrive(j, t)
            self.next_arrival += 1
            self.schedule(t)

    def _ended(self, t: int) -> None:
        """Completions and victims whose grace period is over, by ``t``; victims go back to the
        head of the BE queue (several at once keep submission order)."""
        events, jobs, cl, node_of, killed = self.events, self.jobs, self.cl, self.node_of, self.killed
        while events and events[0][0] <= t:
            when, kind, j = heapq.heappop(events)
            if kind == 0:
                if self.end_at[j] != when or node_of[j] < 0:
                    continue  # stale end event of a job preempted meanwhile
                cl.give(node_of[j], jobs[j].demand)
                self.running_be.pop(j, None)
                node_of[j] = -1
                self.finish[j] = t
                self.done += 1
                if self.tick is not None and self.done & 1023 == 0:
                    self.tick(1024)
                if self.cap_load:
                    for k in range(3):
                        self.load[k] -= jobs[j].demand[k]
            else:
                cl.give(node_of[j], jobs[j].demand)
                node_of[j] = -1
                killed.append(j)
        for j in sorted(killed, reverse=True):
            self.be_q.appendleft(j)
        killed.clear()


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
