"""Job control as Slurm users expect it: time limits, dependencies, hold, requeue.

A part of ``Engine`` (core/engine.py), composed like engine_events.py:

- **time limit** (``JobRequest.time_limit``, seconds of each run): when a run
  starts, a ``limit`` timer is armed at ``started + time_limit`` on the
  engine's clock; when it fires the job is stopped like a preemption (SIGTERM,
  its grace period, SIGKILL) and then ends FAILED with failure class
  ``timeout``, which is not retried unless the request asks (``max_retries``).
- **dependencies** (``JobRequest.after``): a queued job starts only once every
  job it names has succeeded; it waits without blocking the jobs behind it,
  and ends FAILED, never started, when one of them fails or is cancelled.
- **hold** / **unhold**: a held queued job is passed over by the rounds (it
  keeps its place) until released.
- **requeue**: a running job is stopped (as a preemption) and queued again at
  the head of its VC's queue.

Everything here reads time only from ``now``; no I/O.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .engine_validate import RequestError
from .failures import FailureClass, retry_decision
from .jobs import HOLDING, TERMINAL, Decision, JobState

if TYPE_CHECKING:
    from .engine_books import EngineBooks
    from .engine_records import JobRecord


def duration_text(seconds: float) -> str:
    s = int(round(seconds))
    if s % 3600 == 0 and s >= 3600:
        return f"{s // 3600}h"
    if s % 60 == 0 and s >= 60:
        return f"{s // 60}m"
    return f"{seconds:g}s"


class JobControl:
    """The engine's part for job control: built by ``Engine`` over its books (core/engine_books.py)."""

    def __init__(self, books: EngineBooks):
        self.books = books

    # ------------------------------------------------------------------ time limit

    def arm_limit(self, rec: JobRecord, now: float) -> None:
        """At a run's start: the time-limit timer of this run (and where it runs, kept after
        it ended: ``last_placement``)."""
        rec.last_placement = rec.placement
        limit = rec.request.time_limit
        rec.limit_at = None if limit is None else now + float(limit)
        if rec.limit_at is not None:
            self.books.timer(rec.limit_at, "limit", rec)   # this run's: void once the job moves on

    def limit_due(self, job_id: str, now: float, out: list[Decision]) -> None:
        rec = self.books.jobs.get(job_id)
        if rec is None or rec.limit_at is None or rec.limit_at > now or rec.timed_out:
            return   # a timer of an earlier run, or already stopping for it
        if rec.state is JobState.RUNNING:
            rec.timed_out = True
            self.books.preempt(rec, now, f"time limit {duration_text(rec.request.time_limit or 0)} reached", out)
        elif rec.state is JobState.PREEMPTING:
            rec.timed_out = True    # stopping anyway: it ends as timed out, not requeued

    def end_timed_out(self, rec: JobRecord, now: float, exit_code: int | None) -> None:
        """A run stopped by its time limit is over (its cells released): failed as ``timeout``,
        run again only when the request asks for retries."""
        rec.timed_out = False
        rec.limit_at = None
        rec.exit_code = exit_code
        rec.failure_class = FailureClass.TIMEOUT.value
        rec.failures += 1
        what = f"time limit {duration_text(rec.request.time_limit or 0)} reached"
        rec.last_error = what
        d = retry_decision(FailureClass.TIMEOUT, rec.failures, rec.request.max_retries, self.books.config.retry_cap)
        if d.retry:
            self.books.queue_again(rec, now, head=False, reason=f"{what}: {d.reason}", delay=d.delay)
        else:
            self.books.end(rec, now, JobState.FAILED, f"{what}: {d.reason}", FailureClass.TIMEOUT.value)

    # ------------------------------------------------------------------ dependencies

    def dependency_wait(self, rec: JobRecord) -> tuple[bool, str] | None:
        """None when ``rec`` may be tried; else (doomed, why): doomed when a job it depends
        on can no longer succeed."""
        pending = []
        for dep in rec.request.after:
            d = self.books.jobs.get(dep)
            if d is None or (d.state in TERMINAL and d.state is not JobState.SUCCEEDED):
                how = "is gone" if d is None else d.state.value
                return True, f"dependency {dep} {how}: never started (--after)"
            if d.state is not JobState.SUCCEEDED:
                pending.append(dep)
        if not pending:
            return None
        return False, f"waits for {', '.join(pending)} to succeed (--after)"

    def end_doomed(self, doomed: list[tuple[JobRecord, str]], now: float) -> None:
        for rec, why in doomed:
            if rec.state is JobState.QUEUED:
                self.books.dequeue(rec)
                self.books.end(rec, now, JobState.FAILED, why, FailureClass.DEPENDENCY.value)

    # ------------------------------------------------------------------ hold, requeue

    def hold(self, job_id: str, now: float, by_user: str) -> None:
        """A queued job is passed over until ``unhold``; it keeps its place in the queue."""
        rec = self.books.job(job_id)
        if rec.state is not JobState.QUEUED:
            raise RequestError("job_id", f"{job_id} is {rec.state.value}; only queued jobs can be held")
        if rec.held_by:
            raise RequestError("job_id", f"{job_id} is already held (by {rec.held_by})")
        rec.held_by = by_user
        rec.explain_wait(f"held by {by_user}: hived release {job_id} lets it start")
        rec.note(now, f"held by {by_user}")
        if self.books.blocked.get(rec.request.vc) == job_id:
            self.books.blocked[rec.request.vc] = None
        self.books.dirty.add(rec.request.vc)

    def unhold(self, job_id: str, now: float, by_user: str) -> None:
        rec = self.books.job(job_id)
        if not rec.held_by:
            raise RequestError("job_id", f"{job_id} is not held")
        rec.held_by = ""
        rec.explain_wait("released: tried at the next scheduling round")
        rec.note(now, f"released by {by_user}")
        self.books.dirty.add(rec.request.vc)

    def requeue(self, job_id: str, now: float, by_user: str) -> list[Decision]:
        """Stop a running (or placed) job and queue it again at the head of its VC's queue."""
        rec = self.books.job(job_id)
        out: list[Decision] = []
        if rec.state not in HOLDING or rec.state is JobState.PREEMPTING:
            raise RequestError("job_id", f"{job_id} is {rec.state.value}; only running or placed jobs "
                               "can be requeued")
        if rec.state is JobState.PLACED and rec.started_pending is not True:
            self.books.release(rec, now)
            self.books.queue_again(rec, now, head=True, reason=f"requeued by {by_user}")
            return out
        self.books.preempt(rec, now, f"requeued by {by_user}", out)
        return out

    def skip_in_scan(self, rec: JobRecord, doomed: list[tuple[JobRecord, str]]) -> bool:
        """Held, or waiting for dependencies: passed over without blocking the queue. A job
        whose dependency failed goes to ``doomed`` (ended after the scan)."""
        if rec.held_by:
            rec.explain_wait(f"held by {rec.held_by}: hived release {rec.job_id} lets it start")
            return True
        if rec.request.after:
            wait = self.dependency_wait(rec)
            if wait is not None:
                if wait[0]:
                    doomed.append((rec, wait[1]))
                else:
                    rec.explain_wait(wait[1])
                return True
        return False

    def deps_dirty(self) -> None:
        """Queues with jobs that wait for others are looked at every round (a look-up per
        dependency); the set forgets jobs that no longer wait."""
        waiting = self.books.after_jobs
        for jid in list(waiting):
            rec = self.books.jobs.get(jid)
            if rec is None or rec.state is not JobState.QUEUED:
                waiting.discard(jid)
            else:
                self.books.dirty.add(rec.request.vc)

    def note_deps(self, rec: JobRecord) -> None:
        """At submission or restore: a queued job with dependencies is watched."""
        if rec.request.after and rec.state is JobState.QUEUED:
            self.books.after_jobs.add(rec.job_id)

__all__ = ["JobControl", "duration_text"]
