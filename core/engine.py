"""The scheduler engine: per-VC queues, gang placement, preemption, retries.

Driven by events with an explicit clock (``now`` is always an argument): the
caller reports submissions, starts, exits and health changes, and calls
``step(now)`` for a scheduling round, which returns ``Decision`` objects
(START here, PREEMPT that, KILL that) and executes nothing. No I/O.

One round, per VC (``_scan``): walk the VC's queue in the queue policy's
order and try to place each job all-or-nothing through the allocator:

1. a guaranteed job (TE/BE) first inside its VC's cells; the allocator may
   name opportunistic victims on those cells (HiveD's strict priority):
   they are preempted first and the job waits, PLACED, until they leave;
2. a TE job that does not fit asks the preemption policy (FitGpp by
   default) for BE victims of its own VC below the preemption cap;
3. a job whose VC is full may run opportunistically (low priority) when its
   request allows it; an opportunistic job only ever runs that way.

The first job that fits none of these is the VC's head: it holds a
reservation and later jobs pass it only as backfill (core/engine_backfill.py;
``EngineConfig(backfill=False)``: the scan stops there, strict FIFO). A job in
retry back-off (``not_before``) is skipped; a policy may set ``backfill = True``
to try every job with no reservation.

Speed: a failed attempt is remembered with the allocator "version" it
depended on (``_failed_at``, keyed by job id): a guaranteed attempt under HiveD depends only on
the VC's own releases (sharing safety: other VCs cannot take its cells), an
opportunistic attempt (and every attempt under the quota baseline) on any
release. Until that version moves the job is not tried again, so a round in
which nothing changed costs one dictionary look-up per VC.
"""
from __future__ import annotations

import heapq
import itertools
import math
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from .engine_backfill import Backfill
from .engine_control import EngineControl
from .engine_events import EngineEvents
from .engine_reasons import behind, explain
from .engine_records import JobRecord
from .engine_validate import RequestError, alloc_total, check, node_gpus
from .engine_view import ClusterView, NodeState  # noqa: F401  (re-exported)
from .jobs import HOLDING, TERMINAL, Affinity, Decision, DecisionKind, JobClass, JobRequest, JobState
from .policies.preemption_order import lender_grace, max_grace, policy_candidates, preemption_cap
from .policies.registry import make_preemption_policy, make_queue_policy, vc_queue_policies

if TYPE_CHECKING:
    from .allocator import SpecSource
    from .engine_validate import EngineAllocator
    from .grant import Grant
    from .policies.preemption_order import PreemptionPolicy
    from .policies.registry import QueuePolicy

__all__ = ["Engine", "EngineConfig", "JobRecord", "RequestError", "ClusterView", "NodeState"]


@dataclass
class EngineConfig:
    soft_wait: float = 150.0      # the Philly study (ATC '19) §2: wait 2-3 min for the wanted locality ...
    relax_backoff: float = 2.0    # ... then relax one level; each next wait is this factor longer
    preemption_cap: int = 1       # P: a BE job is preempted by the policy at most this often (a VC's
                                  # maxPreemptions overrides it; preemption_order.preemption_cap)
    retry_cap: int = 3            # engine-wide bound on counted retries (failures.py decides per class)
    keep_progress: bool = True    # simulator: a preempted job resumes where it stopped (checkpoints)
    isolated_vcs: bool | None = None  # None: ask the allocator (HiveD: True, quota: False)
    wait_reasons: bool = True     # write JobRecord.wait_reason (the simulator, which shows none, turns it off)
    backfill: bool = True         # later jobs may pass a blocked VC head holding a reservation (engine_backfill.py)
    backfill_estimates: str = "hint"  # reservations from: hint (estimator), oracle (sim durations), none


