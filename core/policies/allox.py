"""AlloXPolicy: AlloX's queue order as an engine QueuePolicy (docs/architecture.md).

Each round the engine hands over a VC's queued jobs; the policy returns
them in the order AlloX would start them:

1. fairness (AlloX, EuroSys '20, §3.3): users are ranked by progress, the share of the
   cluster's GPUs their running jobs hold (the engine's ``view.usage``); the
   jobs of the ceil(alpha * n) lowest users come first, the rest after them;
2. inside each group, the min-cost matching of §3.1-3.2 (core/allox) over
   as many identical GPU "machines" as GPUs are free now (at least one): a
   job's processing time is its estimated run time times its GPU count, its
   delay what it has waited; jobs go in the order of their planned start,
   ties by the shorter estimate, then submission.

Estimates come from ``hived.core.estimator.Estimator``: the job's signature
label (``labels["signature"]``) looked up in a history source, the user's
hint (``JobRequest.estimate``), the simulator's ``duration`` when
``use_duration`` is set (an oracle, for experiments), else
``default_estimate``; refined by the progress the job reported
(``rec.progress``, from ``Engine.report_progress``) over the time it ran,
and a job preempted with its progress kept is sized by what it has left.
The engine's placement is GPU-only (``JobRequest`` has no CPU
configuration), so the device-kind choice of AlloX is exercised by
core/allox's simulator, not here.

Queues longer than ``max_jobs`` (default 64) are ordered by AlloX+ (§4.4)
instead: jobs waiting longer than ``timeout`` first, then shortest first.

TE jobs stay ahead of BE jobs (``te_first``), as with FIFO, so FitGpp
preemption keeps working; the scan stops at the first job that does not fit
(no backfill), which keeps big gangs from starving.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..allox.fairness import lowest_progress_users
from ..allox.matching import solve
from ..estimator import Estimator, HistorySource
from ..jobs import JobClass

if TYPE_CHECKING:   # the engine imports the policies; they only read its records and view
    from ..engine_records import JobRecord
    from ..engine_view import ClusterView
    from ..estimator import Estimate


class AlloXPolicy:
    name = "allox"
    preserves_order = False
    te_first = True
    backfill = False

    def __init__(self, alpha: float = 1.0, history: HistorySource | None = None,
                 default_estimate: float = 3600.0, use_duration: bool = False, max_jobs: int = 64,
                 timeout: float = 4 * 3600.0):
        if not 0 < alpha <= 1:
            raise ValueError(f"alpha: must be in (0, 1], got {alpha!r}")
        if not default_estimate > 0:
            raise ValueError(f"default_estimate: must be > 0, got {default_estimate!r}")
        if max_jobs < 1:
            raise ValueError(f"max_jobs: must be >= 1, got {max_jobs!r}")
        if not timeout > 0:
            raise ValueError(f"timeout: must be > 0 seconds, got {timeout!r}")
        self.timeout = float(timeout)
        self.alpha, self.default_estimate = alpha, float(default_estimate)
        self.use_duration, self.max_jobs = use_duration, max_jobs
        self.estimator = Estimator(history)
        self._user: dict[str, str] = {}        # job id -> user, for jobs seen queued
        self._vc_of: dict[str, str] = {}       # job id -> its VC (each VC prunes only its own)
        self._users: dict[str, set[str]] = {}  # vc -> users seen

    # --- estimates ---------------------------------------------------------
    def estimate(self, rec: JobRecord, now: float | None = None) -> float:
        """The job's whole run time: history/hint (or the oracle duration), refined by
        the progress it reported (``Engine.report_progress`` sets ``rec.progress``)."""
        est = self.estimator.for_record(rec, now, oracle=self.use_duration, default=self.default_estimate)
        return self.default_estimate if est is None else est.value   # None only without a default

    def remaining(self, rec: JobRecord, now: float | None = None) -> float:
        """What is left of it: a job preempted with its progress kept needs less."""
        left = self.estimator.remaining_for(rec, now, oracle=self.use_duration, default=self.default_estimate)
        return self.default_estimate if left is None else left   # None only without a default

    def on_progress(self, rec: JobRecord, now: float) -> Estimate | None:
        """Engine hook on every progress report: refresh the job's estimate."""
        return self.estimator.for_record(rec, now, oracle=self.use_duration, default=self.default_estimate)

    # --- fairness ----------------------------------------------------------
    def progress(self, view: ClusterView) -> dict[str, float]:
        total = sum(n.gpus_total for n in view.nodes.values()) or 1
        prog: dict[str, float] = {}
        for jid, per_node in view.usage.items():
            user = self._user.get(jid)
            if user is not None:
                prog[user] = prog.get(user, 0.0) + sum(g for g, _, _ in per_node.values()) / total
        return prog

    # --- the order ---------------------------------------------------------
    def _matched(self, group: list[JobRecord], view: ClusterView, now: float) -> list[JobRecord]:
        if len(group) <= 1:
            return list(group)
        if len(group) > self.max_jobs:
            return self._plus(group, now)
        head = group
        tail: list[JobRecord] = []
        free = sum(max(0, n.gpus_free) for n in view.nodes.values())
        m = max(1, min(free, len(head)))
        est = [self.remaining(r, now) for r in head]
        size = np.array([e * max(1, r.gpus) for e, r in zip(est, head)], dtype=float)
        P = np.repeat(size[:, None], m, axis=1)
        D = np.repeat(np.array([[max(0.0, now - r.submitted)] for r in head]), m, axis=1)
        sched = solve(P, D)
        start: dict[int, float] = {}
        for order in sched.order:
            t = 0.0
            for row in order:
                start[row] = t
                t += size[row]
        ranked = sorted(range(len(head)), key=lambda i: (start[i], est[i], head[i].submitted, i))
        return [head[i] for i in ranked] + tail

    def _plus(self, group: list[JobRecord], now: float) -> list[JobRecord]:
        """AlloX+ (§4.4) for queues longer than ``max_jobs``: jobs that waited past
        ``timeout`` first (oldest first), then shortest GPU time left first;
        O(n log n) where the matching would be cubic."""
        late = sorted((r for r in group if now - r.submitted > self.timeout), key=lambda r: (r.submitted, r.job_id))
        seen = {r.job_id for r in late}
        rest = [r for r in group if r.job_id not in seen]
        size = {r.job_id: self.remaining(r, now) * max(1, r.gpus) for r in rest}
        return late + sorted(rest, key=lambda r: (size[r.job_id], r.submitted, r.job_id))

    def order(self, vc: str, queued: list[JobRecord], view: ClusterView, now: float) -> list[JobRecord]:
        for r in queued:
            self._user[r.job_id] = r.request.user
            self._vc_of[r.job_id] = vc
            self._users.setdefault(vc, set()).add(r.request.user)
        live = set(view.usage) | {r.job_id for r in queued}
        for jid in [j for j, v in self._vc_of.items() if v == vc and j not in live]:
            del self._user[jid], self._vc_of[jid]     # finished or cancelled: forget them
            self.estimator.forget(jid)
        out: list[JobRecord] = []
        for lane in ([r for r in queued if r.request.job_class is JobClass.TE],
                     [r for r in queued if r.request.job_class is not JobClass.TE]):
            if not lane:
                continue
            waiting = {r.request.user for r in lane}
            first = set(lowest_progress_users(self.progress(view), waiting, self.alpha,
                                              len(self._users.get(vc, waiting))))
            out += self._matched([r for r in lane if r.request.user in first], view, now)
            out += self._matched([r for r in lane if r.request.user not in first], view, now)
        return out
