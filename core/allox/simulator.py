"""An event-driven simulator of AlloX's setting: machines of several kinds,
one job per machine, jobs arriving over time (AlloX, EuroSys '20, §3.2, §5.1).

Dispatchers see *estimated* processing times (``SimJob.times``); jobs run
for their *true* times (``truth``; default: the estimates). Non-preemptive
dispatchers call ``state.start(job, machine)`` from ``dispatch(now, state)``;
SRPT (preemptive, the paper's lower bound) has its own loop,
``simulate_srpt``. No wall clock: time is whatever unit the jobs use.
"""
from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from .fairness import progress_std, value
from .model import Machine, SimJob


class Dispatcher(Protocol):
    name: str

    def dispatch(self, now: float, state: SimState) -> None: ...


@dataclass
class Running:
    job: SimJob
    machine: int
    start: float
    expected_end: float   # from the estimate: what schedulers may know
    end: float            # from the truth: when it really finishes


class SimState:
    """What a dispatcher may look at and do at one instant."""

    def __init__(self, machines: Sequence[Machine], users: Sequence[str],
                 truth: Mapping[str, Mapping[str, float]], memory_total_gb: float | None = None):
        self.machines = list(machines)
        self.users = list(users)
        self.capacity: dict[str, int] = {}
        for m in self.machines:
            self.capacity[m.kind] = self.capacity.get(m.kind, 0) + 1
        self.memory_total_gb = memory_total_gb
        self.queue: list[SimJob] = []            # arrival order
        self.running: dict[int, Running] = {}    # machine -> Running
        self.progress: dict[str, float] = {u: 0.0 for u in self.users}
        self.now = 0.0
        self._truth = truth
        self._values: dict[str, float] = {}
        self.started: list[tuple[float, str, int]] = []   # (time, job id, machine)

    # --- queries -------------------------------------------------------
    def idle_machines(self) -> list[int]:
        return [m.index for m in self.machines if m.index not in self.running]

    def omega(self, machine: int) -> float:
        """Earliest time machine ``machine`` is expected free (§3.2's omega_i)."""
        r = self.running.get(machine)
        return self.now if r is None else max(self.now, r.expected_end)

    def kind(self, machine: int) -> str:
        return self.machines[machine].kind

    def value(self, job: SimJob, kind: str) -> float:
        return value(job, kind, self.capacity, self.memory_total_gb)

    # --- the one action ------------------------------------------------
    def start(self, job: SimJob, machine: int) -> None:
        if machine in self.running:
            raise ValueError(f"machine {machine} is busy with {self.running[machine].job.id}")
        if job not in self.queue:
            raise ValueError(f"job {job.id} is not queued")
        kind = self.kind(machine)
        if math.isinf(job.time_on(kind)):
            raise ValueError(f"job {job.id} cannot run on a {kind} machine")
        self.queue.remove(job)
        true_t = float(self._truth.get(job.id, job.times).get(kind, job.time_on(kind)))
        self.running[machine] = Running(job, machine, self.now, self.now + job.time_on(kind), self.now + true_t)
        v = self.value(job, kind)
        self._values[job.id] = v
        self.progress[job.user] = self.progress.get(job.user, 0.0) + v
        self.started.append((self.now, job.id, machine))

    def finish(self, machine: int) -> Running:
        r = self.running.pop(machine)
        self.progress[r.job.user] -= self._values.pop(r.job.id)
        if abs(self.progress[r.job.user]) < 1e-12:
            self.progress[r.job.user] = 0.0
        return r


@dataclass
class SimResult:
    policy: str
    completion: dict[str, float]           # job id -> completion time - arrival
    finish: dict[str, float]               # job id -> finish time
    kind_of: dict[str, str]                # job id -> kind it ran on (SRPT: where it finished)
    makespan: float
    busy: dict[str, float]                 # kind -> machine-time busy
    progress_std: float                    # time-averaged std of users' progress
    users: dict[str, str] = field(default_factory=dict)  # job id -> user

    @property
    def avg_completion(self) -> float:
        return sum(self.completion.values()) / len(self.completion) if self.completion else 0.0

    def utilization(self, capacity: Mapping[str, int]) -> dict[str, float]:
        span = self.makespan or 1.0
        return {k: self.busy.get(k, 0.0) / (capacity[k] * span) for k in capacity}


def _check(jobs: Sequence[SimJob], machines: Sequence[Machine]) -> None:
    if not machines:
        raise ValueError("no machines")
    for pos, m in enumerate(machines):
        if m.index != pos:
            raise ValueError(f"machines[{pos}].index is {m.index}; indices must be 0..{len(machines) - 1} in order")
    kinds = {m.kind for m in machines}
    ids = set()
    for j in jobs:
        if j.id in ids:
            raise ValueError(f"duplicate job id {j.id!r}")
        ids.add(j.id)
        if not kinds & set(j.times):
            raise ValueError(f"job {j.id} runs on {sorted(j.times)}, the cluster has only {sorted(kinds)}")


