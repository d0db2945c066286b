"""Admission limits: what one user, or one VC, may ask of the service (the spec's ``admission``).

Checked at submission, under the service lock, before anything is stored:

- queued jobs, per VC and per user in the VC (``maxQueued``, ``maxQueuedPerUser``);
- submissions per second, per VC and per user (``submitsPerSecond``, and
  ``submitsPerSecondPerUser`` of the VC submitted to; one bucket per user across VCs, so that
  it can be checked before a request's body is read): token buckets holding ``BURST`` seconds'
  worth; a refusal says when to try again (HTTP 429 with ``Retry-After``);
- journal bytes: the command, env and name of the VC's stored jobs (finished ones too, until
  ``hived gc`` removes them), per VC and per user (``maxJournalBytes``,
  ``maxJournalBytesPerUser``).

A refusal is one line naming the limit and its spec key, and changes nothing (a refused
submission takes no token). The defaults (core/spec.py ``Admission``) hold for VCs that do not
set a key. Clocks: ``time.monotonic`` (rates are about the service's own pace, not dates).
"""
from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from hived.core.engine import RequestError


class LimitReached(RequestError):
    """A submission beyond an admission limit (HTTP 429); ``retry_after``: seconds, when known."""

    def __init__(self, field: str, problem: str, retry_after: float | None = None):
        super().__init__(field, problem)
        self.retry_after = retry_after


def journal_bytes(req) -> int:
    """What a job's request adds to the journal that its owner chooses: command, env, name."""
    command = req.command if isinstance(req.command, str) else "\0".join(req.command)
    text = command + (req.name or "")
    if req.env:
        text += "".join(k + v for k, v in req.env.items())
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


BURST = 10.0   # seconds' worth of submissions a bucket holds (a burst of 10 x the rate)


def rate_refusal(who: str, rate: float, spec_key: str, wait: float) -> str:
    return f"{who} submits more than {rate:g} jobs per second (admission.{spec_key}); try again in {math.ceil(wait)} s"


class _Bucket:
    def __init__(self, rate: float, now: float):
        self.rate, self.level, self.at = rate, 0.0, now

    def wait(self, rate: float, now: float, burst: float) -> float:
        """Seconds until one more submission fits (0: now)."""
        self.level = max(0.0, self.level - (now - self.at) * self.rate)
        self.rate, self.at = rate, now
        room = max(1.0, rate * burst)
        return 0.0 if self.level + 1 <= room else (self.level + 1 - room) / rate

    def take(self) -> None:
        self.level += 1


