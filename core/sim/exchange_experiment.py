"""HiveD (earlier version) §5.4: what cell exchange gains each tenant on the Philly trace.

A fluid, per-VC replay of the Philly trace (shipped with hived,
Jeon et al. ATC'19, CC-BY-4.0): every VC (tenant) runs its jobs FIFO on its
guaranteed GPUs (a gang larger than the VC is capped to it); nodes are
8-GPU cells (level 4 of core/sim/cluster.py's chain). Every ``window``
hours each VC's ExchangeProxy looks at its state and posts:

- an *offer* of its idle cells for the next window, when its queue is empty
  (cells beyond both its current use and its peak use of the last window);
- one-cell *requests* for the next window while jobs wait (as many as its
  queued GPUs need, at most its own cell count).

The real ExchangeArbiter (core/exchange.py) with the chosen policy
(balanced cell exchange by default) matches them and moves capacity
through ``transfer``; here the allocator is ``CapacityBook``, which keeps
GPU counts per VC instead of cell trees (the cell-level rules are the
allocator's and are tested in tests/exchange with the real one). When a
window ends the borrowed cells go back; borrower jobs that no longer fit
are preempted (latest started first) and requeued at the head, keeping
their progress.

Per VC, as in Tables 4 and 5: *effective utilisation* of its guaranteed
cells without exchange (GPU-hours used / (GPUs x span)); *increase via
exchanges*: GPU-hours its jobs ran on borrowed cells, counted only up to
the GPU-hours it contributed (the paper counts only cells "exchanged
successfully"), over the same denominator; *gain* = increase / effective;
*relative fluctuation* (eq. 3): sqrt(mean((x_i - C)^2)) / C over hourly
samples x_i of the GPUs its jobs would use if each ran from submission
(its demand), C = its GPUs. Two assignments: ``default`` (VC shares of
vc_nodes.csv, the Helios authors' assignment) and ``balanced`` (shares of
the GPU-hours each VC requests in the replayed span, §5.4). The cluster is
scaled so that the total GPUs are ``1 / load`` times the mean demand.
"""
from __future__ import annotations

import csv
import heapq
import math
import os
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from hived.core.allox.workload import PHILLY, TraceJob, philly_rows
from hived.core.exchange import ExchangeArbiter
from hived.core.spec import load_spec

from .cluster import NODE_GPUS, node_spec

if TYPE_CHECKING:
    from hived.core.spec import ClusterSpec

VC_NODES = os.path.join(os.path.dirname(PHILLY), "vc_nodes.csv")
CHAIN, LEVEL = "NODE", 4
# HiveD (earlier version) Table 4 (default assignment) and Table 5 (balanced):
# tenant -> (effective, increase, gain[, RF])
PAPER_T4 = {"res-e": (52.3, 13.5, 25.8), "prod-a": (25.3, 2.9, 11.5), "res-d": (16.1, 1.5, 9.2),
            "prod-e": (60.0, 5.3, 8.8), "res-c": (74.9, 5.2, 7.0), "res-a": (57.6, 4.0, 6.9),
            "prod-b": (44.8, 2.5, 5.6), "prod-c": (78.6, 2.9, 3.6), "res-b": (74.8, 0.9, 1.2),
            "res-f": (45.1, 0.4, 0.9), "prod-d": (47.0, 0.4, 0.8)}
PAPER_T5 = {"res-d": (24.80, 14.27, 57.53, 1.58), "prod-a": (48.39, 18.39, 38.00, 0.85),
            "res-c": (50.58, 13.17, 26.04, 0.82), "res-b": (55.03, 13.24, 24.06, 0.65),
            "res-e": (57.14, 9.77, 17.10, 0.7), "res-a": (60.49, 8.99, 14.87, 0.36),
            "prod-b": (62.53, 6.06, 9.69, 0.44), "prod-c": (68.32, 6.57, 9.61, 0.41),
            "res-f": (65.74, 6.07, 9.23, 0.38), "prod-d": (55.38, 4.10, 7.41, 0.41),
            "prod-e": (55.07, 2.64, 4.79, 0.38)}


