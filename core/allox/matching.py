"""AlloX §3.1-3.2: scheduling as a min-cost bipartite matching.

A job placed k-th *from last* on a machine delays itself and the k-1 jobs
after it, so it contributes k times its processing time to the total
completion time. With n jobs and m machines the cost of job j in slot
(machine i, k) is ``Q[j, m*(k-1) + i] = k * P[j, i] + D[j, i]`` where
``D[j, i] = omega_i - a_j`` is what job j has already waited plus the time
until machine i frees (§3.2; omega_i = now for an idle machine). The
assignment of jobs to slots minimising the sum of Q is an optimal schedule
when all jobs are queued (Lemma 3.1); scipy solves the rectangular
assignment problem directly (n rows, n*m columns).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment

# Stand-in for "cannot run there": large enough to never be chosen when a
# finite slot exists, finite so that the solver accepts the matrix.
INFEASIBLE = 1e15


@dataclass(frozen=True)
class Schedule:
    """The solved matching, turned into per-machine job orders."""

    order: tuple[tuple[int, ...], ...]  # order[i] = job rows on machine i, first to run first
    cost: float                          # sum of Q over the matching (= total completion time, D = 0)
    slots: tuple[tuple[int, int], ...]   # slots[j] = (machine i, k-from-last) of job row j

    def first_job(self, machine: int) -> int | None:
        """Row of the job that machine ``machine`` should start now (Algorithm 2, lines 8-13)."""
        jobs = self.order[machine]
        return jobs[0] if jobs else None

    def machine_of(self, job: int) -> int:
        return self.slots[job][0]


# processing times (jobs x machines), or the D matrix of the same shape
Matrix = Sequence[Sequence[float]] | np.ndarray


def _as_matrix(P: Matrix) -> np.ndarray:
    arr = np.asarray(P, dtype=float)
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"P must be a non-empty jobs x machines matrix, got shape {arr.shape}")
    if np.isnan(arr).any() or (arr <= 0).any():
        raise ValueError("P: processing times must be > 0 (use inf for a machine a job cannot use)")
    return arr


def cost_matrix(P: Matrix, D: Matrix | None = None, positions: int | None = None) -> np.ndarray:
    """Q = [P 2P ... nP] + [D D ... D], shape (n, m * positions).

    ``positions`` (default n) caps how many slots each machine offers; it
    must be at least ceil(n / m) so every job has a slot.
    """
    p = _as_matrix(P)
    n, m = p.shape
    k = n if positions is None else int(positions)
    if k * m < n:
        raise ValueError(f"positions={k} gives {k * m} slots for {n} jobs on {m} machines")
    d = np.zeros_like(p) if D is None else np.asarray(D, dtype=float)
    if d.shape != p.shape:
        raise ValueError(f"D must have P's shape {p.shape}, got {d.shape}")
    p = np.where(np.isinf(p), INFEASIBLE, p)
    ks = np.arange(1, k + 1, dtype=float)
    # column m*(k-1)+i  <->  (machine i, k-th from last)
    q: np.ndarray = ks[None, :, None] * p[:, None, :] + d[:, None, :]
    return q.reshape(n, k * m)


def solve(P: Matrix, D: Matrix | None = None, positions: int | None = None) -> Schedule:
    """Min-cost matching of jobs to (machine, position) slots, as a Schedule."""
    q = cost_matrix(P, D, positions)
    n = q.shape[0]
    m = np.asarray(P).shape[1]
    rows, cols = linear_sum_assignment(q)
    slots = [(0, 0)] * n   # every row is matched: cost_matrix checked k * m >= n
    per_machine: list[list[tuple[int, int]]] = [[] for _ in range(m)]
    for j, c in zip(rows.tolist(), cols.tolist()):
        i, k = c % m, c // m + 1
        slots[j] = (i, k)
        per_machine[i].append((k, j))
    cost = float(q[rows, cols].sum())
    if cost >= INFEASIBLE:
        raise ValueError("some job can run on none of the machines")
    # largest k-from-last runs first
    order = tuple(tuple(j for _, j in sorted(lst, reverse=True)) for lst in per_machine)
    return Schedule(order=order, cost=cost, slots=tuple(slots))


def total_completion(P: Matrix, order: Sequence[Sequence[int]], start: Sequence[float] | None = None) -> float:
    """Sum of completion times when machine i runs ``order[i]`` back to back from ``start[i]`` (default 0)."""
    p = _as_matrix(P)
    total = 0.0
    for i, jobs in enumerate(order):
        t = 0.0 if start is None else float(start[i])
        for j in jobs:
            t += p[j, i]
            total += t
    if math.isinf(total):
        raise ValueError("a job was ordered onto a machine it cannot run on")
    return total
