"""eq. 1-4 over numpy columns: FitGpp's victim choice at engine scale.

``fitgpp.choose`` works on ``Candidate`` tuples and is what the tests check
by hand. With thousands of running BE jobs, building those tuples and testing
eq. 2 one job at a time costs tens of milliseconds per TE arrival. This module
keeps one row per running single-node BE job (node index, its CPUs, RAM and
GPUs, eq. 1 size, grace period) in growing numpy columns, refreshed only for
jobs whose usage entry in the ClusterView changed (the engine replaces a
job's usage dict when it binds it, so identity tells), and evaluates eq. 2-4
for all rows at once. It returns the same victim as ``fitgpp.choose`` (same
scores, ties to the smallest job id), and, given the policy's random
generator, the single-pod fallback as well (same rule, its own random draws);
jobs spread over several nodes and gang TE jobs are handed back to the tuple
code.
"""
from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .fitgpp import Vec, size
from .preemption_order import under_cap

if TYPE_CHECKING:
    from ..engine_records import JobRecord
    from ..engine_view import ClusterView, NodeUsage
    from .fitgpp import Choice

# best(): the eq. 4 winner as (job id, score, size, grace period)
Best = tuple[str, float, float, float]

EPS = 1e-9
NO_FIT = "no-fit"  # best(): eq. 4 is empty (the caller goes straight to the fallback)


class _Columns:
    """Growing numpy columns, one row per slot; a free list recycles slots."""

    NAMES = ("node", "c", "m", "g", "size", "grace")

    def __init__(self, capacity: int = 1024):
        self.node = np.zeros(capacity, dtype=np.int64)
        self.c = np.zeros(capacity)
        self.m = np.zeros(capacity)
        self.g = np.zeros(capacity)
        self.size = np.zeros(capacity)
        self.grace = np.zeros(capacity)
        self.used = 0
        self.free_slots: list[int] = []

    def alloc(self) -> int:
        if self.free_slots:
            return self.free_slots.pop()
        if self.used == len(self.c):
            for name in self.NAMES:
                old = getattr(self, name)
                new = np.zeros(2 * len(old), dtype=old.dtype)
                new[: len(old)] = old
                setattr(self, name, new)
        self.used += 1
        return self.used - 1