class AdmissionControl:
    """The counters and buckets of the limits (one per service)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._buckets: dict[tuple[str | None, str | None], _Bucket] = {}   # (vc, None) or (None, user)
        self._paid: dict[str, int] = {}   # user -> tokens taken at the door, not yet used by a submission
        self._guard = threading.Lock()     # the doors' threads and the service's share the buckets
        self._bytes: dict[str, tuple[str, str, int]] = {}   # job id -> (vc, user, bytes)
        self._vc_bytes: dict[str, int] = {}
        self._user_bytes: dict[tuple[str, str], int] = {}

    def rebuild(self, records) -> None:
        """Count the journal bytes of the jobs held (at start, after a reload), in one pass."""
        sizes: dict[str, tuple[str, str, int]] = {}
        vcs: dict[str, int] = {}
        users: dict[tuple[str, str], int] = {}
        for rec in records:
            req = rec.request
            vc, user, n = req.vc, req.user, journal_bytes(req)
            sizes[rec.job_id] = (vc, user, n)
            vcs[vc] = vcs.get(vc, 0) + n
            users[vc, user] = users.get((vc, user), 0) + n
        self._bytes, self._vc_bytes, self._user_bytes = sizes, vcs, users

    def add(self, job_id: str, req) -> None:
        n = journal_bytes(req)
        self._bytes[job_id] = (req.vc, req.user, n)
        self._vc_bytes[req.vc] = self._vc_bytes.get(req.vc, 0) + n
        self._user_bytes[req.vc, req.user] = self._user_bytes.get((req.vc, req.user), 0) + n

    def forget(self, job_id: str) -> None:
        vc, user, n = self._bytes.pop(job_id, (None, None, 0))
        if vc is not None and user is not None:
            self._vc_bytes[vc] -= n
            self._user_bytes[vc, user] -= n

    def early_refusal(self, user: str, take: bool = True) -> LimitReached | None:
        """Before a request's body is even read: the refusal ``user``'s submission gets for their
        rate (as of their last submission's limit), or None having taken its token then (so that
        several requests in flight cannot pass on one token, and a refused body is never parsed).
        A flood of large bodies then costs the server little. ``take=False``: only look (the
        door's first, cheapest check; the token is taken by the check that follows)."""
        with self._guard:
            bucket = self._buckets.get((None, user))
            if bucket is None:
                return None
            wait = bucket.wait(bucket.rate, self.clock(), BURST)
            if wait > 0:
                return LimitReached("vc", rate_refusal(f"user {user!r}", bucket.rate, "submitsPerSecondPerUser",
                                                       wait), retry_after=wait)
            if not take:
                return None
            bucket.take()
            self._paid[user] = min(self._paid.get(user, 0) + 1, max(1, int(bucket.rate * BURST)))
            return None

    def check(self, req, limits, eng) -> None:
        """Raise ``LimitReached`` when ``req`` is beyond a limit of its VC; else take its tokens
        (the user's was taken already when ``early_refusal`` let the request in)."""
        with self._guard:
            self._check(req, limits, eng)

    def _check(self, req, limits, eng) -> None:
        vc, user = req.vc, req.user
        now = self.clock()
        paid = self._paid.get(user, 0) > 0
        if paid:
            self._paid[user] -= 1
        waits = []
        for key, rate, who, spec_key in (
                ((vc, None), limits.submits_per_second, f"VC {vc!r}", "submitsPerSecond"),
                ((None, user), limits.submits_per_second_per_user, f"user {user!r}", "submitsPerSecondPerUser")):
            bucket = self._buckets.setdefault(key, _Bucket(rate, now))
            wait = bucket.wait(rate, now, BURST)
            if key[0] is None and paid:
                continue   # its token went at the door
            if wait > 0:
                raise LimitReached("vc", rate_refusal(who, rate, spec_key, wait), retry_after=wait)
            waits.append(bucket)
        queued = eng.queued_count(vc)
        if queued >= limits.max_queued:
            raise LimitReached("vc", f"VC {vc!r} has {queued} queued jobs, its limit (admission.maxQueued); "
                                     f"wait for some to start, or cancel some")
        mine = eng.queued_count(vc, user)
        if mine >= limits.max_queued_per_user:
            raise LimitReached("vc", f"user {user!r} has {mine} queued jobs in VC {vc!r}, the limit "
                                     f"(admission.maxQueuedPerUser); wait for some to start, or cancel some")
        n = journal_bytes(req)
        if self._vc_bytes.get(vc, 0) + n > limits.max_journal_bytes:
            raise LimitReached("vc", f"VC {vc!r} jobs' commands, env and names would take "
                                     f"{self._vc_bytes.get(vc, 0) + n} bytes, over its limit of "
                                     f"{limits.max_journal_bytes} (admission.maxJournalBytes); remove finished "
                                     f"jobs (hived gc) or submit smaller ones")
        if self._user_bytes.get((vc, user), 0) + n > limits.max_journal_bytes_per_user:
            raise LimitReached("vc", f"user {user!r} jobs' commands, env and names in VC {vc!r} would take "
                                     f"{self._user_bytes.get((vc, user), 0) + n} bytes, over the limit of "
                                     f"{limits.max_journal_bytes_per_user} (admission.maxJournalBytesPerUser); "
                                     f"remove finished jobs (hived gc) or submit smaller ones")
        for bucket in waits:
            bucket.take()