@dataclass
class Config:
    start: str = "2017-10-01"
    end: str = "2017-12-15"
    window_h: float = 10.0
    load: float = 0.5               # mean demand / total GPUs
    policy: str = "balanced"
    assignments: Sequence[str] = ("default", "balanced")
    trace: str = PHILLY
    vc_nodes: str = VC_NODES

    def check(self) -> None:
        t0, t1 = _ts(self.start, "start"), _ts(self.end, "end")
        if not t0 < t1:
            raise ValueError(f"end: must be after start ({self.start} .. {self.end})")
        if not self.window_h > 0:
            raise ValueError(f"window_h: must be > 0, got {self.window_h}")
        if not 0 < self.load <= 1:
            raise ValueError(f"load: must be in (0, 1], got {self.load}")
        bad = [a for a in self.assignments if a not in ("default", "balanced")]
        if bad:
            raise ValueError(f"assignments: unknown {', '.join(bad)}; known: default, balanced")


def _ts(day: str, what: str) -> float:
    try:
        return datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        raise ValueError(f"{what}: expected YYYY-MM-DD, got {day!r}") from None


class CapacityBook:
    """The experiment's allocator: guaranteed GPUs per VC, moved by ``transfer``."""

    def __init__(self, spec: ClusterSpec, sim: _Sim):
        self.spec, self.sim = spec, sim
        self.cap = {v: sum(n * spec.chains[c].gpus_per_level[lv - 1] for (c, lv), n in s.cells.items())
                    for v, s in spec.vcs.items()}
        self.lent = {v: 0 for v in self.cap}   # own GPUs lent out now

    def transfer(self, lender: str, borrower: str, chain: str, level: int, count: int) -> list[str]:
        gpus = count * self.spec.chains[chain].gpus_per_level[level - 1]
        if self.sim.used[lender] > self.cap[lender] - gpus and not self.sim.returning:
            raise ValueError(f"{lender} uses {self.sim.used[lender]} of {self.cap[lender]} GPUs; "
                             f"cannot lend {gpus}")
        for v in (lender, borrower):
            self.sim.account(v, self.sim.now)   # usage so far counts against the old split
        self.cap[lender] -= gpus
        self.cap[borrower] += gpus
        if self.sim.returning:   # cells going home: `borrower` is their owner
            self.lent[borrower] -= gpus
        else:
            self.lent[lender] += gpus
        return self.sim.shrink(lender)   # a VC over its capacity preempts (only at a return)


@dataclass
class VCRow:
    vc: str
    gpus: int
    effective: float        # used / (gpus * span), no exchange
    increase: float         # reciprocal GPU-hours on borrowed cells / (gpus * span)
    borrowed_used: float    # all GPU-hours on borrowed cells / (gpus * span)
    gain: float
    rf: float
    contributed_h: float
    consumed_h: float
    surplus_h: float
    preempted: int          # jobs preempted when borrowed cells went back
    wait_h_before: float    # mean queueing delay, no exchange
    wait_h_after: float


@dataclass
class AssignmentResult:
    assignment: str
    rows: list[VCRow]
    exchanges: int
    failed: int


@dataclass
class Result:
    config: Config
    total_gpus: int
    span_h: float
    results: dict[str, AssignmentResult] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["config"]["assignments"] = list(self.config.assignments)
        return d


