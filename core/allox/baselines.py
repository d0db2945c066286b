"""The baselines of AlloX (EuroSys '20) (§2.2 and §5.1.1) as simulator dispatchers.

- ES: resources split equally and statically between users (machine r of a
  kind goes to user r mod n). ``order="sjf"`` (§5.1.1): each free machine of
  a user takes her job that is shortest on that kind, GPUs first.
  ``order="fcfs"`` (Table 1 / Fig. 1a): her jobs in arrival order, each on
  its favourite kind if one of her machines of it is free, else on another
  free one of hers.
- DRFF / DRFS: online DRF; the user with the least dominant share starts
  her first (DRFF: FCFS, DRFS: shortest) job, always on its favourite kind;
  a user whose job's kind is full is skipped for this round.
- DRFA: GPUs converted to CPUs at an average speedup, then online DRF over
  the pooled resource; a job may take any free machine, favourite first.
- JSQ+: jobs in arrival order each take the free machine where they finish
  soonest; a job waits only when no machine is free (this is the reading
  under which Fig. 4a's example gives 100 minutes).
- SJF+: one queue per kind, sorted by the time on that kind; when several
  machines are free, the shortest (job, kind) pair goes first.
SRPT is ``simulator.simulate_srpt``.
"""
from __future__ import annotations

import math
from collections.abc import Callable

from .model import SimJob
from .simulator import Dispatcher, SimState


def _idle_by_kind(state: SimState, allowed: set[int] | None = None) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for i in state.idle_machines():
        if allowed is None or i in allowed:
            out.setdefault(state.kind(i), []).append(i)
    return out


class EqualShare:
    def __init__(self, order: str = "sjf"):
        if order not in ("sjf", "fcfs"):
            raise ValueError(f"order must be 'sjf' or 'fcfs', got {order!r}")
        self.order = order
        self.name = "es" if order == "sjf" else "es-fcfs"

    def owners(self, state: SimState) -> dict[int, str]:
        seen: dict[str, int] = {}
        out = {}
        for m in state.machines:
            r = seen.get(m.kind, 0)
            seen[m.kind] = r + 1
            out[m.index] = state.users[r % len(state.users)]
        return out

    def dispatch(self, now: float, state: SimState) -> None:
        owner = self.owners(state)
        for user in state.users:
            mine = {i for i, u in owner.items() if u == user}
            jobs = [j for j in state.queue if j.user == user]
            if self.order == "fcfs":
                for j in jobs:
                    idle = _idle_by_kind(state, mine)
                    if not idle:
                        break
                    kinds = sorted((t, k) for k, t in j.times.items() if idle.get(k))
                    if kinds:
                        state.start(j, idle[kinds[0][1]][0])
                continue
            # sjf: GPUs first, then the other kinds
            for kind in sorted(_idle_by_kind(state, mine), key=lambda k: (k != "gpu", k)):
                for i in _idle_by_kind(state, mine).get(kind, []):
                    fits = [j for j in state.queue if j.user == user and kind in j.times]
                    if not fits:
                        break
                    state.start(min(fits, key=lambda j: (j.time_on(kind), j.arrival, j.id)), i)


class OnlineDRF:
    """DRFF (``order="fcfs"``), DRFS (``"sjf"``) and, with ``speedup``, DRFA."""

    def __init__(self, order: str = "fcfs", speedup: float | None = None):
        if order not in ("sjf", "fcfs"):
            raise ValueError(f"order must be 'sjf' or 'fcfs', got {order!r}")
        if speedup is not None and not speedup > 0:
            raise ValueError(f"speedup must be > 0, got {speedup!r}")
        self.order, self.speedup = order, speedup
        self.name = "drfa" if speedup else ("drff" if order == "fcfs" else "drfs")

    def _weight(self, state: SimState, kind: str) -> float:
        """Share of the cluster one machine of ``kind`` is."""
        if self.speedup is None:
            return 1.0 / state.capacity[kind]
        # DRFA: one GPU counts as `speedup` CPUs in one pooled resource
        units = {k: (self.speedup if k == "gpu" else 1.0) for k in state.capacity}
        pool = sum(units[k] * n for k, n in state.capacity.items())
        return units[kind] / pool

    def _shares(self, state: SimState) -> dict[str, float]:
        # per user, per kind; dominant = max over kinds (pooled for DRFA)
        per: dict[str, dict[str, float]] = {u: {} for u in state.users}
        for r in state.running.values():
            k = state.kind(r.machine)
            key = "pool" if self.speedup else k
            d = per.setdefault(r.job.user, {})
            d[key] = d.get(key, 0.0) + self._weight(state, k)
        return {u: max(d.values(), default=0.0) for u, d in per.items()}

    def _next_job(self, state: SimState, user: str) -> SimJob | None:
        jobs = [j for j in state.queue if j.user == user]
        if not jobs:
            return None
        if self.order == "fcfs":
            return jobs[0]
        return min(jobs, key=lambda j: (j.best_time, j.arrival, j.id))

    def dispatch(self, now: float, state: SimState) -> None:
        blocked: set[str] = set()
        while True:
            idle = _idle_by_kind(state)
            if not idle:
                return
            shares = self._shares(state)
            waiting = sorted({j.user for j in state.queue} - blocked, key=lambda u: (shares.get(u, 0.0), u))
            if not waiting:
                return
            user = waiting[0]
            job = self._next_job(state, user)
            assert job is not None   # a waiting user has a queued job
            if self.speedup is None:
                kinds = [job.favorite] if idle.get(job.favorite) else []
            else:
                kinds = sorted((k for k in job.times if idle.get(k)), key=lambda k: (job.time_on(k), k))
            if not kinds:
                blocked.add(user)   # her next job must wait for its kind; others may go
                continue
            state.start(job, idle[kinds[0]][0])


class JSQPlus:
    name = "jsq+"

    def dispatch(self, now: float, state: SimState) -> None:
        for j in list(state.queue):
            idle = state.idle_machines()
            if not idle:
                return
            best = min(idle, key=lambda i: (j.time_on(state.kind(i)), i))
            if not math.isinf(j.time_on(state.kind(best))):
                state.start(j, best)


class SJFPlus:
    name = "sjf+"

    def dispatch(self, now: float, state: SimState) -> None:
        idle = _idle_by_kind(state)
        pairs = sorted((t, j.arrival, j.id, k, j) for j in state.queue for k, t in j.times.items() if idle.get(k))
        done: set[str] = set()
        for _, _, jid, k, j in pairs:
            if jid in done or not idle.get(k):
                continue
            state.start(j, idle[k].pop(0))
            done.add(jid)


def make(name: str, **kw: float) -> Dispatcher:
    """A dispatcher by name: es, es-fcfs, drff, drfs, drfa, jsq+, sjf+, allox, allox+."""
    from .scheduler import AlloX, AlloXPlus

    table: dict[str, Callable[[], Dispatcher]] = {
        "es": lambda: EqualShare("sjf"), "es-fcfs": lambda: EqualShare("fcfs"),
        "drff": lambda: OnlineDRF("fcfs"), "drfs": lambda: OnlineDRF("sjf"),
        "drfa": lambda: OnlineDRF("sjf", speedup=kw.get("speedup", 4.0)),
        "jsq+": JSQPlus, "sjf+": SJFPlus,
        "allox": lambda: AlloX(alpha=kw.get("alpha", 1.0)),
        "allox+": lambda: AlloXPlus(timeout=kw.get("timeout", math.inf)),
    }
    if name not in table:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(sorted(table))}, srpt")
    return table[name]()