def simulate(jobs: Sequence[SimJob], machines: Sequence[Machine], dispatcher: Dispatcher, *,
             truth: Mapping[str, Mapping[str, float]] | None = None,
             users: Sequence[str] | None = None, memory_total_gb: float | None = None,
             on_event: Callable[[float], None] | None = None) -> SimResult:
    """Replay ``jobs`` through ``dispatcher``; returns completion times and utilisation."""
    _check(jobs, machines)
    users = list(users) if users is not None else sorted({j.user for j in jobs})
    st = SimState(machines, users, truth or {}, memory_total_gb)
    arrivals = sorted(jobs, key=lambda j: (j.arrival, j.id))
    ai = 0
    ends: list[tuple[float, int]] = []
    completion: dict[str, float] = {}
    finish: dict[str, float] = {}
    kind_of: dict[str, str] = {}
    busy: dict[str, float] = {}
    std_area, last_t = 0.0, 0.0
    while ai < len(arrivals) or st.queue or st.running:
        t_next = arrivals[ai].arrival if ai < len(arrivals) else math.inf
        if ends:
            t_next = min(t_next, ends[0][0])
        if math.isinf(t_next):
            raise RuntimeError(f"{dispatcher.name}: {len(st.queue)} jobs queued, nothing running and "
                               f"no arrivals left (first: {st.queue[0].id})")
        std_area += progress_std(st.progress, users) * (t_next - last_t)
        last_t = st.now = t_next
        while ends and ends[0][0] <= t_next:
            _, mach = heapq.heappop(ends)
            r = st.finish(mach)
            finish[r.job.id] = r.end
            completion[r.job.id] = r.end - r.job.arrival
            kind_of[r.job.id] = st.kind(mach)
            busy[st.kind(mach)] = busy.get(st.kind(mach), 0.0) + r.end - r.start
        while ai < len(arrivals) and arrivals[ai].arrival <= t_next:
            st.queue.append(arrivals[ai])
            ai += 1
        if st.queue and len(st.running) < len(st.machines):
            before = set(st.running)
            dispatcher.dispatch(t_next, st)
            for mach in set(st.running) - before:
                heapq.heappush(ends, (st.running[mach].end, mach))
        if on_event:
            on_event(t_next)
    makespan = max(finish.values(), default=0.0)
    return SimResult(dispatcher.name, completion, finish, kind_of, makespan, busy,
                     std_area / makespan if makespan else 0.0, {j.id: j.user for j in jobs})


def simulate_srpt(jobs: Sequence[SimJob], machines: Sequence[Machine], *,
                  truth: Mapping[str, Mapping[str, float]] | None = None,
                  users: Sequence[str] | None = None) -> SimResult:
    """Preemptive SRPT with free migration (the paper's unrealistic lower bound).

    At every event jobs are taken shortest remaining time first (on their
    best kind), each on a free machine of its fastest kind still free; work
    is tracked as the fraction done, so a job moved from CPU to GPU keeps
    its progress.
    """
    _check(jobs, machines)
    users = list(users) if users is not None else sorted({j.user for j in jobs})
    truth = truth or {}
    cap: dict[str, int] = {}
    for m in machines:
        cap[m.kind] = cap.get(m.kind, 0) + 1
    true_t = {j.id: {k: float(truth.get(j.id, j.times).get(k, j.time_on(k))) for k in j.times} for j in jobs}
    arrivals = sorted(jobs, key=lambda j: (j.arrival, j.id))
    ai, now = 0, 0.0
    left: dict[str, float] = {}            # job id -> fraction of work left
    live: dict[str, SimJob] = {}
    completion: dict[str, float] = {}
    finish: dict[str, float] = {}
    kind_of: dict[str, str] = {}
    busy: dict[str, float] = {}
    std_area = 0.0
    while ai < len(arrivals) or live:
        while ai < len(arrivals) and arrivals[ai].arrival <= now:
            j = arrivals[ai]
            live[j.id], left[j.id] = j, 1.0
            ai += 1
        # shortest estimated remaining time (on the job's best kind) first; each
        # takes its favourite kind, or any other free kind when that is full
        # (moving back later is free); run at true speed
        order = sorted(live.values(), key=lambda j: (left[j.id] * j.best_time, j.arrival, j.id))
        free = dict(cap)
        assigned: dict[str, str] = {}
        for j in order:
            kinds = sorted((k for k in j.times if free.get(k, 0) > 0), key=lambda k: (j.time_on(k), k))
            if kinds:
                assigned[j.id] = kinds[0]
                free[kinds[0]] -= 1
            if not any(free.values()):
                break
        nxt = arrivals[ai].arrival if ai < len(arrivals) else math.inf
        for jid, k in assigned.items():
            nxt = min(nxt, now + left[jid] * true_t[jid][k])
        if math.isinf(nxt):
            raise RuntimeError("SRPT: live jobs but none can run")
        dt = nxt - now
        prog = {u: 0.0 for u in users}
        for jid, k in assigned.items():
            j = live[jid]
            prog[j.user] = prog.get(j.user, 0.0) + value(j, k, cap)
            busy[k] = busy.get(k, 0.0) + dt
            left[jid] -= dt / true_t[jid][k]
            if left[jid] <= 1e-9:
                finish[jid], completion[jid], kind_of[jid] = nxt, nxt - j.arrival, k
                del live[jid], left[jid]
        std_area += progress_std(prog, users) * dt
        now = nxt
    makespan = max(finish.values(), default=0.0)
    return SimResult("srpt", completion, finish, kind_of, makespan, busy,
                     std_area / makespan if makespan else 0.0, {j.id: j.user for j in jobs})
