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
which nothing changed costs one dictionary look-up per VC. A guaranteed placement
that failed for want of any VC cell as large as the largest pod is not asked again
until the VC releases cells (``_fails_untouched``; docs/engine.md "Speed").
"""
from __future__ import annotations

import heapq
import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

from .engine_backfill import Backfill
from .engine_books import EngineBooks
from .engine_config import EngineConfig
from .engine_control import JobControl
from .engine_events import EngineEvents
from .engine_reasons import behind, explain
from .engine_records import JobRecord
from .engine_restore import restore_record
from .engine_validate import RequestError, check
from .engine_view import ClusterView, NodeState  # noqa: F401  (re-exported)
from .jobs import HOLDING, TERMINAL, Decision, DecisionKind, JobClass, JobRequest, JobState
from .policies.preemption_order import lender_grace, max_grace, policy_candidates, preemption_cap
from .policies.registry import make_preemption_policy, make_queue_policy, vc_queue_policies

if TYPE_CHECKING:
    from .allocator import SpecSource
    from .engine_validate import EngineAllocator
    from .grant import Grant
    from .policies.preemption_order import PreemptionPolicy
    from .policies.registry import QueuePolicy

__all__ = ["Engine", "EngineConfig", "JobRecord", "RequestError", "ClusterView", "NodeState"]



class Engine:
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
        policy = make_preemption_policy(preemption_policy)
        if getattr(policy, "cap", None) is not None:
            raise ValueError("preemption_policy: the policy object sets its own cap; the engine's P is "
                             "EngineConfig.preemption_cap (or a VC's maxPreemptions): leave the policy's cap unset")
        attach = getattr(policy, "attach", None)
        if attach is not None:   # e.g. FitGpp reads the cell tree to pick victims that free cells
            attach(self.alloc)
        # the bookkeeping the engine and its parts share (core/engine_books.py)
        self.books = EngineBooks(self.spec, self.alloc, self.config, self.vc_policies, policy)
        self.view = self.books.view          # the cluster as the policies see it (same object)
        self.stats = self.books.stats        # counters the benchmarks and the simulator read
        self._ids = itertools.count(1)
        self.control = JobControl(self.books)   # time limits, dependencies, hold, requeue (engine_control.py)
        self.events = EngineEvents(self.books, self.control)   # what the outside world reports (engine_events.py)
        self._backfill = Backfill(self, self.config.backfill_estimates) if self.config.backfill else None
        self.scanned: set[str] = set()     # VCs whose queue the last step() walked

    @property
    def preemption_policy(self) -> PreemptionPolicy | None:
        """Stage 2's policy (FitGpp by default; None: TE jobs wait)."""
        return self.books.preemption_policy

    # ------------------------------------------------------------------ requests

    def validate(self, req: JobRequest) -> None:
        check(req, self.spec, self.alloc, self.books.totals)

    def submit(self, req: JobRequest, now: float, job_id: str | None = None) -> str:
        res = check(req, self.spec, self.alloc, self.books.totals)
        if job_id is None:
            job_id = f"j{next(self._ids)}"
            while job_id in self.books.jobs:
                job_id = f"j{next(self._ids)}"
        elif not isinstance(job_id, str) or not job_id:
            raise RequestError("job_id", f"must be a non-empty string, got {job_id!r}")
        elif job_id in self.books.jobs:
            raise RequestError("job_id", f"{job_id!r} already exists")
        rec = JobRecord(job_id=job_id, request=req, submitted=now, queued_since=now,
                        pod_gpus=res.pod_gpus, pod_demands=res.pod_demands,
                        want_level=res.want_level, level=res.want_level)
        rec.default_share = res.default_share
        rec.chain = res.chain
        rec.mark_queued(now, "submitted", "submitted: tried at the next scheduling round")
        self.books.jobs[job_id] = rec
        self.books.arm_relax(rec, now)
        self.books.enqueue(rec, head=False)
        self.control.note_deps(rec)
        head = self.books.blocked.get(req.vc)
        if head is not None and self.books.jobs[head].state is JobState.QUEUED:
            rec.explain_wait(behind(self.books.jobs[head]))
        return job_id

    # ------------------------------------------------------------------ queues and timers

    def next_wakeup(self) -> float | None:
        """Earliest time a timer (relaxation, back-off, grace) wants a ``step``."""
        timers = self.books.timers
        while timers and self.books.timer_owner(timers[0][2], timers[0][3], timers[0][4]) is None:
            heapq.heappop(timers)   # void: its job moved on since it was set
        return timers[0][0] if timers else None

    # ------------------------------------------------------------------ the round

    def step(self, now: float) -> list[Decision]:
        out: list[Decision] = []
        while self.books.timers and self.books.timers[0][0] <= now:
            _, _, kind, jid, epoch = heapq.heappop(self.books.timers)
            rec = self.books.timer_owner(kind, jid, epoch)
            if rec is None:
                continue   # set for an earlier preemption, placement or queueing of the job
            if kind == "limit":
                self.control.limit_due(jid, now, out)
            elif kind == "grace":
                if rec.grace_deadline is not None and rec.grace_deadline <= now:
                    rec.mark_killed()
                    out.append(Decision(DecisionKind.KILL, jid, reason="grace period over"))
            else:   # a back-off or relaxation ended: try the VC, rewrite the reasons behind its head
                vc = rec.request.vc
                self.books.dirty.add(vc)
                self.books.blocked[vc] = None
        if self.books.ready:
            ready, self.books.ready = self.books.ready, []
            for jid in ready:
                rec = self.books.jobs[jid]
                if rec.state is JobState.PLACED and not rec.waiting_for:
                    self._emit_start(rec, now, out)
        self.control.deps_dirty()
        scanned: set[str] = set()
        for vc, (te, rest) in self.books.lanes.items():
            if te or rest:
                if vc in self.books.dirty:  # any release, submission or timer marks it
                    self._scan(vc, now, out)
                    scanned.add(vc)
        self.books.dirty.clear()
        self.scanned = scanned
        return out

    def _memo_valid(self, rec: JobRecord) -> bool:
        m = self.books.failed_at.get(rec.job_id)
        if m is None:
            return False
        glob, ver, _, _ = m
        return ver == (self.books.gver if glob else self.books.vver[rec.request.vc])

    def _order(self, vc: str, now: float) -> Iterable[str]:
        te, rest = self.books.lanes[vc]
        pol = self.vc_policies[vc]
        if getattr(pol, "preserves_order", False):
            if getattr(pol, "te_first", False):
                return itertools.chain(te, rest)
            return (j for j in heapq.merge(te, rest, key=self.books.queue_key))
        recs = [self.books.jobs[j] for j in itertools.chain(te, rest)]
        recs.sort(key=lambda r: self.books.queue_key(r.job_id))
        return [r.job_id for r in pol.order(vc, recs, self.view, now)]

    def _scan(self, vc: str, now: float, out: list[Decision]) -> None:
        done: list[str] = []
        backfill = getattr(self.vc_policies[vc], "backfill", False)
        order = iter(self._order(vc, now))
        blocked = None
        doomed: list[tuple[JobRecord, str]] = []
        tried = False
        for jid in order:
            rec = self.books.jobs[jid]
            if rec.not_before > now:
                if self.books.wait_reasons:
                    rec.explain_wait(explain(self.books, rec, now))
                continue  # in retry back-off: does not block the queue
            if (rec.held_by or rec.request.after) and self.control.skip_in_scan(rec, doomed):
                continue  # held, or waiting for its dependencies: does not block the queue
            self.books.relax(rec, now)
            tried = not self._memo_valid(rec)
            placed = tried and self._attempt(rec, now, out)
            if tried and not placed and self.books.wait_reasons:
                rec.explain_wait(explain(self.books, rec, now))
            if placed:
                done.append(jid)
            elif not backfill:
                blocked = rec
                break
        if blocked is not None and self._backfill is not None:
            # a reservation for the head; later jobs that cannot delay it start now (core/engine_backfill.py)
            self._backfill.walk(blocked, tried, order, now, out, done, self.books.blocked[vc] != blocked.job_id)
        elif blocked is not None and self.books.blocked[vc] != blocked.job_id and self.books.wait_reasons:
            # a new head blocks the queue: every job behind it waits for it (FIFO, no backfill)
            text = behind(blocked)
            for jid in order:
                r = self.books.jobs[jid]
                if r.not_before <= now:
                    r.explain_wait(text)
        self.books.blocked[vc] = blocked.job_id if blocked is not None else None
        if doomed:
            self.control.end_doomed(doomed, now)
        for jid in done:
            self.books.dequeue(self.books.jobs[jid])

    def _attempt(self, rec: JobRecord, now: float, out: list[Decision]) -> bool:
        """Try to place ``rec``; on failure remember what would have to change."""
        self.stats["attempts"] += 1
        books = self.books
        req = rec.request
        # a guaranteed attempt under HiveD depends on the VC's own releases only (sharing safety)
        local = books.isolated and rec.default_share and books.nondefault == 0
        glob = not local
        seen: tuple[int, bool] = (-1, False)   # (vver, the VC had no cell for it then): _fails_untouched
        if req.job_class.guaranteed:
            m = books.failed_at.get(rec.job_id)
            vver = books.vver[req.vc]
            if m is not None and m[2] == vver:
                seen = (vver, m[3])
            if not seen[1] and self.vc_free(req.vc, rec.chain) >= rec.gpus:
                grant = self.try_place(rec, opportunistic=False)
                if grant is not None:
                    self.bind(rec, grant, now, out)
                    return True
                if local and seen[0] != vver:
                    seen = (vver, self._fails_untouched(rec))
            if req.job_class is JobClass.TE and self.preemption_policy is not None and self._ask_policy(rec, now, out):
                pass  # BE victims are leaving for it: wait for them rather than run at low priority
            elif req.allow_opportunistic:
                glob = True
                if self._opp_room(rec):
                    grant = self.try_place(rec, opportunistic=True)
                    if grant is not None:
                        self.bind(rec, grant, now, out)
                        return True
        else:
            glob = True
            if self._opp_room(rec):
                grant = self.try_place(rec, opportunistic=True)
                if grant is not None:
                    self.bind(rec, grant, now, out)
                    return True
        books.failed_at[rec.job_id] = (glob, books.gver if glob else books.vver[req.vc], seen[0], seen[1])
        return False

    def _fails_untouched(self, rec: JobRecord) -> bool:
        """True when no free cell of ``rec``'s VC (listed, or preassigned and not bound yet) holds
        its largest pod: its guaranteed placement fails at that first pod before it moves any cell,
        and fails so until the VC releases cells (``vver``). Skipping those calls keeps every later
        placement as it was (a failure after some pods took cells reorders the free lists)."""
        if rec.level is not None:
            return False    # within a level: the allocator walks partly used cells first
        free = getattr(self.alloc.vc_view(rec.request.vc), "free_cells", None)
        if free is None:
            return False    # not a cell allocator (the quota baseline is not isolated anyway)
        big = max(rec.pod_gpus)
        for (chain, k), n in free.items():
            lv = self.spec.chains[chain].level_for_gpus(big)
            if n > 0 and lv is not None and k >= lv:
                return False
        return True

    def _opp_room(self, rec: JobRecord) -> bool:
        """Necessary condition for an opportunistic placement: enough unbound GPUs,
        and nodes with enough of them for the pods (counts only)."""
        chain = rec.chain
        if self.books.chain_free(chain) < rec.gpus:
            return False
        if chain is None:
            return True
        return self.view.can_host(chain, rec.pod_gpus)

    def try_place(self, rec: JobRecord, opportunistic: bool, avoid: frozenset[str] = frozenset()) -> Grant | None:
        """Ask the allocator for ``rec``'s cells (for a round and for backfill); None when they do
        not fit. ``avoid``: nodes it may not use (a blocked head's reserved nodes)."""
        node_ok: Callable[[str, int], bool] | None = None  # only when some job states its own CPU/RAM
        if not (rec.default_share and self.books.nondefault == 0):
            by_gpus: dict[int, tuple[float, float]] = {}
            for c, m, g in rec.pod_demands:
                old = by_gpus.get(int(g), (0.0, 0.0))
                by_gpus[int(g)] = (max(old[0], c), max(old[1], m))
            view = self.view

            def node_ok(node: str, pod_gpus: int, _d: dict[int, tuple[float, float]] = by_gpus) -> bool:
                c, m = _d.get(pod_gpus, (0.0, 0.0))
                return node not in avoid and view.fits(node, c, m)
        elif avoid:
            def node_ok(node: str, pod_gpus: int) -> bool:
                return node not in avoid
        return self.alloc.place(rec.job_id, rec.request.vc, rec.pod_gpus, opportunistic=opportunistic,
                                priority=0 if opportunistic else (2 if rec.request.job_class is JobClass.TE else 1),
                                chain=rec.chain, within_level=rec.level, node_ok=node_ok)

    def bind(self, rec: JobRecord, grant: Grant, now: float, out: list[Decision]) -> None:
        """Book the grant ``try_place`` got: START now, or PLACED waiting for its victims to leave."""
        self.books.charge(rec, grant)
        self.books.failed_at.pop(rec.job_id, None)
        rec.queued_time += now - (rec.queued_since if rec.queued_since is not None else now)
        rec.queued_since = None
        rec.policy_victims = []
        victims = [v for v in sorted(grant.victims) if v in self.books.jobs and self.books.jobs[v].state in HOLDING]
        rec.waiting_for = victims
        how = "opportunistic" if rec.opportunistic else "guaranteed"
        if victims:
            rec.mark_placed(now, f"{how}; waiting for {len(victims)} opportunistic victims")
            # stage 1: the lender (this job's VC) bounds how long its cells stay borrowed
            bound = lender_grace(self.spec, rec.request.vc)
            why = f"cells taken back by guaranteed job {rec.job_id} of VC {rec.request.vc}"
            for v in victims:
                self.books.waiters.setdefault(v, set()).add(rec.job_id)
                vrec = self.books.jobs[v]
                if vrec.state is not JobState.PREEMPTING:
                    self.books.preempt(vrec, now, why, out, bound)
                elif vrec.shorten_grace(now, now + bound, f"{why}: grace shortened to VC "
                                        f"{rec.request.vc}'s opportunisticGrace {bound:g} s"):
                    self.books.timer(now + bound, "grace", vrec)
            if self.books.wait_reasons:
                rec.explain_wait(explain(self.books, rec, now))
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
        cands = policy_candidates(rec, self.books.running_of(vc), cap)
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
        victims = [v for v in victims if v in self.books.jobs and self.books.jobs[v].state is JobState.RUNNING]
        if victims and max(self._room_with(rec, [self.books.jobs[v] for v in victims]).values(), default=0) < rec.gpus:
            rec.policy_note = f"{policy.name} chose {', '.join(victims)}, which cannot make room"
            return False
        if not victims:
            rec.policy_note = reason
            return False
        rec.policy_victims = victims
        rec.reason = reason
        bound = max_grace(self.spec, vc)   # stage 2: the VC bounds how long its TE jobs wait
        for v in victims:
            self.books.pwaiters.setdefault(v, set()).add(rec.job_id)
            self.books.preempt(self.books.jobs[v], now, f"for TE job {rec.job_id}: {reason}", out, bound)
        return True

    def _room_with(self, rec: JobRecord, victims: Iterable[JobRecord]) -> dict[str, int]:
        """chain -> the VC's free guaranteed GPUs there once ``victims`` have left."""
        vc = rec.request.vc
        chains = [rec.chain] if rec.chain is not None else list(self.spec.chains)
        room = {c: self.books.vc_cap[vc][c] - self.books.vc_used[vc][c] for c in chains}
        for v in victims:
            bound = v.bound_chain
            if not v.opportunistic and bound in room:
                room[bound] += v.gpus
        return room

    # ------------------------------------------------------------------ what the outside world reports

    def on_started(self, job_id: str, now: float) -> None:
        self.events.on_started(job_id, now)

    def on_preempted(self, job_id: str, now: float) -> None:
        """The victim's processes are gone: free its cells, put it back at the head."""
        self.events.on_preempted(job_id, now)

    def on_finished(self, job_id: str, now: float, exit_code: int, log_tail: str = "") -> None:
        self.events.on_finished(job_id, now, exit_code, log_tail)

    def cancel(self, job_id: str, now: float, by_user: str) -> list[Decision]:
        return self.events.cancel(job_id, now, by_user)

    def set_health(self, node: str, gpu: int | None, healthy: bool, now: float,
                   move: bool = True) -> list[Decision]:
        """``move=False`` (a cordon): the cells take no new jobs, the jobs on them stay."""
        return self.events.set_health(node, gpu, healthy, now, move)

    def report_progress(self, job_id: str, done: float, total: float, now: float) -> None:
        self.events.report_progress(job_id, done, total, now)

    def on_capacity_changed(self, vcs: Iterable[str], downgraded: Iterable[str], now: float) -> None:
        """VC views changed under the engine (a cell exchange window began or ended): engine_events.py."""
        self.events.on_capacity_changed(vcs, downgraded, now)

    def hold(self, job_id: str, now: float, by_user: str) -> None:
        """A queued job is passed over until ``unhold``; it keeps its place in the queue."""
        self.control.hold(job_id, now, by_user)

    def unhold(self, job_id: str, now: float, by_user: str) -> None:
        self.control.unhold(job_id, now, by_user)

    def requeue(self, job_id: str, now: float, by_user: str) -> list[Decision]:
        """Stop a running (or placed) job and queue it again at the head of its VC's queue."""
        return self.control.requeue(job_id, now, by_user)

    # ------------------------------------------------------------------ reading state

    # The engine's boundary: what the service, the simulator and the doors read.
    # The job table is the engine's own; code outside core/engine*.py goes through these.

    def job(self, job_id: str) -> JobRecord:
        """The job's record; ``RequestError`` when the engine does not know it."""
        return self.books.job(job_id)

    def find(self, job_id: str) -> JobRecord | None:
        """The job's record, or None when the engine does not know it."""
        return self.books.jobs.get(job_id)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self.books.jobs

    def __len__(self) -> int:
        return len(self.books.jobs)

    def job_ids(self) -> list[str]:
        """Every job the engine knows, in submission (or restore) order."""
        return list(self.books.jobs)

    def jobs(self, vc: str | None = None, state: JobState | str | None = None, *,
             states: Iterable[JobState] | None = None) -> list[JobRecord]:
        """Records in submission order, of ``vc`` when given, in ``state`` or among ``states``."""
        st = JobState(state) if state is not None else None
        within = frozenset(states) if states is not None else None
        return [r for r in self.books.jobs.values()
                if (vc is None or r.request.vc == vc) and (st is None or r.state is st)
                and (within is None or r.state in within)]

    def holding(self, vc: str) -> list[JobRecord]:
        """The jobs of ``vc`` holding cells (placed, running or preempting)."""
        if vc not in self.books.held:
            raise RequestError("vc", f"unknown VC {vc!r}")
        return self.books.running_of(vc)

    def counts(self) -> dict[tuple[str, str], int]:
        """(VC, state value) -> number of jobs."""
        return dict(Counter((r.request.vc, r.state.value) for r in self.books.jobs.values()))

    def queue(self, vc: str, now: float = 0.0) -> list[str]:
        """``vc``'s queued jobs in the order the next round tries them."""
        if vc not in self.books.lanes:
            raise RequestError("vc", f"unknown VC {vc!r}")
        return list(self._order(vc, now))

    def head(self, vc: str, now: float) -> JobRecord | None:
        """The first job of ``vc``'s queue not in retry back-off at ``now`` (what blocks the queue)."""
        if vc not in self.books.lanes:
            raise RequestError("vc", f"unknown VC {vc!r}")
        for jid in self._order(vc, now):
            rec = self.books.jobs[jid]
            if rec.not_before <= now:
                return rec
        return None

    def vc_version(self, vc: str) -> tuple[int, int]:
        """A token that moves whenever ``vc``'s own cells or the jobs holding them may have changed
        (a placement or a release in the VC, a health or capacity change): equal tokens, same VC view."""
        return self.books.held_ver[vc], self.books.vver[vc]

    def restore_order(self) -> list[JobRecord]:
        """Every job in the order ``restore`` takes them to rebuild this engine: jobs holding
        cells or ended first, then the queued ones by queue key."""
        queued = JobState.QUEUED
        return sorted(self.books.jobs.values(), key=lambda r: (r.state is queued, r.queue_key or 0))

    def capacity(self, vc: str) -> int:
        """Guaranteed GPUs the VC holds now: its spec's, plus cells borrowed, less cells lent."""
        return sum(self.books.vc_cap[vc].values())

    def vc_free(self, vc: str, chain: str | None = None) -> int:
        """GPUs of ``vc``'s guaranteed capacity not bound to its guaranteed jobs (in ``chain``,
        or in its best chain)."""
        return self.books.vc_free(vc, chain)

    def queued_count(self, vc: str, user: str | None = None) -> int:
        """Queued jobs of ``vc`` (of ``user`` in it); O(1), 0 for an unknown VC."""
        counts = self.books.queued_by_user.get(vc)
        if counts is None:
            return 0
        return counts.get(user, 0) if user is not None else sum(map(len, self.books.lanes[vc]))

    def lanes(self, vc: str) -> tuple[Mapping[str, None], Mapping[str, None]] | None:
        """``vc``'s queued job ids as kept, read-only (the TE-first lane, the rest; a queue policy
        may try them in another order: ``queue``); None for an unknown VC. O(1): no copy."""
        lanes = self.books.lanes.get(vc)
        return None if lanes is None else (MappingProxyType(lanes[0]), MappingProxyType(lanes[1]))

    # ------------------------------------------------------------------ forgetting

    def forget(self, job_id: str) -> None:
        """Drop an ended job's record (retention, or a submission the journal refused,
        cancelled first)."""
        rec = self.books.job(job_id)
        if rec.state not in TERMINAL:
            raise RequestError("job_id", f"{job_id} is {rec.state.value}; only ended jobs are forgotten")
        del self.books.jobs[job_id]
        self.books.failed_at.pop(job_id, None)
        if self._backfill is not None:
            self._backfill.forget(job_id)
        for waits in (self.books.waiters, self.books.pwaiters):
            waits.pop(job_id, None)

    def forget_attempts(self) -> None:
        """Forget every remembered failed attempt: each queued job is tried again at the next
        round (what a round costs without the memo, for the benchmarks)."""
        self.books.failed_at.clear()

    # ------------------------------------------------------------------ restart

    def restore(self, record: JobRecord) -> None:
        """Rebuild one job after a restart or a spec reload (records in ``restore_order``:
        holding and ended jobs first, queued ones by queue key)."""
        restore_record(self.books, self.control, record)
