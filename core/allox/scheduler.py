"""AlloX's online scheduler (AlloX, EuroSys '20, Algorithm 2) and AlloX+ (§4.4).

``AlloX.dispatch`` runs Algorithm 2 once per idle machine i: take the jobs
of the ceil(alpha*n) users with the lowest progress, build
Q = [P 2P ... nP] + [D ... D] over *all* machines (busy ones enter through
omega_i in D), solve the matching and start the job matched first on i, if
any. When the chosen users have no job for i, more users are added one at a
time (§4.4 "temporarily increase alpha"); if still none, i stays idle until
the next event - a job may rather wait for a GPU than take a CPU now.

``AlloXPlus`` is the heuristic for large queues: jobs waiting longer than a
timeout go first (oldest first, each on its fastest idle kind); the rest
take (job, idle kind) pairs shortest processing time first, a job taking a
slower kind only if it would still finish no later than by waiting for its
favourite kind (the wait estimated from the shorter work queued ahead of it
there). O(n log n + m) per round.
"""
from __future__ import annotations

import math

import numpy as np

from .fairness import lowest_progress_users
from .matching import Schedule, solve
from .model import SimJob
from .simulator import SimState


def allox_match(state: SimState, jobs: list[SimJob]) -> Schedule:
    """Lines 4-7 of Algorithm 2: the matching over all machines for ``jobs``."""
    kinds = [m.kind for m in state.machines]
    P = np.array([[j.time_on(k) for k in kinds] for j in jobs], dtype=float)
    omega = np.array([state.omega(i) for i in range(len(kinds))])
    arrival = np.array([j.arrival for j in jobs])
    return solve(P, omega[None, :] - arrival[:, None])


def allox_pick(state: SimState, machine: int, jobs: list[SimJob], now: float) -> SimJob | None:
    """Lines 4-13 of Algorithm 2 for one set of jobs: the job matched first on ``machine``."""
    if not jobs:
        return None
    row = allox_match(state, jobs).first_job(machine)
    return None if row is None else jobs[row]


class AlloX:
    """Algorithm 2 as a simulator dispatcher (and the core of AlloXPolicy)."""

    def __init__(self, alpha: float = 1.0, widen: bool = True, max_jobs: int = 64):
        if not 0 <= alpha <= 1:
            raise ValueError(f"alpha must be in [0, 1], got {alpha!r}")
        if max_jobs < 1:
            raise ValueError(f"max_jobs must be >= 1, got {max_jobs!r}")
        self.alpha, self.widen, self.max_jobs = alpha, widen, max_jobs
        self.name = f"allox(a={alpha:g})"

    def candidates(self, state: SimState, users: list[str]) -> list[SimJob]:
        chosen = set(users)
        # oldest first; the cap keeps the matrix small when queues build up
        return [j for j in state.queue if j.user in chosen][: self.max_jobs]

    def dispatch(self, now: float, state: SimState) -> None:
        # Algorithm 2 for every idle machine. Machines idle at the same instant
        # see the same matching until a start changes someone's progress, so
        # one solve serves them all: start the first job matched to the
        # lowest-numbered idle machine that has one, update, solve again.
        while state.queue:
            idle = state.idle_machines()
            if not idle:
                return
            waiting = {j.user for j in state.queue}
            ranked = lowest_progress_users(state.progress, waiting, 1.0, len(waiting))
            take = len(lowest_progress_users(state.progress, waiting, self.alpha, len(state.users)))
            while True:
                jobs = self.candidates(state, ranked[:take])
                sched = allox_match(state, jobs)
                hit = next(((i, row) for i in idle if (row := sched.first_job(i)) is not None), None)
                if hit is not None:
                    state.start(jobs[hit[1]], hit[0])
                    break
                if not self.widen or take >= len(ranked):
                    return          # every idle machine waits for the next event
                take += 1


class AlloXPlus:
    """The §4.4 heuristic: timed-out jobs first, then shortest (job, kind) pairs."""

    def __init__(self, timeout: float = math.inf):
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0, got {timeout!r}")
        self.timeout = timeout
        self.name = "allox+"

    def dispatch(self, now: float, state: SimState) -> None:
        idle: dict[str, list[int]] = {}
        for i in state.idle_machines():
            idle.setdefault(state.kind(i), []).append(i)
        if not idle:
            return
        # when a busy machine of each kind next frees up (for the "worth waiting?" test)
        next_free = {k: min((r.expected_end for r in state.running.values() if state.kind(r.machine) == k),
                            default=math.inf) for k in state.capacity}
        for job, kind in plan_allox_plus(state.queue, idle, next_free, now, self.timeout, state.capacity):
            state.start(job, idle[kind].pop())


def plan_allox_plus(queue: list[SimJob], idle: dict[str, list[int]] | dict[str, int],
                    next_free: dict[str, float], now: float, timeout: float = math.inf,
                    capacity: dict[str, int] | None = None) -> list[tuple[SimJob, str]]:
    """The AlloX+ assignment for one round: a list of (job, kind).

    ``idle`` gives the idle machines (or their count) per kind; ``next_free``
    when a *busy* machine of each kind is expected to free up (inf: none
    busy), used while that kind has no idle machine left; ``capacity`` the
    machines per kind (default 1), over which queued work is spread. Pure function so that the benchmark times it alone.
    """
    free = {k: (v if isinstance(v, int) else len(v)) for k, v in idle.items()}
    out: list[tuple[SimJob, str]] = []
    taken: set[str] = set()
    late = [j for j in queue if now - j.arrival > timeout]
    for j in sorted(late, key=lambda j: (j.arrival, j.id)):
        kinds = sorted((t, k) for k, t in j.times.items() if free.get(k, 0) > 0)
        if kinds:
            out.append((j, kinds[0][1]))
            free[kinds[0][1]] -= 1
            taken.add(j.id)
    if not any(free.values()):
        return out
    rest = [j for j in queue if j.id not in taken]
    # expected wait for a job's favourite kind: the work queued ahead of it
    # there (jobs shorter on that kind), spread over that kind's machines
    machines = dict(capacity or {})
    ahead: dict[str, float] = {}
    wait_fav: dict[str, float] = {}
    for j in sorted(rest, key=lambda j: (j.best_time, j.arrival, j.id)):
        fav = j.favorite
        base = 0.0 if free.get(fav, 0) > 0 else max(next_free.get(fav, math.inf) - now, 0.0)
        wait_fav[j.id] = base + ahead.get(fav, 0.0) / max(machines.get(fav, 1), 1)
        ahead[fav] = ahead.get(fav, 0.0) + j.best_time
    pairs = sorted((t, j.arrival, j.id, k, j) for j in rest for k, t in j.times.items() if free.get(k, 0) > 0)
    for t, _, jid, k, j in pairs:
        if jid in taken or free[k] <= 0:
            continue
        if k != j.favorite and t > wait_fav[jid] + j.best_time:
            continue  # waiting for the favourite kind finishes sooner
        out.append((j, k))
        free[k] -= 1
        taken.add(jid)
        if not any(free.values()):
            break
    return out