class Engine(EngineEvents, EngineControl):
    def __init__(self, spec_or_allocator: EngineAllocator | SpecSource, *,
                 queue_policy: str | QueuePolicy = "fifo",
                 preemption_policy: str | PreemptionPolicy | None = "fitgpp",
                 config: EngineConfig | None = None, binding: str = "dynamic"):
        from .allocator import Allocator
        from .quota import QuotaAllocator
        from .spec import ClusterSpec, load_spec
        if isinstance(spec_or_allocator, (Allocator, QuotaAllocator)):
            self.alloc = spec_or_allocator
            self.spec = spec_or_allocator.spec
        else:
            if isinstance(spec_or_allocator, ClusterSpec):
                self.spec = spec_or_allocator
            else:
                self.spec = load_spec(spec_or_allocator)
            self.alloc = Allocator(self.spec, binding=binding)
        self.config = config or EngineConfig()
        self.queue_policy = make_queue_policy(queue_policy)   # VCs without a queuePolicy of their own
        self.vc_policies = vc_queue_policies(self.spec, self.queue_policy)
        # P is applied by the engine to the candidates (one definition), never by the policy
        self.preemption_policy = make_preemption_policy(preemption_policy)
        if getattr(self.preemption_policy, "cap", None) is not None:
            raise ValueError("preemption_policy: the policy object sets its own cap; the engine's P is "
                             "EngineConfig.preemption_cap (or a VC's maxPreemptions): leave the policy's cap unset")
        attach = getattr(self.preemption_policy, "attach", None)
        if attach is not None:   # e.g. FitGpp reads the cell tree to pick victims that free cells
            attach(self.alloc)
        iso = self.config.isolated_vcs
        self._isolated = bool(getattr(self.alloc, "isolated_vcs", True) if iso is None else iso)
        self._jobs: dict[str, JobRecord] = {}
        self._lanes: dict[str, tuple[OrderedDict[str, None], OrderedDict[str, None]]] = {
            v: (OrderedDict(), OrderedDict()) for v in self.spec.vcs}
        self._ids = itertools.count(1)
        self._next_key = 1                 # next queue key (JobRecord.queue_key)
        self._timer_seq = itertools.count(1)
        # (time, seq, kind, job id, the job's epoch when set): kind "grace", "relax" or "backoff"
        self._timers: list[tuple[float, int, str, str, int]] = []
        # job id -> (depends on every release?, allocator version) of its last failed attempt
        self._failed_at: dict[str, tuple[bool, int]] = {}
        self._dirty: set[str] = set(self.spec.vcs)
        self._ready: list[str] = []        # PLACED jobs whose victims all left: START at next step
        self._waiters: dict[str, set[str]] = {}  # victim -> jobs PLACED waiting on it
        self._pwaiters: dict[str, set[str]] = {}  # victim -> TE jobs that asked the policy for it
        self._gver = 0                     # bumps on every release anywhere
        self._vver = {v: 0 for v in self.spec.vcs}  # bumps on a guaranteed release in that VC
        self._nondefault = 0               # bound jobs with explicit CPU/RAM (node_ok needed)
        self.view = ClusterView()
        self._totals: dict[str, int] = {}
        for cname, chain in self.spec.chains.items():
            ng = node_gpus(chain)
            for node in self.alloc.node_free(cname):
                self.view.add_node(node, cname, ng, chain.node_cpus, chain.node_memory_gb)
            self._totals[cname] = alloc_total(self.alloc, cname)
        self._free = dict(self._totals)    # GPUs not bound, per chain (pre-check only)
        self._vc_cap = {v: self._capacity(v) for v in self.spec.vcs}
        self._vc_used = {v: {c: 0 for c in self.spec.chains} for v in self.spec.vcs}
        self._held: dict[str, dict[str, None]] = {v: {} for v in self.spec.vcs}   # VC -> its jobs holding cells
        self._held_ver: dict[str, int] = {v: 0 for v in self.spec.vcs}  # bumps when _held[vc] changes
        self._holders_text: dict[str, tuple[int, str]] = {}                    # VC -> (_held_ver, text) cache
        self._blocked: dict[str, str | None] = {v: None for v in self.spec.vcs}  # VC -> head that waits
        self._explain = self.config.wait_reasons
        self._after_jobs: set[str] = set()   # queued jobs waiting for others (engine_control.py)
        self._backfill = Backfill(self, self.config.backfill_estimates) if self.config.backfill else None
        self.scanned: set[str] = set()     # VCs whose queue the last step() walked
        self.stats = {"attempts": 0, "starts": 0, "preempt_decisions": 0, "preempted_gpus": 0}

    # ------------------------------------------------------------------ requests

    def _capacity(self, vc: str) -> dict[str, int]:
        cap = {c: 0 for c in self.spec.chains}
        for (chain, level), count in self.spec.vcs[vc].cells.items():
            cap[chain] += count * self.spec.chains[chain].gpus_per_level[level - 1]
        return cap

    def validate(self, req: JobRequest) -> None:
        check(req, self.spec, self.alloc, self._totals)

    def submit(self, req: JobRequest, now: float, job_id: str | None = None) -> str:
        res = check(req, self.spec, self.alloc, self._totals)
        if job_id is None:
            job_id = f"j{next(self._ids)}"
            while job_id in self._jobs:
                job_id = f"j{next(self._ids)}"
        elif not isinstance(job_id, str) or not job_id:
            raise RequestError("job_id", f"must be a non-empty string, got {job_id!r}")
        elif job_id in self._jobs:
            raise RequestError("job_id", f"{job_id!r} already exists")
        rec = JobRecord(job_id=job_id, request=req, submitted=now, queued_since=now,
                        pod_gpus=res.pod_gpus, pod_demands=res.pod_demands,
                        want_level=res.want_level, level=res.want_level)
        rec.default_share = res.default_share
        rec.chain = res.chain
        rec.mark_queued(now, "submitted", "submitted: tried at the next scheduling round")
        self._jobs[job_id] = rec
        self._arm_relax(rec, now)
        self._enqueue(rec, head=False)
        self._note_deps(rec)
        head = self._blocked.get(req.vc)
        if head is not None and self._jobs[head].state is JobState.QUEUED:
            rec.explain_wait(behind(self._jobs[head]))
        return job_id

    # ------------------------------------------------------------------ queues and timers

    def _lane(self, rec: JobRecord) -> OrderedDict[str, None]:
        te, rest = self._lanes[rec.request.vc]
        te_first = getattr(self.vc_policies[rec.request.vc], "te_first", False)
        return te if rec.request.job_class is JobClass.TE and te_first else rest

    def _enqueue(self, rec: JobRecord, head: bool) -> None:
        lane = self._lane(rec)
        lane[rec.job_id] = None
        if head:
            lane.move_to_end(rec.job_id, last=False)
        key = self._next_key
        self._next_key += 1
        # each lane stays sorted by key: the tail takes a key above all, the head one below all
        rec.queue_key = -key if head else key
        self._failed_at.pop(rec.job_id, None)
        self._dirty.add(rec.request.vc)

    def _enqueue_restored(self, rec: JobRecord) -> None:
        """Put a restored queued job back at its journaled place (its ``queue_key``)."""
        key = rec.queue_key
        if key is None:   # a journal written before queue keys were kept: the tail
            self._enqueue(rec, head=False)
            return
        self._next_key = max(self._next_key, math.floor(abs(key)) + 1)
        lane = self._lane(rec)
        last = next(reversed(lane), None)
        lane[rec.job_id] = None
        if last is not None and self._queue_key(last) > key:
            ordered = sorted(lane, key=self._queue_key)  # stable: ties keep their order
            lane.clear()
            lane.update(dict.fromkeys(ordered))
        self._failed_at.pop(rec.job_id, None)
        self._dirty.add(rec.request.vc)

    def _queue_key(self, job_id: str) -> float:
        key = self._jobs[job_id].queue_key
        assert key is not None, f"queued job {job_id} has no queue key"   # _enqueue* set it
        return key

    def _dequeue(self, rec: JobRecord) -> None:
        for lane in self._lanes[rec.request.vc]:
            lane.pop(rec.job_id, None)
        self._failed_at.pop(rec.job_id, None)

    def _timer(self, when: float, kind: str, rec: JobRecord) -> None:
        """Wake the engine at ``when`` for ``rec`` in its current epoch only (JobRecord.epoch):
        a later preemption, placement or queueing of the job makes the timer void."""
        heapq.heappush(self._timers, (when, next(self._timer_seq), kind, rec.job_id, rec.epoch))

    def _timer_owner(self, kind: str, job_id: str, epoch: int) -> JobRecord | None:
        """The job a timer still acts for, or None when it is void."""
        rec = self._jobs.get(job_id)
        if rec is None or rec.epoch != epoch:
            return None
        if kind == "grace" and (rec.state is not JobState.PREEMPTING or rec.killed):
            return None
        return rec

    def _arm_relax(self, rec: JobRecord, now: float) -> None:
        rec.relax_at = None
        if rec.request.affinity is Affinity.SOFT and rec.level is not None:
            rec.relax_at = now + self.config.soft_wait
            self._timer(rec.relax_at, "relax", rec)

    def _relax(self, rec: JobRecord, now: float) -> None:
        """Soft affinity: past ``relax_at``, move one level up (then to no constraint)."""
        while rec.relax_at is not None and rec.relax_at <= now and rec.level is not None:
            top = len(self.spec.chains[rec.chain].levels) if rec.chain else 0
            rec.level = rec.level + 1 if rec.level < top else None
            rec.relaxations += 1
            self._failed_at.pop(rec.job_id, None)
            if rec.level is None:
                rec.relax_at = None
            else:
                rec.relax_at += self.config.soft_wait * self.config.relax_backoff ** rec.relaxations
                self._timer(rec.relax_at, "relax", rec)
            rec.note(now, f"soft affinity relaxed to level {rec.level}")

    def next_wakeup(self) -> float | None:
        """Earliest time a timer (relaxation, back-off, grace) wants a ``step``."""
        timers = self._timers
        while timers and self._timer_owner(timers[0][2], timers[0][3], timers[0][4]) is None:
            heapq.heappop(timers)   # void: its job moved on since it was set
        return timers[0][0] if timers else None

    # ------------------------------------------------------------------ the round

    def step(self, now: float) -> list[Decision]:
        out: list[Decision] = []
        while self._timers and self._timers[0][0] <= now:
            _, _, kind, jid, epoch = heapq.heappop(self._timers)
            rec = self._timer_owner(kind, jid, epoch)
            if rec is None:
                continue   # set for an earlier preemption, placement or queueing of the job
            if kind == "limit":
                self._limit_due(jid, now, out)
            elif kind == "grace":
                if rec.grace_deadline is not None and rec.grace_deadline <= now:
                    rec.mark_killed()
                    out.append(Decision(DecisionKind.KILL, jid, reason="grace period over"))
            else:   # a back-off or relaxation ended: try the VC, rewrite the reasons behind its head
                vc = rec.request.vc
                self._dirty.add(vc)
                self._blocked[vc] = None
        if self._ready:
            ready, self._ready = self._ready, []
            for jid in ready:
                rec = self._jobs[jid]
                if rec.state is JobState.PLACED and not rec.waiting_for:
                    self._emit_start(rec, now, out)
        self._deps_dirty()
        scanned: set[str] = set()
        for vc, (te, rest) in self._lanes.items():
            if te or rest:
                if vc in self._dirty:  # any release, submission or timer marks it
                    self._scan(vc, now, out)
                    scanned.add(vc)
        self._dirty.clear()
        self.scanned = scanned
        return out

    def _memo_valid(self, rec: JobRecord) -> bool:
        m = self._failed_at.get(rec.job_id)
        if m is None:
            return False
        glob, ver = m
        return ver == (self._gver if glob else self._vver[rec.request.vc])

    def _order(self, vc: str, now: float) -> Iterable[str]:
        te, rest = self._lanes[vc]
        pol = self.vc_policies[vc]
        if getattr(pol, "preserves_order", False):
            if getattr(pol, "te_first", False):
                return itertools.chain(te, rest)
            return (j for j in heapq.merge(te, rest, key=self._queue_key))
        recs = [self._jobs[j] for j in itertools.chain(te, rest)]
        recs.sort(key=lambda r: self._queue_key(r.job_id))
        return [r.job_id for r in pol.order(vc, recs, self.view, now)]

    def _scan(self, vc: str, now: float, out: list[Decision]) -> None:
        done: list[str] = []
        backfill = getattr(self.vc_policies[vc], "backfill", False)
        order = iter(self._order(vc, now))
        blocked = None
        doomed: list[tuple[JobRecord, str]] = []
        tried = False
        for jid in order:
            rec = self._jobs[jid]
            if rec.not_before > now:
                if self._explain:
                    rec.explain_wait(explain(self, rec, now))
                continue  # in retry back-off: does not block the queue
            if (rec.held_by or rec.request.after) and self._skip_in_scan(rec, doomed):
                continue  # held, or waiting for its dependencies: does not block the queue
            self._relax(rec, now)
            tried = not self._memo_valid(rec)
            placed = tried and self._attempt(rec, now, out)
            if tried and not placed and self._explain:
                rec.explain_wait(explain(self, rec, now))
            if placed:
                done.append(jid)
            elif not backfill:
                blocked = rec
                break
        if blocked is not None and self._backfill is not None:
            # a reservation for the head; later jobs that cannot delay it start now (core/engine_backfill.py)
            self._backfill.walk(blocked, tried, order, now, out, done, self._blocked[vc] != blocked.job_id)
        elif blocked is not None and self._blocked[vc] != blocked.job_id and self._explain:
            # a new head blocks the queue: every job behind it waits for it (FIFO, no backfill)
            text = behind(blocked)
            for jid in order:
                r = self._jobs[jid]
                if r.not_before <= now:
                    r.explain_wait(text)
        self._blocked[vc] = blocked.job_id if blocked is not None else None
        if doomed:
            self._end_doomed(doomed, now)
        if done:
            lanes = self._lanes[vc]
            for jid in done:
                for lane in lanes:
                    lane.pop(jid, None)

    def _attempt(self, rec: JobRecord, now: float, out: list[Decision]) -> bool:
        """Try to place ``rec``; on failure remember what would have to change."""
        self.stats["attempts"] += 1
        req = rec.request
        need = rec.gpus
        glob = not self._isolated or not (rec.default_share and self._nondefault == 0)
        if req.job_class.guaranteed:
            if self.vc_free(req.vc, rec.chain) >= need:
                grant = self._place(rec, opportunistic=False)
                if grant is not None:
                    self._bind(rec, grant, now, out)
                    return True
            if req.job_class is JobClass.TE and self.preemption_policy is not None and self._ask_policy(rec, now, out):
                pass  # BE victims are leaving for it: wait for them rather than run at low priority
            elif req.allow_opportunistic:
                glob = True
                if self._opp_room(rec):
                    grant = self._place(rec, opportunistic=True)
                    if grant is not None:
                        self._bind(rec, grant, now, out)
                        return True
        else:
            glob = True
            if self._opp_room(rec):
                grant = self._place(rec, opportunistic=True)
                if grant is not None:
                    self._bind(rec, grant, now, out)
                    return True
        self._failed_at[rec.job_id] = (glob, self._gver if glob else self._vver[req.vc])
        return False

    def vc_free(self, vc: str, chain: str | None = None) -> int:
        """GPUs of ``vc``'s guaranteed capacity not bound to its guaranteed jobs (in ``chain``,
        or in its best chain)."""
        used = self._vc_used[vc]
        cap = self._vc_cap[vc]
        if chain is not None:
            return cap[chain] - used[chain]
        return max(cap[c] - used[c] for c in cap)

    def _chain_free(self, chain: str | None) -> int:
        return self._free[chain] if chain is not None else max(self._free.values())

    def _opp_room(self, rec: JobRecord) -> bool:
        """Necessary condition for an opportunistic placement: enough unbound GPUs,
        and nodes with enough of them for the pods (counts only)."""
        chain = rec.chain
        if self._chain_free(chain) < rec.gpus:
            return False
        if chain is None:
            return True
        return self.view.can_host(chain, rec.pod_gpus)

    def _place(self, rec: JobRecord, opportunistic: bool) -> Grant | None:
        node_ok: Callable[[str, int], bool] | None = None  # only when some job states its own CPU/RAM
        if not (rec.default_share and self._nondefault == 0):
            by_gpus: dict[int, tuple[float, float]] = {}
            for c, m, g in rec.pod_demands:
                old = by_gpus.get(int(g), (0.0, 0.0))
                by_gpus[int(g)] = (max(old[0], c), max(old[1], m))
            view = self.view

            def node_ok(node: str, pod_gpus: int, _d: dict[int, tuple[float, float]] = by_gpus) -> bool:
                c, m = _d.get(pod_gpus, (0.0, 0.0))
                return view.fits(node, c, m)
        return self.alloc.place(rec.job_id, rec.request.vc, rec.pod_gpus, opportunistic=opportunistic,
                                priority=0 if opportunistic else (2 if rec.request.job_class is JobClass.TE else 1),
                                chain=rec.chain, within_level=rec.level, node_ok=node_ok)

    def _bind_restored(self, rec: JobRecord, grant: Grant) -> None:
        self._charge(rec, grant)

    def _charge(self, rec: JobRecord, grant: Grant) -> None:
        """Book ``grant`` in the view and the pre-check counters."""
        per_node: dict[str, tuple[int, float, float]] = {}
        for pod in grant.pods:
            c, m, g = rec.pod_demands[pod.rank] if pod.rank < len(rec.pod_demands) else (0.0, 0.0, len(pod.gpus))
            u = per_node.get(pod.node)
            per_node[pod.node] = (len(pod.gpus), c, m) if u is None else (u[0] + len(pod.gpus), u[1] + c, u[2] + m)
        rec.placement = grant.placement
        rec.opportunistic = bool(grant.opportunistic)
        self.view.bind(rec.job_id, per_node, guaranteed=not rec.opportunistic)
        self._held[rec.request.vc][rec.job_id] = None
        self._held_ver[rec.request.vc] += 1
        self._free[grant.chain] -= rec.gpus
        if not rec.opportunistic:
            self._vc_used[rec.request.vc][grant.chain] += rec.gpus
        if not rec.default_share:
            self._nondefault += 1

    def _bind(self, rec: JobRecord, grant: Grant, now: float, out: list[Decision]) -> None:
        self._charge(rec, grant)
        self._failed_at.pop(rec.job_id, None)
        rec.queued_time += now - (rec.queued_since if rec.queued_since is not None else now)
        rec.queued_since = None
        rec.policy_victims = []
        victims = [v for v in sorted(grant.victims) if v in self._jobs and self._jobs[v].state in HOLDING]
        rec.waiting_for = victims
        how = "opportunistic" if rec.opportunistic else "guaranteed"
        if victims:
            rec.mark_placed(now, f"{how}; waiting for {len(victims)} opportunistic victims")
            # stage 1: the lender (this job's VC) bounds how long its cells stay borrowed
            bound = lender_grace(self.spec, rec.request.vc)
            why = f"cells taken back by guaranteed job {rec.job_id} of VC {rec.request.vc}"
            for v in victims:
                self._waiters.setdefault(v, set()).add(rec.job_id)
                vrec = self._jobs[v]
                if vrec.state is not JobState.PREEMPTING:
                    self._preempt(vrec, now, why, out, bound)
                elif vrec.shorten_grace(now, now + bound, f"{why}: grace shortened to VC "
                                        f"{rec.request.vc}'s opportunisticGrace {bound:g} s"):
                    self._timer(now + bound, "grace", vrec)
            if self._explain:
                rec.explain_wait(explain(self, rec, now))
        else:
            rec.mark_placed(now, how)
            self._emit_start(rec, now, out)

    def _emit_start(self, rec: JobRecord, now: float, out: list[Decision]) -> None:
        self.stats["starts"] += 1
        rec.started_pending = True
        out.append(Decision(DecisionKind.START, rec.job_id, placement=rec.placement,
                            reason="opportunistic" if rec.opportunistic else "guaranteed"))

    def _ask_policy(self, rec: JobRecord, now: float, out: list[Decision]) -> bool:
        """Guaranteed TE job that does not fit: the policy picks BE victims of its VC.
        True when victims are (now or already) leaving for it."""
        if rec.policy_victims:
            return True  # victims already leaving: wait for them before asking again
        policy = self.preemption_policy
        if policy is None:   # "none": TE jobs wait instead
            return False
        vc = rec.request.vc
        cap = preemption_cap(self.config, self.spec, vc)
        cands = policy_candidates(rec, self._running_of(vc), cap)
        rec.policy_note = ""
        if not cands:
            return False
        # only victims that can make room: the TE job runs on its VC's guaranteed cells, so
        # the VC's free GPUs plus the victims' must cover it (else preempting is pure loss)
        if max(self._room_with(rec, cands).values(), default=0) < rec.gpus:
            rec.policy_note = (f"preempting every BE job under the cap would still leave VC {vc} "
                                f"short of {rec.gpus} GPUs")
            return False
        victims, reason = policy.choose(rec, cands, self.view, now)
        victims = [v for v in victims if v in self._jobs and self._jobs[v].state is JobState.RUNNING]
        if victims and max(self._room_with(rec, [self._jobs[v] for v in victims]).values(), default=0) < rec.gpus:
            rec.policy_note = f"{policy.name} chose {', '.join(victims)}, which cannot make room"
            return False
        if not victims:
            rec.policy_note = reason
            return False
        rec.policy_victims = victims
        rec.reason = reason
        bound = max_grace(self.spec, vc)   # stage 2: the VC bounds how long its TE jobs wait
        for v in victims:
            self._pwaiters.setdefault(v, set()).add(rec.job_id)
            self._preempt(self._jobs[v], now, f"for TE job {rec.job_id}: {reason}", out, bound)
        return True

    def _room_with(self, rec: JobRecord, victims: Iterable[JobRecord]) -> dict[str, int]:
        """chain -> the VC's free guaranteed GPUs there once ``victims`` have left."""
        vc = rec.request.vc
        chains = [rec.chain] if rec.chain is not None else list(self.spec.chains)
        room = {c: self._vc_cap[vc][c] - self._vc_used[vc][c] for c in chains}
        for v in victims:
            bound = v.bound_chain
            if not v.opportunistic and bound in room:
                room[bound] += v.gpus
        return room

    def _running_of(self, vc: str) -> list[JobRecord]:
        return [self._jobs[j] for j in self._held[vc]]

    def _preempt(self, rec: JobRecord, now: float, reason: str, out: list[Decision],
                 bound: float | None = None) -> None:
        """Ask ``rec`` to stop: its own grace period, at most ``bound`` s (preemption_order.grace_bound)."""
        asked = float(rec.request.grace_period)
        grace = asked if bound is None else min(asked, bound)
        if grace < asked:
            reason = f"{reason} (grace {grace:g} s: the VC's bound; the job asked {asked:g} s)"
        rec.mark_preempting(now, reason, now + grace)
        self.stats["preempt_decisions"] += 1
        out.append(Decision(DecisionKind.PREEMPT, rec.job_id, grace_period=grace, reason=reason))
        self._timer(now + grace, "grace", rec)

    # ------------------------------------------------------------------ reading state

    # The engine's boundary: what the service, the simulator and the doors read.
    # The job table is the engine's own; code outside core/engine*.py goes through these.

    def _get(self, job_id: str) -> JobRecord:
        rec = self._jobs.get(job_id)
        if rec is None:
            raise RequestError("job_id", f"unknown job {job_id!r}")
        return rec

    def job(self, job_id: str) -> JobRecord:
        """The job's record; ``RequestError`` when the engine does not know it."""
        return self._get(job_id)

    def find(self, job_id: str) -> JobRecord | None:
        """The job's record, or None when the engine does not know it."""
        return self._jobs.get(job_id)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._jobs

    def __len__(self) -> int:
        return len(self._jobs)

    def job_ids(self) -> list[str]:
        """Every job the engine knows, in submission (or restore) order."""
        return list(self._jobs)

    def jobs(self, vc: str | None = None, state: JobState | str | None = None, *,
             states: Iterable[JobState] | None = None) -> list[JobRecord]:
        """Records in submission order, of ``vc`` when given, in ``state`` or among ``states``."""
        st = JobState(state) if state is not None else None
        within = frozenset(states) if states is not None else None
        return [r for r in self._jobs.values()
                if (vc is None or r.request.vc == vc) and (st is None or r.state is st)
                and (within is None or r.state in within)]

    def holding(self, vc: str) -> list[JobRecord]:
        """The jobs of ``vc`` holding cells (placed, running or preempting)."""
        if vc not in self._held:
            raise RequestError("vc", f"unknown VC {vc!r}")
        return self._running_of(vc)

    def counts(self) -> dict[tuple[str, str], int]:
        """(VC, state value) -> number of jobs."""
        return dict(Counter((r.request.vc, r.state.value) for r in self._jobs.values()))

    def queue(self, vc: str, now: float = 0.0) -> list[str]:
        """``vc``'s queued jobs in the order the next round tries them."""
        if vc not in self._lanes:
            raise RequestError("vc", f"unknown VC {vc!r}")
        return list(self._order(vc, now))

    def lanes(self, vc: str) -> tuple[Mapping[str, None], Mapping[str, None]] | None:
        """``vc``'s two queue lanes (TE jobs, then the others) in arrival order, read-only;
        None for an unknown VC. What a caller needs to place a job just queued without
        listing the queue."""
        lanes = self._lanes.get(vc)
        return None if lanes is None else (MappingProxyType(lanes[0]), MappingProxyType(lanes[1]))

    def head(self, vc: str, now: float) -> JobRecord | None:
        """The first job of ``vc``'s queue not in retry back-off at ``now`` (what blocks the queue)."""
        if vc not in self._lanes:
            raise RequestError("vc", f"unknown VC {vc!r}")
        for jid in self._order(vc, now):
            rec = self._jobs[jid]
            if rec.not_before <= now:
                return rec
        return None

    def restore_order(self) -> list[JobRecord]:
        """Every job in the order ``restore`` takes them to rebuild this engine: jobs holding
        cells or ended first, then the queued ones by queue key."""
        queued = JobState.QUEUED
        return sorted(self._jobs.values(), key=lambda r: (r.state is queued, r.queue_key or 0))

    # ------------------------------------------------------------------ forgetting

    def forget(self, job_id: str) -> None:
        """Drop an ended job's record (retention, or a submission the journal refused,
        cancelled first)."""
        rec = self._get(job_id)
        if rec.state not in TERMINAL:
            raise RequestError("job_id", f"{job_id} is {rec.state.value}; only ended jobs are forgotten")
        del self._jobs[job_id]
        self._failed_at.pop(job_id, None)
        if self._backfill is not None:
            self._backfill.forget(job_id)
        for waits in (self._waiters, self._pwaiters):
            waits.pop(job_id, None)

    def forget_attempts(self) -> None:
        """Forget every remembered failed attempt: each queued job is tried again at the next
        round (what a round costs without the memo, for the benchmarks)."""
        self._failed_at.clear()

    # ------------------------------------------------------------------ restart

    def restore(self, record: JobRecord) -> None:
        """Rebuild one job after a restart or a spec reload (records in ``restore_order``:
        holding and ended jobs first, queued ones by queue key)."""
        from .engine_restore import restore_record
        restore_record(self, record)