class _Sim:
    """One replay; with an arbiter, exchanges happen every window."""

    def __init__(self, jobs: list[TraceJob], spec: ClusterSpec, t0: float, t1: float, window: float,
                 policy: str | None):
        self.jobs, self.t0, self.t1, self.window = jobs, t0, t1, window
        self.book = CapacityBook(spec, self)
        self.arbiter = ExchangeArbiter(self.book, spec, policy) if policy else None
        vcs = list(spec.vcs)
        self.used = {v: 0 for v in vcs}
        self.queue: dict[str, deque[list[Any]]] = {v: deque() for v in vcs}   # [job index, gpus, remaining]
        # job index -> (gpus, end, start)
        self.running: dict[str, dict[int, tuple[int, float, float]]] = {v: {} for v in vcs}
        self.area = {v: 0.0 for v in vcs}               # GPU-seconds used
        self.area_borrowed = {v: 0.0 for v in vcs}      # GPU-seconds above its own capacity
        self.peak = {v: 0 for v in vcs}                 # peak use since the last window
        self.last = {v: t0 for v in vcs}
        self.first_start: dict[int, float] = {}
        self.preempted = {v: 0 for v in vcs}
        self.returning = False
        self.now = t0
        self.events: list[tuple[float, int, str, Any]] = []   # (time, tie-break, kind, payload)
        self.seq = 0
        self.quota = dict(self.book.cap)

    def own(self, vc: str) -> int:
        """GPUs of the VC's own cells it may use now (quota minus lent)."""
        return self.quota[vc] - self.book.lent[vc]

    def account(self, vc: str, now: float) -> None:
        a, b = max(self.last[vc], self.t0), min(now, self.t1)
        if b > a:
            self.area[vc] += self.used[vc] * (b - a)
            self.area_borrowed[vc] += max(0, self.used[vc] - self.own(vc)) * (b - a)
        self.last[vc] = now

    def _push(self, t: float, kind: str, data: Any) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, data))

    def _fill(self, vc: str, now: float) -> None:
        q, cap = self.queue[vc], self.book.cap[vc]
        while q and self.used[vc] + min(q[0][1], self.quota[vc]) <= cap:
            idx, g, rem = q.popleft()
            g = min(g, self.quota[vc])
            self.used[vc] += g
            self.peak[vc] = max(self.peak[vc], self.used[vc])
            self.first_start.setdefault(idx, now)
            self.running[vc][idx] = (g, now + rem, now)
            self._push(now + rem, "end", (vc, idx, now + rem))

    def shrink(self, vc: str) -> list[str]:
        """Preempt the VC's latest-started jobs until it fits its capacity again."""
        out: list[str] = []
        now = self.now
        self.account(vc, now)
        while self.used[vc] > self.book.cap[vc] and self.running[vc]:
            idx = max(self.running[vc], key=lambda i: self.running[vc][i][2])
            g, end, _ = self.running[vc].pop(idx)
            self.used[vc] -= g
            self.queue[vc].appendleft([idx, g, end - now])
            self.preempted[vc] += 1
            out.append(str(idx))
        return out

    def _exchange_round(self, now: float) -> None:
        arb = self.arbiter
        assert arb is not None   # window events exist only with an arbiter
        for vc in self.used:
            self.account(vc, now)
        self.returning = True
        arb.tick(now)                     # borrowed cells of ended windows go back
        self.returning = False
        end = now + self.window
        for vc in sorted(self.used):
            proxy = arb.proxy(vc)
            if self.queue[vc]:
                want = sum(j[1] for j in self.queue[vc])
                cells = min(math.ceil(want / NODE_GPUS), self.quota[vc] // NODE_GPUS)
                for _ in range(cells):
                    proxy.request(CHAIN, LEVEL, 1, now, end, now=now)
            else:
                spare = self.book.cap[vc] - max(self.used[vc], self.peak[vc])
                spare = min(spare, self.own(vc))
                n = spare // NODE_GPUS
                if n > 0:
                    try:
                        proxy.offer(CHAIN, LEVEL, int(n), now, end, now=now)
                    except ValueError:
                        pass      # all of its cells are already promised
            self.peak[vc] = self.used[vc]
        arb.match(now)
        for vc in self.used:
            self._fill(vc, now)

    def run(self) -> None:
        for n, j in enumerate(self.jobs):
            self._push(j.submit, "arrive", n)
        if self.arbiter:
            t = self.t0
            while t < self.t1:
                self._push(t, "window", None)
                t += self.window
        while self.events:
            now, _, kind, data = heapq.heappop(self.events)
            if now > self.t1 and kind != "end":
                continue
            self.now = now
            if kind == "arrive":
                j = self.jobs[data]
                self.account(j.vc, now)
                self.queue[j.vc].append([data, j.gpus, j.duration])
                self._fill(j.vc, now)
            elif kind == "end":
                vc, idx, end = data
                r = self.running[vc].get(idx)
                if r is None or r[1] != end:
                    continue       # preempted since (a stale end event)
                self.account(vc, now)
                self.running[vc].pop(idx)
                self.used[vc] -= r[0]
                self._fill(vc, now)
            else:
                self._exchange_round(now)
        for vc in self.used:
            self.account(vc, self.t1)


def _default_shares(path: str) -> dict[str, float]:
    with open(path, newline="") as f:
        return {r["vc"]: float(r["node num"]) for r in csv.DictReader(f)}


def _cells(shares: dict[str, float], total_cells: int) -> dict[str, int]:
    """Whole 8-GPU cells per VC in proportion to ``shares`` (largest remainder, at least one each)."""
    tot = sum(shares.values())
    raw = {v: total_cells * s / tot for v, s in shares.items()}
    out = {v: max(1, int(x)) for v, x in raw.items()}
    for v in sorted(raw, key=lambda v: -(raw[v] - int(raw[v]))):
        if sum(out.values()) >= total_cells:
            break
        out[v] += 1
    return out


def relative_fluctuation(samples: Sequence[float], capacity: float) -> float:
    """Eq. 3 of HiveD (earlier version): RMS distance of usage from the VC size, over the VC size."""
    if capacity <= 0:
        raise ValueError(f"capacity: must be > 0, got {capacity}")
    if not samples:
        return 0.0
    return math.sqrt(sum((x - capacity) ** 2 for x in samples) / len(samples)) / capacity


def hourly_demand(jobs: Sequence[TraceJob], vc: str, t0: float, t1: float) -> list[float]:
    """GPUs the VC's jobs would hold each hour if every job ran from its submission."""
    hours = int(math.ceil((t1 - t0) / 3600))
    diff = [0.0] * (hours + 1)
    for j in jobs:
        if j.vc != vc:
            continue
        a = max(0, int((j.submit - t0) // 3600))
        b = min(hours, int(math.ceil((j.submit + j.duration - t0) / 3600)))
        if b > a:
            diff[a] += j.gpus
            diff[b] -= j.gpus
    out, level = [], 0.0
    for h in range(hours):
        level += diff[h]
        out.append(level)
    return out


def _waits(sim: _Sim, jobs: Sequence[TraceJob], vc: str) -> list[float]:
    """Seconds each of the VC's jobs waited for its first start, in one run."""
    return [sim.first_start[i] - j.submit for i, j in enumerate(jobs) if j.vc == vc and i in sim.first_start]


def run(cfg: Config, on_stage: Callable[[str], None] | None = None,
        rows: list[TraceJob] | None = None) -> Result:
    cfg.check()
    t0, t1 = _ts(cfg.start, "start"), _ts(cfg.end, "end")
    default = _default_shares(cfg.vc_nodes)
    src = rows if rows is not None else philly_rows(cfg.trace)
    jobs = sorted((j for j in src if j.vc in default and t0 <= j.submit < t1 and j.duration > 0),
                  key=lambda j: j.submit)
    if not jobs:
        raise ValueError(f"no jobs of the VCs in {cfg.vc_nodes} between {cfg.start} and {cfg.end}")
    span = t1 - t0
    demand_h = {v: 0.0 for v in default}
    for j in jobs:
        demand_h[j.vc] += j.gpus * min(j.duration, t1 - j.submit) / 3600
    mean_demand = sum(demand_h.values()) / (span / 3600)
    total_cells = max(len(default), int(round(mean_demand / cfg.load / NODE_GPUS)))
    res = Result(cfg, total_cells * NODE_GPUS, span / 3600)
    for assignment in cfg.assignments:
        shares = default if assignment == "default" else {v: max(h, 1e-9) for v, h in demand_h.items()}
        cells = _cells(shares, total_cells)
        spec = load_spec(node_spec(sum(cells.values()), {v: n * NODE_GPUS for v, n in cells.items()}))
        if on_stage:
            on_stage(f"{assignment}: no exchange")
        base = _Sim(jobs, spec, t0, t1, cfg.window_h * 3600, None)
        base.run()
        if on_stage:
            on_stage(f"{assignment}: {cfg.policy} exchange")
        ex = _Sim(jobs, spec, t0, t1, cfg.window_h * 3600, cfg.policy)
        ex.run()
        arbiter = ex.arbiter
        assert arbiter is not None   # built with a policy
        out = []
        ledger = arbiter.ledger
        for vc in sorted(cells):
            c = cells[vc] * NODE_GPUS
            denom = c * span
            eff = base.area[vc] / denom
            borrowed_h = ex.area_borrowed[vc] / 3600
            e = ledger.entry(vc)
            inc = min(borrowed_h, e.contributed) * 3600 / denom
            wb, wa = (_waits(s, jobs, vc) for s in (base, ex))
            out.append(VCRow(vc, c, eff, inc, ex.area_borrowed[vc] / denom, inc / eff if eff else 0.0,
                             relative_fluctuation(hourly_demand(jobs, vc, t0, t1), c),
                             e.contributed, e.consumed, e.surplus, ex.preempted[vc],
                             sum(wb) / len(wb) / 3600 if wb else 0.0, sum(wa) / len(wa) / 3600 if wa else 0.0))
        out.sort(key=lambda r: -r.gain)
        states = [e.state.value for e in arbiter.exchanges.values()]
        res.results[assignment] = AssignmentResult(assignment, out, len(states), states.count("failed"))
    return res