class VectorScorer:
    """Per-policy cache of the running BE jobs' rows, and the eq. 4 choice over it.

    ``best(job_pod, records, view, s, cap)`` -> ``(job_id, score, size, grace)``
    of the eq. 4 winner; ``NO_FIT`` when no job satisfies eq. 4 (the
    fallback's turn); ``None`` when it cannot answer alone (a candidate spans
    several nodes or is not in the view: ``fitgpp.choose`` decides). ``records`` are the engine's candidate JobRecords.
    """

    def __init__(self) -> None:
        self.cols = _Columns()
        self.rows: dict[str, tuple[int, Any, float]] = {}   # job id -> (slot, usage object, grace)
        self._idx: np.ndarray = np.zeros(0, dtype=np.int64)   # slots of the last best() call's records
        self._elig: np.ndarray | None = None                  # ... which of them are under the cap
        self.node_index: dict[str, int] = {}
        self.node_names: list[str] = []

    def _nodes(self, view: ClusterView) -> None:
        if len(self.node_index) != len(view.nodes) or any(n not in self.node_index for n in view.nodes):
            self.node_index = {n: i for i, n in enumerate(view.nodes)}
            self.node_names = list(view.nodes)
            self.rows.clear()                    # node indices changed: rebuild every row
            self.cols = _Columns()

    def _row(self, jid: str, raw: dict[str, NodeUsage] | None, grace: float,
             view: ClusterView) -> int | None:
        """The slot of a single-node job, (re)built when its usage object changed; None if multi-node."""
        hit = self.rows.get(jid)
        if raw is None or len(raw) != 1:
            return None
        (node, (g, c, m)), = raw.items()
        st = view.nodes.get(node)
        if st is None:
            return None
        slot = hit[0] if hit is not None else self.cols.alloc()
        col = self.cols
        col.node[slot] = self.node_index[node]
        col.c[slot], col.m[slot], col.g[slot] = float(c), float(m), float(g)
        col.size[slot] = size((float(c), float(m), float(g)),
                              (float(st.cpus_total), float(st.memory_total_gb), float(st.gpus_total)))
        col.grace[slot] = grace
        self.rows[jid] = (slot, raw, grace)
        return slot

    def _forget_stale(self, live: int) -> None:
        """Keep the cache from growing without bound as jobs finish."""
        if len(self.rows) > 4 * live + 1024:
            self.rows.clear()
            self.cols = _Columns()

    def best(self, pod: Vec, records: Sequence[JobRecord], view: ClusterView, s: float, cap: float,
             chain: str | None = None, rng: random.Random | None = None) -> Best | Choice | str | None:
        self._nodes(view)
        self._forget_stale(len(records))
        # the hot loop (5,000 jobs per TE arrival): locals only, one cache probe per job;
        # a job's grace period is fixed at submit, so its usage object alone says "changed"
        usage_get = view.usage.get
        rows_get = self.rows.get
        slots: list[int] = []
        ids: list[str] = []
        pre: list[int] = []
        add, add_id, add_pre = slots.append, ids.append, pre.append
        for rec in records:                      # one pass: slot, id and preemption count
            jid = rec.job_id
            add_id(jid)
            add_pre(rec.preemptions or 0)
            raw = usage_get(jid)
            hit = rows_get(jid)
            if hit is not None and hit[1] is raw:
                add(hit[0])
                continue
            slot = self._row(jid, raw, rec.request.grace_period, view)
            if slot is None:
                return None                      # a multi-node or unplaced job: tuple code decides
            add(slot)
        if not slots:
            return None
        idx = np.fromiter(slots, dtype=np.int64, count=len(slots))
        self._idx = idx
        col = self.cols
        node = col.node[idx]
        sz, gp = col.size[idx], col.grace[idx]
        max_size, max_gp = float(sz.max()), float(gp.max())
        # the same float operations as fitgpp.choose, so both pick the same job on near-ties
        ka = 1.0 / max_size if max_size > 0 else 0.0
        kb = s / max_gp if max_gp > 0 else 0.0
        score = sz * ka + gp * kb
        # free resources of every node, as eq. 2's N
        nodes = view.nodes
        names = self.node_names
        free_c = np.fromiter((nodes[n].cpus_free for n in names), dtype=float, count=len(names))
        free_m = np.fromiter((nodes[n].memory_free_gb for n in names), dtype=float, count=len(names))
        free_g = np.fromiter((nodes[n].gpus_free for n in names), dtype=float, count=len(names))
        ok = under_cap(np.fromiter(pre, dtype=np.int64, count=len(pre)), cap)
        if chain is not None:
            chains = np.array([nodes[n].chain == chain for n in names])
        elig = ok.copy() if rng is not None else None
        ok &= col.c[idx] + free_c[node] + EPS >= pod[0]
        ok &= col.m[idx] + free_m[node] + EPS >= pod[1]
        ok &= col.g[idx] + free_g[node] + EPS >= pod[2]
        if chain is not None:
            ok &= chains[node]
        self._elig = elig
        if not ok.any():
            if rng is None:
                return NO_FIT
            return self._fallback(pod, ids, pre, cap, node, score, (free_c, free_m, free_g),
                                  chains[node] if chain is not None else None, rng)
        masked = np.where(ok, score, math.inf)
        low = float(masked.min())
        tied = np.flatnonzero(masked == low)
        k = min(tied, key=lambda i: ids[i]) if len(tied) > 1 else int(tied[0])
        return ids[k], low, float(sz[k]), float(gp[k])

    def _fallback(self, pod: Vec, ids: list[str], pre: list[int], cap: float, node: np.ndarray, score: np.ndarray,
                  free: tuple[np.ndarray, np.ndarray, np.ndarray], on_chain: np.ndarray | None,
                  rng: random.Random) -> Choice:
        """``fitgpp.choose``'s single-pod fallback over the columns: a random node among
        those that can host the TE job once their eligible BE jobs leave, a random
        eligible job on it, then its other eligible jobs in ascending eq. 3 score
        until the TE job fits there. Same rule as the tuple code; the random draws
        (over nodes in index order) may pick another node than it would."""
        from .fitgpp import Choice

        elig = self._elig
        assert elig is not None   # best() kept it, as it does whenever rng is given
        if on_chain is not None:
            elig = elig & on_chain
        if not elig.any():
            if not under_cap(np.asarray(pre, dtype=np.int64), cap).any():
                return Choice([], f"fitgpp: every running BE job reached the preemption cap P={cap}")
            return Choice([], "fitgpp: preempting all 0 eligible BE jobs would still not make room")
        col = self.cols
        en = node[elig]
        n_nodes = len(self.node_names)
        idx = self._idx[elig]
        tot = [f + np.bincount(en, weights=w[idx], minlength=n_nodes) for f, w in zip(free, (col.c, col.m, col.g))]
        has = np.bincount(en, minlength=n_nodes) > 0
        host = has & (tot[0] + EPS >= pod[0]) & (tot[1] + EPS >= pod[1]) & (tot[2] + EPS >= pod[2])
        hosts = np.flatnonzero(host)
        if len(hosts) == 0:
            return Choice([], f"fitgpp: preempting all {int(elig.sum())} eligible BE jobs would still not make room")
        h = int(hosts[rng.randrange(len(hosts))]) if len(hosts) > 1 else int(hosts[0])
        on_node: list[int] = np.flatnonzero(elig & (node == h)).tolist()
        on = sorted(on_node, key=lambda k: (score[k], ids[k]))   # ascending score, ties to the smaller id
        first = on[rng.randrange(len(on))]
        avail = [float(free[0][h]), float(free[1][h]), float(free[2][h])]
        victims: list[str] = []
        for k in [first] + [k for k in on if k != first]:
            victims.append(ids[k])
            slot = self._idx[k]
            avail[0] += col.c[slot]
            avail[1] += col.m[slot]
            avail[2] += col.g[slot]
            if all(a + EPS >= p for a, p in zip(avail, pod)):
                break
        name = self.node_names[h]
        return Choice(
            victims,
            f"fitgpp fallback: no single BE job fits the TE job (eq. 2), so, as the paper does, a random "
            f"BE job ({victims[0]}) is preempted; then the lowest-scored (eq. 3) BE jobs on its node "
            f"{name} until the TE job fits there: {', '.join(victims)}",
            fallback=True,
        )
