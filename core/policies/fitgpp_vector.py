"""eq. 1-4 over numpy columns: FitGpp's victim choice at engine scale.

``fitgpp.choose`` works on ``Candidate`` tuples and is what the tests check
by hand. With thousands of running BE jobs, building those tuples and testing
eq. 2 one job at a time costs tens of milliseconds per TE arrival. This module
keeps one row per running single-node BE job (node index, its CPUs, RAM and
GPUs, eq. 1 size, grace period) in growing numpy columns, refreshed only for
jobs whose usage entry in the ClusterView changed (the engine replaces a
job's usage dict when it binds it, so identity tells), and evaluates eq. 2-4
for all rows at once. It returns the same victim as ``fitgpp.choose`` (same
scores, ties to the smallest job id); jobs spread over several nodes, gang TE
jobs and the no-fit fallback are handed back to the tuple code.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from .fitgpp import size

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
        self.rows: dict[str, tuple] = {}        # job id -> (slot, usage object, grace)
        self.node_index: dict[str, int] = {}
        self.node_names: list[str] = []

    def _nodes(self, view) -> None:
        if len(self.node_index) != len(view.nodes) or any(n not in self.node_index for n in view.nodes):
            self.node_index = {n: i for i, n in enumerate(view.nodes)}
            self.node_names = list(view.nodes)
            self.rows.clear()                    # node indices changed: rebuild every row
            self.cols = _Columns()

    def _row(self, jid: str, raw, grace: float, view) -> Optional[int]:
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

    def best(self, pod, records, view, s: float, cap: float, chain: Optional[str] = None):
        self._nodes(view)
        self._forget_stale(len(records))
        # the hot loop (5,000 jobs per TE arrival): locals only, one cache probe per job;
        # a job's grace period is fixed at submit, so its usage object alone says "changed"
        usage_get = view.usage.get
        rows_get = self.rows.get
        slots: list[int] = []
        add = slots.append
        for rec in records:
            jid = rec.job_id
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
        ids = [rec.job_id for rec in records]
        pre = [rec.preemptions or 0 for rec in records]
        idx = np.fromiter(slots, dtype=np.int64, count=len(slots))
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
        ok = np.fromiter(pre, dtype=np.int64, count=len(pre)) < cap
        ok &= col.c[idx] + free_c[node] + EPS >= pod[0]
        ok &= col.m[idx] + free_m[node] + EPS >= pod[1]
        ok &= col.g[idx] + free_g[node] + EPS >= pod[2]
        if chain is not None:
            chains = np.array([nodes[n].chain == chain for n in names])
            ok &= chains[node]
        if not ok.any():
            return NO_FIT
        masked = np.where(ok, score, math.inf)
        low = float(masked.min())
        tied = np.flatnonzero(masked == low)
        k = min(tied, key=lambda i: ids[i]) if len(tied) > 1 else int(tied[0])
        return ids[k], low, float(sz[k]), float(gp[k])
