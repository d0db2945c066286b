"""The engine's books: what it knows about jobs, queues, timers and the VCs' GPUs.

One object, owned by ``Engine`` (core/engine.py) and handed to its parts: the
lifecycle events (core/engine_events.py), job control (core/engine_control.py),
the wait reasons (core/engine_reasons.py), restore (core/engine_restore.py)
and backfill (core/engine_backfill.py). Each part reads and books through
these public fields and methods; none reaches into another part.

The books are the engine's internals, not its boundary: the service, the
simulator and the doors read jobs through ``Engine.job``, ``Engine.jobs``,
``Engine.queue`` and friends.
"""
from __future__ import annotations

import heapq
import itertools
import math
from collections import Counter, OrderedDict
from typing import TYPE_CHECKING

from .engine_validate import RequestError, alloc_total, node_gpus
from .engine_view import ClusterView
from .jobs import Affinity, Decision, DecisionKind, JobClass, JobState
from .timefmt import at

if TYPE_CHECKING:
    from .engine_config import EngineConfig
    from .engine_records import JobRecord
    from .engine_validate import EngineAllocator
    from .grant import Grant
    from .policies.preemption_order import PreemptionPolicy
    from .policies.registry import QueuePolicy
    from .spec import ClusterSpec


class EngineBooks:
    def __init__(self, spec: ClusterSpec, alloc: EngineAllocator, config: EngineConfig,
                 vc_policies: dict[str, QueuePolicy], preemption_policy: PreemptionPolicy | None = None):
        self.spec = spec
        self.alloc = alloc
        self.config = config
        self.vc_policies = vc_policies
        self.preemption_policy = preemption_policy
        iso = config.isolated_vcs
        self.isolated = bool(getattr(alloc, "isolated_vcs", True) if iso is None else iso)
        self.jobs: dict[str, JobRecord] = {}
        self.lanes: dict[str, tuple[OrderedDict[str, None], OrderedDict[str, None]]] = {
            v: (OrderedDict(), OrderedDict()) for v in spec.vcs}
        # VC -> user -> queued jobs: admission counts a user's queue at each submission, and a
        # walk over a long queue under the service lock made every submit O(queue)
        self.queued_by_user: dict[str, Counter[str]] = {v: Counter() for v in spec.vcs}
        self.next_key = 1                  # next queue key (JobRecord.queue_key)
        self._timer_seq = itertools.count(1)
        # (time, seq, kind, job id, the job's epoch when set): kind "grace", "relax" or "backoff"
        self.timers: list[tuple[float, int, str, str, int]] = []
        # job id -> (depends on every release?, allocator version) of its last failed attempt, then
        # (vver, no VC cell held its largest pod then) when its guaranteed placement failed (engine.py)
        self.failed_at: dict[str, tuple[bool, int, int, bool]] = {}
        self.dirty: set[str] = set(spec.vcs)
        self.ready: list[str] = []         # PLACED jobs whose victims all left: START at next step
        self.waiters: dict[str, set[str]] = {}   # victim -> jobs PLACED waiting on it
        self.pwaiters: dict[str, set[str]] = {}  # victim -> TE jobs that asked the policy for it
        self.gver = 0                      # bumps on every release anywhere
        self.vver = {v: 0 for v in spec.vcs}   # bumps on a guaranteed release in that VC
        self.nondefault = 0                # bound jobs with explicit CPU/RAM (node_ok needed)
        self.view = ClusterView()
        self.totals: dict[str, int] = {}
        for cname, chain in spec.chains.items():
            ng = node_gpus(chain)
            for node in alloc.node_free(cname):
                self.view.add_node(node, cname, ng, chain.node_cpus, chain.node_memory_gb)
            self.totals[cname] = alloc_total(alloc, cname)
        self.free = dict(self.totals)      # GPUs not bound, per chain (pre-check only)
        self.vc_cap = {v: self.spec_capacity(v) for v in spec.vcs}
        self.vc_used = {v: {c: 0 for c in spec.chains} for v in spec.vcs}
        self.held: dict[str, dict[str, None]] = {v: {} for v in spec.vcs}   # VC -> its jobs holding cells
        self.held_ver: dict[str, int] = {v: 0 for v in spec.vcs}  # bumps when held[vc] changes
        self.holders_text: dict[str, tuple[int, str]] = {}                # VC -> (held_ver, text) cache
        self.blocked: dict[str, str | None] = {v: None for v in spec.vcs}  # VC -> head that waits
        self.wait_reasons = config.wait_reasons
        self.after_jobs: set[str] = set()   # queued jobs waiting for others (engine_control.py)
        self.stats = {"attempts": 0, "starts": 0, "preempt_decisions": 0, "preempted_gpus": 0}

    def job(self, job_id: str) -> JobRecord:
        """The job's record; ``RequestError`` when the engine does not know it."""
        rec = self.jobs.get(job_id)
        if rec is None:
            raise RequestError("job_id", f"unknown job {job_id!r}")
        return rec

    def spec_capacity(self, vc: str) -> dict[str, int]:
        """chain -> the GPUs of ``vc``'s cells in the spec (before any exchange)."""
        cap = {c: 0 for c in self.spec.chains}
        for (chain, level), count in self.spec.vcs[vc].cells.items():
            cap[chain] += count * self.spec.chains[chain].gpus_per_level[level - 1]
        return cap

    # ------------------------------------------------------------------ queues and timers

    def lane(self, rec: JobRecord) -> OrderedDict[str, None]:
        te, rest = self.lanes[rec.request.vc]
        te_first = getattr(self.vc_policies[rec.request.vc], "te_first", False)
        return te if rec.request.job_class is JobClass.TE and te_first else rest

    def enqueue(self, rec: JobRecord, head: bool) -> None:
        lane = self.lane(rec)
        self._joins(rec, lane)
        lane[rec.job_id] = None
        if head:
            lane.move_to_end(rec.job_id, last=False)
        key = self.next_key
        self.next_key += 1
        # each lane stays sorted by key: the tail takes a key above all, the head one below all
        rec.queue_key = -key if head else key
        self.failed_at.pop(rec.job_id, None)
        self.dirty.add(rec.request.vc)

    def enqueue_restored(self, rec: JobRecord) -> None:
        """Put a restored queued job back at its journaled place (its ``queue_key``)."""
        key = rec.queue_key
        if key is None:   # a journal written before queue keys were kept: the tail
            self.enqueue(rec, head=False)
            return
        self.next_key = max(self.next_key, math.floor(abs(key)) + 1)
        lane = self.lane(rec)
        last = next(reversed(lane), None)
        self._joins(rec, lane)
        lane[rec.job_id] = None
        if last is not None and self.queue_key(last) > key:
            ordered = sorted(lane, key=self.queue_key)  # stable: ties keep their order
            lane.clear()
            lane.update(dict.fromkeys(ordered))
        self.failed_at.pop(rec.job_id, None)
        self.dirty.add(rec.request.vc)

    def queue_key(self, job_id: str) -> float:
        key = self.jobs[job_id].queue_key
        assert key is not None, f"queued job {job_id} has no queue key"   # enqueue* set it
        return key

    def _joins(self, rec: JobRecord, lane: OrderedDict[str, None]) -> None:
        if rec.job_id not in lane:
            self.queued_by_user[rec.request.vc][rec.request.user] += 1

    def dequeue(self, rec: JobRecord) -> None:
        """Take ``rec`` out of its VC's queue (nothing when it is not in it)."""
        vc = rec.request.vc
        for lane in self.lanes[vc]:
            if rec.job_id in lane:
                del lane[rec.job_id]
                counts = self.queued_by_user[vc]
                counts[rec.request.user] -= 1
                if not counts[rec.request.user]:
                    del counts[rec.request.user]
        self.failed_at.pop(rec.job_id, None)

    def timer(self, when: float, kind: str, rec: JobRecord) -> None:
        """Wake the engine at ``when`` for ``rec`` in its current epoch only (JobRecord.epoch):
        a later preemption, placement or queueing of the job makes the timer void."""
        heapq.heappush(self.timers, (when, next(self._timer_seq), kind, rec.job_id, rec.epoch))

    def timer_owner(self, kind: str, job_id: str, epoch: int) -> JobRecord | None:
        """The job a timer still acts for, or None when it is void."""
        rec = self.jobs.get(job_id)
        if rec is None or rec.epoch != epoch:
            return None
        if kind == "grace" and (rec.state is not JobState.PREEMPTING or rec.killed):
            return None
        return rec

    def arm_relax(self, rec: JobRecord, now: float) -> None:
        rec.relax_at = None
        if rec.request.affinity is Affinity.SOFT and rec.level is not None:
            rec.relax_at = now + self.config.soft_wait
            self.timer(rec.relax_at, "relax", rec)

    def relax(self, rec: JobRecord, now: float) -> None:
        """Soft affinity: past ``relax_at``, move one level up (then to no constraint)."""
        while rec.relax_at is not None and rec.relax_at <= now and rec.level is not None:
            top = len(self.spec.chains[rec.chain].levels) if rec.chain else 0
            rec.level = rec.level + 1 if rec.level < top else None
            rec.relaxations += 1
            self.failed_at.pop(rec.job_id, None)
            if rec.level is None:
                rec.relax_at = None
            else:
                rec.relax_at += self.config.soft_wait * self.config.relax_backoff ** rec.relaxations
                self.timer(rec.relax_at, "relax", rec)
            rec.note(now, f"soft affinity relaxed to level {rec.level}")

    def preempt(self, rec: JobRecord, now: float, reason: str, out: list[Decision],
               bound: float | None = None) -> None:
        """Ask ``rec`` to stop: its own grace period, at most ``bound`` s (preemption_order.grace_bound)."""
        asked = float(rec.request.grace_period)
        grace = asked if bound is None else min(asked, bound)
        if grace < asked:
            reason = f"{reason} (grace {grace:g} s: the VC's bound; the job asked {asked:g} s)"
        rec.mark_preempting(now, reason, now + grace)
        self.stats["preempt_decisions"] += 1
        out.append(Decision(DecisionKind.PREEMPT, rec.job_id, grace_period=grace, reason=reason))
        self.timer(now + grace, "grace", rec)


    # ------------------------------------------------------------------ a job leaves its cells or its run
    def release(self, rec: JobRecord, now: float) -> None:
        if rec.placement is None:
            return
        self.alloc.release(rec.job_id)
        self.held[rec.request.vc].pop(rec.job_id, None)
        self.held_ver[rec.request.vc] += 1
        chain = rec.placement.chain
        self.view.unbind(rec.job_id, guaranteed=not rec.opportunistic)
        self.free[chain] += rec.gpus
        if not rec.opportunistic:
            self.vc_used[rec.request.vc][chain] -= rec.gpus
            self.vver[rec.request.vc] += 1
        if not rec.default_share:
            self.nondefault -= 1
        self.gver += 1
        self.dirty.update(self.lanes)
        if rec.started_pending is False and rec.started is not None:  # the current run had started
            rec.run_time += now - rec.started
        rec.started_pending = None
        rec.placement = None
        for w in self.waiters.pop(rec.job_id, ()):
            wrec = self.jobs[w]
            if rec.job_id in wrec.waiting_for:
                wrec.waiting_for.remove(rec.job_id)
                if not wrec.waiting_for and wrec.state is JobState.PLACED:
                    self.ready.append(w)
        for w in self.pwaiters.pop(rec.job_id, ()):
            wrec = self.jobs[w]
            if rec.job_id in wrec.policy_victims:
                wrec.policy_victims.remove(rec.job_id)

    def queue_again(self, rec: JobRecord, now: float, head: bool, reason: str, delay: float = 0.0) -> None:
        rec.queued_since = now
        rec.opportunistic = False
        rec.grace_deadline = None
        rec.killed = False
        rec.not_before = now + delay
        rec.level = rec.want_level
        rec.relaxations = 0
        if not self.config.keep_progress:
            rec.run_time = 0.0
        waits = f"retry at {at(rec.not_before, now)} after {reason}" if delay > 0 else f"requeued: {reason}"
        rec.mark_queued(now, reason, waits)   # a new epoch: the timers of its last run are void
        self.arm_relax(rec, now)
        self.enqueue(rec, head=head)
        if delay > 0:
            self.timer(rec.not_before, "backoff", rec)

    def end(self, rec: JobRecord, now: float, state: JobState, reason: str,
             failure_class: str | None = None) -> None:
        rec.mark_ended(now, state, reason, failure_class)


    # ------------------------------------------------------------------ GPUs

    def vc_free(self, vc: str, chain: str | None = None) -> int:
        """GPUs of ``vc``'s guaranteed capacity not bound to its guaranteed jobs (in ``chain``,
        or in its best chain)."""
        used = self.vc_used[vc]
        cap = self.vc_cap[vc]
        if chain is not None:
            return cap[chain] - used[chain]
        return max(cap[c] - used[c] for c in cap)

    def chain_free(self, chain: str | None) -> int:
        return self.free[chain] if chain is not None else max(self.free.values())

    def running_of(self, vc: str) -> list[JobRecord]:
        return [self.jobs[j] for j in self.held[vc]]

    def charge(self, rec: JobRecord, grant: Grant) -> None:
        """Book ``grant`` in the view and the pre-check counters."""
        per_node: dict[str, tuple[int, float, float]] = {}
        for pod in grant.pods:
            c, m, g = rec.pod_demands[pod.rank] if pod.rank < len(rec.pod_demands) else (0.0, 0.0, len(pod.gpus))
            u = per_node.get(pod.node)
            per_node[pod.node] = (len(pod.gpus), c, m) if u is None else (u[0] + len(pod.gpus), u[1] + c, u[2] + m)
        rec.placement = grant.placement
        rec.opportunistic = bool(grant.opportunistic)
        self.view.bind(rec.job_id, per_node, guaranteed=not rec.opportunistic)
        self.held[rec.request.vc][rec.job_id] = None
        self.held_ver[rec.request.vc] += 1
        self.free[grant.chain] -= rec.gpus
        if not rec.opportunistic:
            self.vc_used[rec.request.vc][grant.chain] += rec.gpus
        if not rec.default_share:
            self.nondefault += 1
