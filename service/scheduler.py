"""SchedulerService: the engine, a store and a launcher, driven by the wall clock.

One lock guards the engine and the journal, so the REST handlers, the CLI in
embedded mode and the loop thread can all call in; every public method returns
JSON-able dicts. Bad input raises ``RequestError`` (400; ``NotFound``: 404), a
user acting on what is not theirs ``NotAuthorized`` (403), and a change the
journal cannot take ``ServiceDegraded`` (503), having changed nothing.

The loop is event-driven, and each round writes, then acts: what the engine
decided is committed before the launcher hears of it, so a ``kill -9`` at any
instant leaves a store from which ``__init__`` rebuilds the same state.
docs/service.md tells the whole story (the scheduling loop; write, then act;
degraded). Retention, disk quotas, cell exchange, job control and kernel idle
release are parts the service is composed of (host.py).
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import IO

from hived.core.engine import Engine, EngineConfig, RequestError
from hived.core.engine_records import JobRecord
from hived.core.jobs import HOLDING, Decision, DecisionKind, JobState

from . import snapshot
from .access import Access
from .admission import AdmissionControl, LimitReached
from .control import JobControl
from .data_dir import DataDirBusy, env_int, exclusive, load_spec, private_dir, refuse_emptied_journal, spec_text
from .degraded import ServiceDegraded
from .errors import NotAuthorized, NotFound, unknown_job
from .estimates import estimate_view
from .exchange import CellExchange
from .fair_queue import FairGate
from .host import HandOn
from .job_ids import JobIds, JobIdsError
from .kernel_connect import KernelConnections
from .kernel_idle import KernelIdle
from .launch_queue import LaunchQueue
from .launcher import Launcher, LauncherEvent, capability, refuse_unlaunchable, refuse_unreachable
from .launcher_events import adopt_holding, apply_events, replay_cancels, restore_order
from .local_gpus import this_machine
from .metrics import ServiceMetrics
from .payload import job_dict, parse_job, parse_needs
from .quota import DiskQuota
from .reconfigure import reload
from .retention import Retention
from .round_commit import Unsynced, act_once_durable
from .spec_journal import SOURCE_START, spec_at_start
from .store import DB_NAME, JournalWriteError, SqliteStore, Store, StoreDamaged
from .views import cluster_dict, queue_position, tail_position, vc_dict

log = logging.getLogger("hived.service")

MAX_ROUND_GAP = 0.05   # s: the longest pause between two rounds that follow each other at once
__all__ = ["DataDirBusy", "NotAuthorized", "NotFound", "SchedulerService", "unknown_job"]


class SchedulerService:
    """The service, composed of parts that each take it as a ``ServiceHost`` (host.py): retention,
    disk quotas, cell exchange, job control and kernel idle release."""

    # read the restart snapshot before building an engine (a usable one brings its own); a subclass
    # whose ``_recover`` changes the journal first (k8s/service.py) reads it in ``_recover``
    snapshot_early = True

    def __init__(self, spec_path, data_dir, launcher: str | Launcher = "local", tick_seconds: float = 0.5,
                 *, store: Store | None = None, synchronous: str = "FULL",
                 queue_policy: str = "fifo", preemption_policy: str = "fitgpp",
                 engine_config: EngineConfig | None = None, health="auto", scheme: str | None = None,
                 clock: Callable[[], float] = time.time):
        self.data_dir = private_dir(data_dir)
        self.tick_seconds = float(tick_seconds)
        self.clock = clock
        self._lock = threading.RLock()
        self.metrics = ServiceMetrics(self)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # "quota" is the baseline allocator of the paper's comparisons; $HIVED_SCHEME picks it too
        scheme = scheme or os.environ.get("HIVED_SCHEME") or "hived"
        if scheme not in ("hived", "quota"):
            raise ValueError(f"scheme: must be hived or quota, got {scheme!r}")
        self.policies = (queue_policy, preemption_policy, engine_config)
        self.scheme = scheme
        self.spec = load_spec(spec_path)
        # each pod's log is rotated at $HIVED_LOG_MAX_BYTES (10 MiB); $HIVED_LOG_KEEP segments kept (5)
        log_bytes, log_keep = env_int("HIVED_LOG_MAX_BYTES", 10 << 20, 1024), env_int("HIVED_LOG_KEEP", 5, 1)
        self._lockfile: IO[str] | None = exclusive(self.data_dir)
        try:
            self._open(spec_path, store, synchronous, launcher, health, log_bytes, log_keep)
        except BaseException:
            # refused (foreign store, bad spec for the stored jobs...): leave the directory free
            opened: Store | None = getattr(self, "store", None)   # unset when the store itself was refused
            if opened is not None and store is None:
                opened.close()
            self._lockfile.close()
            self._lockfile = None
            raise

    def _open(self, spec_path, store, synchronous, launcher, health, log_bytes, log_keep) -> None:
        jobs_dir = self.data_dir / "jobs"
        try:
            if store is None:
                refuse_emptied_journal(self.data_dir / DB_NAME, JobIds(self.data_dir, jobs_dir))
            self.store: Store = store or SqliteStore(self.data_dir, synchronous=synchronous)
            self.job_ids = JobIds(self.data_dir, jobs_dir, stored_max=getattr(self.store, "max_job_number", int)())
        except JobIdsError as exc:   # the ids file is part of the journal: damaged means refused
            raise StoreDamaged(str(exc)) from None
        self.pending: list[Decision] = []                 # decisions decided but not yet committed: not acted on
        self._gate = FairGate()                  # submissions: VCs in turn on to the lock
        self._unsynced: list[Unsynced] = []                # a round's commits awaiting their fsync (round_commit.py)
        self._intents: set[str] = set()          # jobs with a committed cancel intent not yet in their record
        self.degraded: str | None = None      # why the journal cannot be written, while it cannot
        # the journaled spec in force (service/spec_journal.py): a reloaded one outlives a restart
        self.spec_source = SOURCE_START
        try:
            kept, self.spec_source = spec_at_start(self.store, spec_text(spec_path), str(spec_path))
        except JournalWriteError as exc:   # the given spec could not be journaled: start on it, degraded
            kept = None
            self.degrade(exc)
        if kept is not None:
            self.spec = load_spec(kept)
        self.quota = DiskQuota(self)                            # service/quota.py
        self.retention_rules = Retention(self, self.quota)      # service/retention.py
        self.kernel_idle = KernelIdle(self, self.clock())       # service/kernel_idle.py
        self.kernel_connections = KernelConnections(self)       # service/kernel_connect.py
        self.job_control = JobControl(self)                     # service/control.py
        # the snapshot of the last clean stop (snapshot.py) brings its own engine when usable
        self._restart = snapshot.early(self) if self.snapshot_early else None
        self._restart_read = self.snapshot_early
        usable = self._restart if isinstance(self._restart, snapshot.Loaded) else None
        self.eng = usable.eng if usable is not None else self.new_engine(self.spec)
        self.exchange = CellExchange(self)   # cell exchange (service/exchange.py); _recover loads its state
        # this machine's GPUs, when the spec names this host (a spec from `hived discover`)
        self.local, launcher, health = this_machine(self.spec, self.eng.alloc, launcher, health, jobs_dir,
                                                    log_bytes, log_keep, lambda: self.spec)
        self.launcher = launcher
        self._inbox: list[LauncherEvent] = []    # what the launcher saw, for the next round
        self._health_inbox: list[tuple] = []     # GPU health changes polled, for the next round
        self._inbox_lock = threading.Lock()
        self._next_wakeup: float | None = None   # the engine's next deadline, after the last round
        self._launchq = LaunchQueue(launcher, self._deliver, self.tick_seconds, on_error=self._launcher_error)
        notify = capability(launcher, "on_change")   # a launcher that can say "exited" at once
        if notify is not None:
            notify(self._launchq.poke)
        self.health = health or None
        self.last_error: str | None = None
        self.ticks = 0
        self.unhealthy: dict[tuple, str] = {}
        self.journaled: dict[str, tuple | None] = {}   # job id -> fingerprint last written (None: rewrite)
        self.live: set[str] = set()             # non-terminal jobs (what a step can change)
        self._launched: set[str] = set()         # jobs the launcher is running (or adopted)
        self.extra: dict[str, dict] = {}        # stored jobs the current spec cannot restore
        self.recovered = self._recover()
        self._admission = AdmissionControl()
        self._admission.rebuild(self.eng.jobs())

    def new_engine(self, spec) -> Engine:
        """An engine on ``spec``, or over an allocator already holding the jobs (a spec reload)."""
        qp, pp, cfg = self.policies
        from hived.core.spec import ClusterSpec
        if self.scheme == "quota" and isinstance(spec, ClusterSpec):   # the baseline allocator, same engine
            from hived.core.quota import QuotaAllocator
            spec = QuotaAllocator(spec)
        return Engine(spec, queue_policy=qp, preemption_policy=pp, config=cfg)

    # ------------------------------------------------------------------ persistence

    @staticmethod
    def fingerprint(rec: JobRecord) -> tuple:
        return (rec.state, len(rec.history), id(rec.placement), rec.attempts, rec.progress,
                rec.killed, len(rec.waiting_for), rec.queue_key, rec.not_before,
                rec.cancel_requested)

    def write(self, ids, now: float, meta: dict | None = None, *, sync: bool = True) -> int:
        """Write the jobs among ``ids`` whose state moved since last written and ``meta`` in
        one commit (each record holds its placement, queue key and history). Returns the
        store's commit ticket; with ``sync=False`` the caller makes it durable with
        ``store.sync_through(ticket)`` after letting go of the lock (group commit).

        The bookkeeping of what was written changes only once the commit succeeded, so a
        failed commit is written again in full next time. On failure the service turns
        degraded and ``ServiceDegraded`` is raised."""
        eng = self.eng
        seen, written = {}, []
        try:
            with self.metrics.commit_seconds.time(), self.store.transaction(sync=sync):
                for jid in dict.fromkeys(ids):
                    rec = eng.find(jid)
                    if rec is None:
                        continue
                    fp = self.fingerprint(rec)
                    if self.journaled.get(jid) == fp:
                        continue
                    seen[jid] = fp
                    written.append(jid)
                    d = rec.to_dict()
                    if jid not in self.journaled:
                        self.store.add_job(d, now)
                    else:
                        self.store.update_job(d, now)
                done_intents = [j for j in written if j in self._intents]
                if done_intents:   # the records now say it: the intents are spent
                    self.store.clear_intents(done_intents)
                for key, value in (meta or {}).items():
                    self.store.set_meta(key, value)
                if self.degraded is not None:
                    # a real write, so that recovery is proven even when nothing else moved
                    self.store.set_meta("journal_checked", repr(now))
        except JournalWriteError as exc:
            raise ServiceDegraded(self.degrade(exc)) from None
        self.journaled.update(seen)
        self._intents.difference_update(done_intents)
        for jid in written:
            if eng.job(jid).state.terminal:
                self.live.discard(jid)
            else:
                self.live.add(jid)
        if self.degraded is not None:
            log.warning("the journal is written again; service no longer degraded")
            self.degraded = None
        return self.store.commit_ticket

    def write_live(self, now: float, also=(), meta=None, *, sync: bool = True) -> int:
        return self.write(list(self.live) + [j for j in also if j not in self.live], now, meta, sync=sync)

    def rewrite(self, job_id: str) -> None:
        """Write ``job_id`` at the next write even when its fingerprint did not move."""
        self.journaled[job_id] = None

    def act(self, decisions: list[Decision], now: float, also=()) -> bool:
        """Commit ``decisions`` with every job that moved (and ``also``), then carry them out (``_flush``)."""
        self.pending.extend(decisions)
        return self._flush(now, also=also)

    def forget_job(self, job_id: str) -> None:
        """A job whose rows left the journal (retention.py) leaves the engine and the service's memory."""
        if job_id in self.eng:
            self.eng.forget(job_id)
        self.journaled.pop(job_id, None)
        self.live.discard(job_id)
        self._admission.forget(job_id)

    def degrade(self, exc: Exception) -> str:
        """Turn degraded. The reason is shown to every user (503) and to unauthenticated
        readiness probes: it names the failure, not paths; the log has the details."""
        if self.degraded is None:
            log.error("journal write failed, service degraded until it succeeds: %s", exc)
        self.degraded = (f"the journal cannot be written ({getattr(exc, 'cause', None) or type(exc).__name__}); "
                         f"nothing was changed, and requests that change state are refused until it can be "
                         f"(the operator must free space or fix the data directory's disk; hived retries by itself)")
        return self.degraded

    def _flush(self, now: float, also=(), *, defer: bool = False) -> bool:
        """Commit every job that moved and the pending decisions, then act on those decisions.
        False (nothing acted on) while the journal refuses. ``defer`` (a round): the commit's
        fsync and the acting wait until the lock is let go (round_commit.py)."""
        pending = self.pending
        ids = list(also) + [d.job_id for d in pending]
        try:
            ticket = self.write_live(now, also=ids, sync=not defer)
        except ServiceDegraded:
            return False
        self.pending = []
        if defer:
            self._unsynced.append(Unsynced(ticket, list(self.live) + ids, pending))
        else:
            self.execute(pending, now)
        return True

    def at_rest(self) -> bool:
        """No round's commit awaits its fsync (round_commit.py): what a snapshot may hold."""
        return not self._unsynced

    def require_journal(self, now: float) -> None:
        """Before a request changes anything: the journal must take writes again."""
        if self.degraded is not None and not self._flush(now):
            raise ServiceDegraded(self.degraded)

    def readiness(self) -> tuple[bool, str]:
        """(True, "") when the service takes requests; (False, why) while degraded.
        Lock-free: answers at once even while a tick runs."""
        why = self.degraded
        return (False, why) if why is not None else (True, "")

    # ------------------------------------------------------------------ restart

    def _recover(self) -> dict:
        """Rebuild the engine from the store (from the snapshot read before the engine was built, or
        read now); adopt or relaunch the holding jobs."""
        t0 = time.perf_counter()
        now = self.clock()
        # the snapshot of the last clean stop and the rows of the journal's tail, or every row
        # (without a snapshot it restores the exchange first: cells still lent move to their borrowers)
        restart = self._restart if self._restart_read else snapshot.early(self)
        self._restart, self._restart_read = None, False   # a standby taking the lead reads it again
        held, rows, total, fast = snapshot.start(self, restart)
        holding, other, queued = restore_order(rows)
        unrestorable: list[str] = []
        for d, _ in holding + other + queued:
            try:
                restored = JobRecord.from_dict(d)
                self.eng.restore(restored)
            except Exception as exc:  # a spec change, a binding conflict: keep the record readable
                log.error("job %s cannot be restored: %s", d.get("job_id"), exc)
                self.extra[d["job_id"]] = d
                unrestorable.append(f"{d.get('job_id')}: {exc}")
                self.journaled[d["job_id"]] = ("extra",)
                continue
            self.journaled[restored.job_id] = self.fingerprint(restored)
            if not restored.state.terminal:
                self.live.add(restored.job_id)
        cancelled = self._replay_intents(now)
        adopted, lost, relaunch = adopt_holding(self.eng, self.launcher,
                                                held + [d["job_id"] for d, _ in holding], now)
        self._launched.update(adopted)
        try:
            self.write_live(now)
        except ServiceDegraded:
            pass   # starts degraded; the timer writes it once the disk takes writes
        seconds = round(time.perf_counter() - t0, 3)
        if total:
            log.info("recovered %d jobs in %.2fs: %d adopted, %d lost, %d to relaunch",
                     total, seconds, len(adopted), len(lost), len(relaunch))
        return {"jobs": total, "adopted": adopted, "lost": lost, "relaunch": relaunch, "unrestorable": unrestorable,
                "cancelled": cancelled, "seconds": seconds, "snapshot": fast}

    def _replay_intents(self, now: float) -> list[str]:
        """Cancels answered before the job's record said so: done now (before adoption, which
        then stops the processes of a job found preempting)."""
        done, intents = replay_cancels(self.store.intents(), self.eng, now)
        self._intents |= intents
        if self._intents:
            self.live.update(j for j in self._intents if j in self.eng)
            self.journaled.update({j: None for j in self._intents if j in self.journaled})  # rewrite: clears them
        return done

    # ------------------------------------------------------------------ the loop

    @property
    def lock(self) -> threading.RLock:
        """The service lock: the engine and the journal change only under it."""
        return self._lock

    def wake(self) -> None:
        """Run a round soon (something changed that it may act on)."""
        self._wake.set()

    def start(self) -> SchedulerService:
        with self._lock:
            if self._thread is not None:
                return self
            if self.health is not None and hasattr(self.health, "start"):
                self.health.start()
                for note in getattr(self.health, "notes", []):
                    log.warning("GPU health: %s", note)
            self._stop.clear()
            warm = capability(self.launcher, "warm")   # a runner ready before the first launch
            if warm is not None:
                warm()
            self._launchq.start()
            self.quota.meter.start()   # disk quotas, measured off the lock (quota.py)
            self._thread = threading.Thread(target=self._run, name="hived-scheduler", daemon=True)
            self._thread.start()
        return self

    def stop(self, cancel_jobs: bool = False, timeout: float = 30.0) -> None:
        """Stop the loop. Jobs keep running (a restart adopts them) unless
        ``cancel_jobs``, which cancels every unfinished job and waits up to
        ``timeout`` s for their processes."""
        if cancel_jobs:
            with self._lock:
                for jid in list(self.live):
                    rec = self.eng.job(jid)
                    if not rec.state.terminal:
                        try:
                            self.cancel_job(jid, rec.request.user)
                        except ServiceDegraded as exc:
                            log.error("jobs left running: %s", exc)
                            break
            self.settle()
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                self.tick()
                with self._lock:
                    if not self._launched:
                        break
                time.sleep(0.02)
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        self._launchq.stop()   # what was decided and committed is still carried out
        self.quota.meter.stop()

    def close(self) -> None:
        """Stop the loop and release the store and the data directory."""
        self.stop()
        close = capability(self.launcher, "close")
        if close is not None:
            close()
        ids = getattr(self, "job_ids", None)
        if ids is not None:
            ids.settle()    # ids go on without a jump after a clean restart
        if self._lockfile is not None:   # open (a second close finds the store closed)
            with self._lock:
                snapshot.save(self, self.clock())   # the next start loads it instead of replaying every job
        self.store.close()
        if self._lockfile is not None:
            self._lockfile.close()
            self._lockfile = None

    def _run(self) -> None:
        """Sleep until something happens (``_wake``: a submit, a cancel, a launcher event, a
        health change) or the engine's next deadline comes, then run one round. Wakes that
        arrive during a round make one more round, not one each; a round that follows another
        at once waits as long as the last one took first. Every ``tick_seconds``
        GPU health is polled and a round runs anyway (retention, quotas, exchanges)."""
        next_poll = 0.0
        while not self._stop.is_set():
            if time.monotonic() >= next_poll:
                next_poll = time.monotonic() + self.tick_seconds
                try:
                    self._poll_health()
                except Exception as exc:
                    self.last_error = f"{type(exc).__name__}: {exc}"
                    log.exception("GPU health poll failed")
            began = time.monotonic()
            try:
                self.tick()
            except Exception as exc:  # keep scheduling; say what went wrong
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("scheduler round failed")
            if self._wake.is_set():
                # busy (a queue draining, a stream of submits): leave the lock free as long as
                # the round held it, so requests are not starved and the next round takes more
                time.sleep(min(time.monotonic() - began, MAX_ROUND_GAP))
            timeout = next_poll - time.monotonic()
            due = self._next_wakeup
            if due is not None and self.degraded is None:
                timeout = min(timeout, due - self.clock())
            self._wake.wait(max(0.0005, timeout))
            self._wake.clear()

    def tick(self) -> list[dict]:
        """One round: launcher events and health changes in, engine step, write, then act.

        The round holds the lock; what it decided for the launcher is queued and carried
        out after the lock is released. When the loop is not started (the CLI, tests),
        the launcher is polled before and the actions are carried out after, in this thread."""
        inline = not self._launchq.running
        if inline:
            self._launchq.run_pending()
            self._poll_health()
        with self._lock, self.metrics.round_seconds.time():
            out = self._round()
            unsynced, self._unsynced = self._unsynced, []
        act_once_durable(self, unsynced)   # the round's fsync, outside the lock, then its decisions
        if inline:
            self._launchq.run_pending()
            if not self.quota.meter.running:   # disk quotas: measured outside the lock (quota.py)
                self.quota.meter.run_inline()
        return out

    def _round(self) -> list[dict]:
        now = self.clock()
        self.ticks += 1
        if self.degraded is not None and not self._flush(now):
            return []   # nothing new is decided on top of what is not yet durable
        touched = self._events(now)
        if self.health is not None:
            touched += self._health(now)
        touched += self.exchange.tick(now)
        decisions = self.eng.step(now)
        self.pending.extend(decisions)
        if self._flush(now, also=touched, defer=True):
            self.retention_rules.tick(now)
            self.kernel_idle.tick(now)
            self.kernel_connections.tick()
        self._next_wakeup = self.eng.next_wakeup()
        return [{"kind": d.kind.value, "job_id": d.job_id, "reason": d.reason} for d in decisions]

    def settle(self) -> None:
        """After a request that queued launcher actions: with no worker, carry them out now
        (the caller has released the lock)."""
        if not self._launchq.running:
            self._launchq.run_pending()

    def _deliver(self, events: list[LauncherEvent]) -> None:
        """From the launcher's worker: what it saw goes to the next round, which it wakes."""
        with self._inbox_lock:
            self._inbox.extend(events)
        self._wake.set()

    def _launcher_error(self, what: str) -> None:
        self.last_error = what

    def _events(self, now: float) -> list[str]:
        with self._inbox_lock:
            events, self._inbox = self._inbox, []
        return apply_events(self.eng, events, now, self._launched)

    def execute(self, decisions, now: float) -> None:
        """Act on committed decisions: launches and kills go to the launcher's queue (in this
        order), carried out once the lock is released; a launch that fails comes back as an exit."""
        for d in decisions:
            rec = self.eng.find(d.job_id)
            if rec is None:
                continue
            if d.kind is DecisionKind.START:
                if rec.state is not JobState.PLACED:
                    continue
                self.metrics.observe_start(rec, now)
                self._launchq.launch(d.job_id, rec.request, rec.placement, rec.attempts + 1)
                self._launched.add(d.job_id)
            elif d.kind in (DecisionKind.PREEMPT, DecisionKind.KILL):
                if d.job_id in self._launched:
                    self._launchq.terminate(d.job_id, d.grace_period if d.kind is DecisionKind.PREEMPT else 0.0)
                elif rec.state in HOLDING:
                    # nothing runs yet (placed, not launched): it is gone at once
                    self.eng.on_preempted(d.job_id, now)
                    self.try_write([d.job_id], now)
                    self._wake.set()   # the cells it held may start a queued job

    def try_write(self, ids, now: float) -> None:
        """A write with no action behind it: when it fails, the next flush writes it."""
        try:
            self.write(ids, now)
        except ServiceDegraded:
            pass

    def _poll_health(self) -> None:
        """Outside the lock: ask the GPU health monitor (NVML) what changed; a change wakes a round."""
        poll = getattr(self.health, "poll", None)
        if poll is None:
            return
        changes = poll()
        if changes:
            with self._inbox_lock:
                self._health_inbox.extend(changes)
            self._wake.set()

    def _health(self, now: float) -> list[str]:
        """Health changes polled -> allocator (set_health writes and acts itself)."""
        with self._inbox_lock:
            changes, self._health_inbox = self._health_inbox, []
        for node, gpu, healthy, reason in changes:
            self.set_health(node, gpu, healthy, reason, _now=now)
        return []

    # ------------------------------------------------------------------ API

    @property
    def access(self) -> Access:
        """Who may do what under the spec in force (service/access.py, as the REST API decides)."""
        cached = getattr(self, "_access", None)
        if cached is None or cached[0] is not self.spec:
            cached = self._access = (self.spec, Access.from_spec(self.spec))
        return cached[1]

    def _authorize_vc(self, user: str, vc: str, groups=()) -> None:
        """``groups``: the caller's JupyterHub groups, for VCs that name groups. The refusals
        name no member of the VC and list only the caller's own VCs (docs/security.md)."""
        if vc not in self.spec.vcs:
            raise self.unknown_vc(vc, user, groups)
        if not self.access.is_member(user, vc, groups):
            raise NotAuthorized(f"user {user!r} is not a member of VC {vc!r}")

    def unknown_vc(self, vc, user: str, groups=()) -> NotFound:
        return NotFound("vc", f"unknown VC {vc!r}; your VCs: {self.access.vcs_text(user, groups)}")

    def submit(self, user: str, payload: dict, groups=()) -> dict:
        """Validate, queue and durably store one job; returns its job dict.
        ``groups``: the user's JupyterHub groups (VC membership may come from them)."""
        if not isinstance(user, str) or not user.strip():
            raise RequestError("user", "must be a non-empty user name")
        req = parse_job(user, payload)
        refuse_unlaunchable(self.launcher, req)
        if capability(self.launcher, "check_reach") is not None:   # local: as the job's account
            with self._lock:   # members only: nobody else learns what a VC's account reaches
                self._authorize_vc(user, req.vc, groups)
            refuse_unreachable(self.launcher, req, parse_needs(payload))
        with self._gate.turn(req.vc), self._lock:   # VCs in turn on to the lock (fair_queue.py)
            self._authorize_vc(user, req.vc, groups)
            self.job_control.check_after(user, req.after, groups)
            self.quota.check(req.vc)
            self._admission.check(req, self.spec.vcs[req.vc].admission, self.eng)   # admission.py
            now = self.clock()
            self.require_journal(now)
            try:
                jid = self.job_ids.next(taken=lambda j: j in self.eng or j in self.extra)
            except JobIdsError as exc:
                raise ServiceDegraded(self.degrade(exc)) from None
            try:
                self.eng.submit(req, now, job_id=jid)
            except Exception:
                self.job_ids.give_back(jid)   # a refused request uses no id
                raise
            try:
                ticket = self.write([jid], now, sync=False)
            except Exception:
                # not stored = not accepted: take it back out of the engine
                self.eng.cancel(jid, now, user)
                self.eng.forget(jid)
                raise
            self._admission.add(jid, req)
            rec = self.eng.job(jid)
            out = job_dict(rec, tail_position(self.eng, rec), estimate_view(self.eng, rec, now))
        self._wake.set()   # the round's own commit is synced before it acts: no start before durable
        self._sync_submitted(ticket, jid, user)
        return out

    def _sync_submitted(self, ticket: int, jid: str, user: str) -> None:
        """Group commit: wait, outside the lock, for the fsync that covers this submission;
        submissions made meanwhile share it. Answered only once durable; if the disk fails,
        the job is cancelled (it may or may not have reached the disk) and refused."""
        try:
            self.store.sync_through(ticket)
        except JournalWriteError as exc:
            with self._lock:
                self.eng.cancel(jid, self.clock(), user)
                raise ServiceDegraded(self.degrade(exc)) from None

    def refuse_early(self, user: str) -> None:
        """Raise ``LimitReached`` now when ``user`` submits faster than allowed (no lock taken)."""
        refusal = self._admission.early_refusal(user)
        if refusal is not None:
            raise refusal

    def rate_refusal(self, user: str) -> LimitReached | None:
        """The refusal ``user``'s next submission would get for their rate, taking nothing (no lock)."""
        return self._admission.early_refusal(user, take=False)

    def record(self, job_id: str) -> JobRecord:
        rec = self.eng.find(job_id) if isinstance(job_id, str) else None
        if rec is None:
            raise unknown_job(job_id)
        return rec

    def get_job(self, job_id: str) -> dict:
        with self._lock:
            if job_id in self.extra:
                return job_dict(JobRecord.from_dict(self.extra[job_id]))
            rec = self.record(job_id)
            return job_dict(rec, queue_position(self.eng, rec), estimate_view(self.eng, rec, self.clock()))

    def list_jobs(self, vc: str | None = None, state: str | None = None,
                  user: str | None = None) -> list[dict]:
        with self._lock:
            if vc is not None and vc not in self.spec.vcs:
                raise NotFound("vc", f"unknown VC {vc!r}")
            if state is not None:
                try:
                    JobState(state)
                except ValueError:
                    raise RequestError("state", f"unknown state {state!r}; known: "
                                       f"{', '.join(s.value for s in JobState)}") from None
            positions: dict = {}
            for v in ([vc] if vc else self.spec.vcs):
                positions.update({j: i for i, j in enumerate(self.eng.queue(v))})
            now = self.clock()
            return [job_dict(r, positions.get(r.job_id), estimate_view(self.eng, r, now))
                    for r in self.eng.jobs(vc, state) if user is None or r.request.user == user]

    def cancel(self, job_id: str, user: str, groups=()) -> dict:
        with self._lock:
            rec = self.record(job_id)
            if not self.access.may_change_job(user, rec.request.vc, rec.request.user, groups):
                raise NotAuthorized(f"user {user!r} may not cancel {job_id}: it belongs to "
                                    f"{rec.request.user!r} and {user!r} is not an admin of VC {rec.request.vc!r}")
            self.cancel_job(job_id, user)
            out = job_dict(self.record(job_id))
        self.settle()
        return out

    def cancel_job(self, job_id: str, user: str) -> None:
        now = self.clock()
        self.require_journal(now)
        rec = self.record(job_id)
        if rec.state.terminal:
            raise RequestError("job_id", f"{job_id} already {rec.state.value}")
        # durable before it is acted on: once answered, a restart cannot forget it
        try:
            self.store.add_intent(job_id, "cancel", user, now)
        except JournalWriteError as exc:
            raise ServiceDegraded(self.degrade(exc)) from None
        self._intents.add(job_id)
        self.pending.extend(self.eng.cancel(job_id, now, user))
        self._flush(now, also=[job_id])   # on failure the kill waits for the journal; the intent holds
        self._wake.set()

    def logs(self, job_id: str, rank: int = 0, offset: int = 0) -> tuple[str, int]:
        with self._lock:
            rec = self.record(job_id)
            pods = len(rec.pod_gpus) or rec.request.total_pods
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < pods:
            raise RequestError("rank", f"must be an integer from 0 to {pods - 1}, got {rank!r}")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise RequestError("offset", f"must be an integer >= 0, got {offset!r}")
        return self.launcher.logs(job_id, rank, offset)

    def job_done(self, job_id: str) -> bool:
        with self._lock:
            return self.record(job_id).state.terminal

    def report_progress(self, job_id: str, done: float, total: float) -> dict:
        with self._lock:
            now = self.clock()
            self.require_journal(now)
            rec = self.record(job_id)
            before = rec.progress
            self.eng.report_progress(job_id, done, total, now)
            try:
                self.write([job_id], now)
            except ServiceDegraded:
                rec.progress = before   # not stored: not taken
                hook = getattr(self.eng.vc_policies[rec.request.vc], "on_progress", None)
                if hook is not None:
                    hook(rec, now)
                raise
            return job_dict(rec)

    def set_health(self, node: str, gpu: int | None, healthy: bool, reason: str = "", _now=None) -> dict:
        with self._lock:
            now = _now if _now is not None else self.clock()
            if _now is None:   # an admin's request; the monitor's reports come from the tick
                self.require_journal(now)
            decisions = self.eng.set_health(node, gpu, healthy, now)
            if healthy:
                self.unhealthy.pop((node, gpu), None)
            else:
                self.unhealthy[(node, gpu)] = reason or "marked unhealthy"
            # the hardware's state is a fact, not a request: kept even when the journal
            # refuses; the moves it causes wait for the journal like any decision
            self.pending.extend(decisions)
            self._flush(now)
            out = {"node": node, "gpu": gpu, "healthy": healthy, "preempted": [d.job_id for d in decisions]}
        if _now is None:   # a request, not the round: the round carries out its own actions
            self.settle()
            self._wake.set()
        return out

    def cluster(self) -> dict:
        with self._lock:
            return cluster_dict(self)

    def vcs(self) -> dict:
        with self._lock:
            return {"vcs": {v: vc_dict(self, v) for v in self.spec.vcs}}

    def vc(self, name: str) -> dict:
        with self._lock:
            if name not in self.spec.vcs:
                raise NotFound("vc", f"unknown VC {name!r}")
            return vc_dict(self, name)

    def reload_spec(self, path_or_text) -> dict:
        """Reconfigure through ``Allocator.reconfigure`` (reconfigure.py says how)."""
        return reload(self, path_or_text)

    # ------------------------------------------------------------------ the parts' doors
    # what the REST handlers, the CLI and the widgets call on the service: its parts' methods
    retention = HandOn("retention_rules", "view")
    set_retention = HandOn("retention_rules", "set")
    gc = HandOn("retention_rules", "gc")
    gc_totals = HandOn("retention_rules", "gc_totals")
    disk_quotas = HandOn("quota", "view")
    set_disk_quota = HandOn("quota", "set")
    control = HandOn("job_control", "control")
    kernel_activity = HandOn("kernel_idle", "activity")
    kernel_secret = HandOn("kernel_connections", "secret_for")
    report_kernel_connection = HandOn("kernel_connections", "report")
    kernel_connection = HandOn("kernel_connections", "connection")

    def status(self) -> dict:
        with self._lock:
            counts: dict = {}
            for (_, state), n in self.eng.counts().items():
                counts[state] = counts.get(state, 0) + n
            return {"ok": True, "degraded": self.degraded,
                    "data_dir": str(self.data_dir), "jobs": counts, "ticks": self.ticks,
                    "pid": os.getpid(), "last_error": self.last_error,
                    "shared_account": (capability(self.launcher, "shared_account")
                                       or (lambda vcs: None))(sorted(self.spec.vcs)),
                    "health_checks": None if self.health is None else list(getattr(self.health, "notes", [])),
                    "unhealthy": [{"node": n, "gpu": g, "reason": r} for (n, g), r in self.unhealthy.items()],
                    "recovered": {
                        k: (len(v) if isinstance(v, list) else v) for k, v in self.recovered.items()}}
