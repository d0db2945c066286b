"""Engine lifecycle events: start, exit, preemption, cancel, health, progress.

A part of ``Engine`` (core/engine.py), composed, not inherited, so that each file holds one
concern: engine.py decides (queues, the round, placement, preemption),
this file books what the outside world reports back.

Preempted jobs go back to the HEAD of their queue with their preemption
count kept; failed runs are classified (core/failures.py) and retried or not
by class, with back-off (``not_before``) and a cap.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from .engine_records import JobRecord
from .engine_validate import RequestError
from .failures import FailureClass, classify, retry_decision
from .jobs import HOLDING, Decision, DecisionKind, JobState

if TYPE_CHECKING:
    from .engine_books import EngineBooks
    from .engine_control import JobControl


class EngineEvents:
    """The engine's part that books events: built by ``Engine`` over its books
    (core/engine_books.py); it asks job control for time limits."""

    def __init__(self, books: EngineBooks, control: JobControl):
        self.books = books
        self.control = control

    # ------------------------------------------------------------------ lifecycle events

    def on_started(self, job_id: str, now: float) -> None:
        rec = self.books.job(job_id)
        # PREEMPTING: started and preempted in the same round (a guaranteed job of
        # another VC wanted the GPUs); it runs until its grace period ends.
        ok = ((rec.state is JobState.PLACED and not rec.waiting_for)
              or (rec.state is JobState.PREEMPTING and rec.started_pending is True))
        if not ok:
            raise RequestError("job_id", f"{job_id} cannot start: it is {rec.state.value}"
                               + (f", waiting for {rec.waiting_for}" if rec.waiting_for else ""))
        rec.started_pending = False
        rec.started = now
        if rec.first_started is None:
            rec.first_started = now
        rec.attempts += 1
        if rec.state is JobState.PLACED:
            rec.mark_running(now)
        else:   # its grace period (and the timer that ends it) stays as it was
            rec.note(now, "started (already asked to stop)")
        self.control.arm_limit(rec, now)   # after the state change: the run's epoch owns the timer

    def on_preempted(self, job_id: str, now: float) -> None:
        """The victim's processes are gone: free its cells, put it back at the head."""
        rec = self.books.job(job_id)
        if rec.state not in HOLDING:
            raise RequestError("job_id", f"{job_id} is {rec.state.value}, not running")
        was_started = rec.state is not JobState.PLACED
        # TE jobs it was preempted for and that still wait: it must not take the room back first
        preemptors = [w for w in self.books.pwaiters.get(job_id, ())
                      if self.books.jobs[w].state is JobState.QUEUED]
        self.books.release(rec, now)
        if rec.cancel_requested:
            self.books.end(rec, now, JobState.CANCELLED, "cancelled", FailureClass.CANCELLED.value)
            return
        if rec.timed_out:
            self.control.end_timed_out(rec, now, None)
            return
        rec.preemptions += 1
        rec.gpus_preempted += rec.gpus
        self.books.stats["preempted_gpus"] += rec.gpus
        self.books.queue_again(rec, now, head=True, reason="preempted" if was_started else "preempted before start")
        if preemptors:
            self.move_behind(rec, preemptors)

    def move_behind(self, rec: JobRecord, anchors: list[str]) -> None:
        """Move queued ``rec`` right behind the last of ``anchors`` if it stands before any
        of them in the same lane (a queue policy without TE-first would otherwise
        let a preempted BE job take back the very cells freed for its preemptor)."""
        lane = self.books.lane(rec)
        keys = list(lane)
        pos = {j: k for k, j in enumerate(keys)}
        mine = pos.get(rec.job_id)
        last = max((pos[a] for a in anchors if a in pos), default=None)
        if mine is None or last is None or mine > last:
            return
        keys.remove(rec.job_id)
        keys.insert(last, rec.job_id)  # ``last`` moved down by one when rec left
        lane.clear()
        for j in keys:
            lane[j] = None
        # a key between its new neighbours keeps the lane sorted (and a restart in this order);
        # behind the tail, half a step: every later submission takes a whole key above it
        before = self.books.queue_key(keys[last - 1])
        after = self.books.queue_key(keys[last + 1]) if last + 1 < len(keys) else None
        rec.queue_key = before + 0.5 if after is None else (before + after) / 2

    def on_finished(self, job_id: str, now: float, exit_code: int, log_tail: str = "") -> None:
        rec = self.books.job(job_id)
        if rec.state not in HOLDING:
            raise RequestError("job_id", f"{job_id} is {rec.state.value}, not running")
        if rec.state is JobState.PREEMPTING and exit_code != 0:
            self.on_preempted(job_id, now)  # it died because we asked it to
            return
        if rec.timed_out and not rec.cancel_requested:   # ended cleanly at its time limit's SIGTERM
            self.books.release(rec, now)
            self.control.end_timed_out(rec, now, exit_code)
            return
        c = classify(exit_code, log_tail)
        self.books.release(rec, now)
        rec.exit_code = exit_code
        if exit_code != 0:
            rec.last_error = (log_tail or "").strip()[-1000:] or f"exit code {exit_code}"
        rec.failure_class = c.cls.value
        if c.cls is FailureClass.SUCCESS:
            self.books.end(rec, now, JobState.SUCCEEDED, "exit 0")
            return
        if c.cls is not FailureClass.PREEMPTED:
            rec.failures += 1
        d = retry_decision(c.cls, rec.failures, rec.request.max_retries, self.books.config.retry_cap)
        if d.retry:
            self.books.queue_again(rec, now, head=c.cls is FailureClass.PREEMPTED, reason=f"{c}: {d.reason}",
                                   delay=d.delay)
        else:
            self.books.end(rec, now, JobState.FAILED, f"exit {exit_code}, {c}: {d.reason}")

    def cancel(self, job_id: str, now: float, by_user: str) -> list[Decision]:
        rec = self.books.job(job_id)
        # who may cancel is the service's to decide (service/access.py); by_user is recorded
        if rec.state.terminal:
            raise RequestError("job_id", f"{job_id} already {rec.state.value}")
        out: list[Decision] = []
        if rec.state is JobState.QUEUED:
            self.books.dequeue(rec)
            self.books.dirty.add(rec.request.vc)  # the jobs behind it may go now
            if self.books.blocked.get(rec.request.vc) == job_id:
                self.books.blocked[rec.request.vc] = None
        elif rec.state is JobState.PLACED and rec.started_pending is not True:
            # waiting for victims, or ready with its START not yet decided: nothing was launched
            self.books.release(rec, now)
        elif rec.state is JobState.PREEMPTING:
            # already told to stop: the cancel ends the wait, the KILL goes out now
            rec.cancel_requested = True
            if not rec.killed:
                rec.shorten_grace(now, now, f"cancelled by {by_user}: killed at once")
                rec.mark_killed()
                out.append(Decision(DecisionKind.KILL, job_id, reason=f"cancelled by {by_user}"))
            return out
        else:
            rec.cancel_requested = True
            self.books.preempt(rec, now, f"cancelled by {by_user}", out)
            return out
        self.books.end(rec, now, JobState.CANCELLED, f"cancelled by {by_user}", FailureClass.CANCELLED.value)
        return out

    def set_health(self, node: str, gpu: int | None, healthy: bool, now: float,
                   move: bool = True) -> list[Decision]:
        """``move=False`` (a cordon): the cells take no new jobs, the jobs on them stay."""
        owners = self.books.alloc.set_health(node, gpu, healthy) or []
        out: list[Decision] = []
        for o in owners if move else ():
            rec = self.books.jobs.get(o)
            if rec is not None and rec.state in HOLDING and rec.state is not JobState.PREEMPTING:  # not leaving
                where = f"{node}" + (f" GPU {gpu}" if gpu is not None else "")
                self.books.preempt(rec, now, f"hardware unhealthy on {where}", out)
        self.books.gver += 1
        for v in self.books.vver:
            self.books.vver[v] += 1
        self.books.dirty.update(self.books.lanes)
        return out

    def report_progress(self, job_id: str, done: float, total: float, now: float) -> None:
        rec = self.books.job(job_id)
        if not (isinstance(total, (int, float)) and total > 0):
            raise RequestError("total", f"must be > 0, got {total!r}")
        if not (isinstance(done, (int, float)) and 0 <= done <= total):
            raise RequestError("done", f"must be within [0, {total}], got {done!r}")
        rec.progress = (done, total)
        hook = getattr(self.books.vc_policies[rec.request.vc], "on_progress", None)
        if hook is not None:   # e.g. a policy ordering by estimated remaining time
            hook(rec, now)

    def on_capacity_changed(self, vcs: Iterable[str], downgraded: Iterable[str], now: float) -> None:
        """VC views changed under the engine (a cell exchange window began or ended).

        ``vcs``: VCs whose cells moved; their queues are tried again (their
        guaranteed capacity is re-read from the allocator, so queued jobs may
        now run on borrowed cells). ``downgraded``: jobs the allocator re-bound
        as opportunistic on the same GPUs (cells given back while they ran);
        the engine books them as opportunistic from now on.
        """
        # only the cell allocator moves cells between VCs (the quota baseline has no transfer)
        quota = getattr(self.books.alloc, "quota", None) if hasattr(self.books.alloc, "transfer") else None
        for vc in vcs:
            if vc not in self.books.vver:
                raise RequestError("vc", f"unknown VC {vc!r}")
            if quota is not None:
                cap = {c: 0 for c in self.books.spec.chains}
                for (chain, level), count in quota[vc].items():
                    cap[chain] += count * self.books.spec.chains[chain].gpus_per_level[level - 1]
                self.books.vc_cap[vc] = cap
            self.books.vver[vc] += 1
        for jid in downgraded:
            rec = self.books.jobs.get(jid)
            if rec is None or rec.placement is None or rec.opportunistic or rec.state not in HOLDING:
                continue
            rec.opportunistic = True
            grant = self.books.alloc.grant_of(jid) if hasattr(self.books.alloc, "grant_of") else None
            if grant is not None:   # its binding now says opportunistic (what a restart restores)
                rec.placement = grant.placement
            self.books.vc_used[rec.request.vc][rec.placement.chain] -= rec.gpus
            usage = self.books.view.usage.get(jid)
            if usage is not None:   # same GPUs, now counted as opportunistic work
                self.books.view.unbind(jid, guaranteed=True)
                self.books.view.bind(jid, usage, guaranteed=False)
            rec.note(now, "cells given back by an exchange: now opportunistic")
        self.books.gver += 1
        self.books.dirty.update(self.books.lanes)

