"""Retention of finished jobs (``Retention``, a part of SchedulerService: see host.py).

Each VC may have a policy, set by its admins or a cluster admin: keep finished
jobs (succeeded, failed, cancelled) at most ``max_age`` seconds after they
ended, and at most the ``keep`` newest of them. ``gc`` removes what a policy
lets go of: the job's rows in the journal (record, history, preemptions), the
job from memory, then its ``jobs/<id>/`` folder (logs, work files). Jobs that
are not finished (queued again after a preemption or a failure to be
retried, running, placed) are never touched, nor their folders: a resumable
run keeps its checkpoint. Job ids stay unique: the id high-water mark
(job_ids.py) is kept apart from the rows removed.

The policies live in the journal (``meta`` key ``retention``) and are applied
by the timer every ``GC_INTERVAL`` seconds and on demand (``hived gc``,
``POST /hived/api/gc``).
"""
from __future__ import annotations

import json
import logging
import math
import os
from typing import Any, Protocol

from hived.core.engine import RequestError
from hived.core.jobs import TERMINAL

from .disk_walk import TreeWalk
from .host import ServiceHost, administered


class FolderQuota(Protocol):
    """What retention tells the disk quota (quota.py's ``DiskQuota``, which imports this
    module): folders set aside for its meter to delete, and jobs removed."""
    aside_pending: bool
    meter: Any

    def job_removed(self, job_id: str, vc: str | None) -> None: ...

log = logging.getLogger("hived.service")

GC_INTERVAL = 600.0   # seconds between automatic collections
TRASH_PREFIX = ".removed-"   # jobs/.removed-<id>: the folder of a removed job, until it is deleted


def _number(job_id: str) -> int:
    return int(job_id[1:]) if job_id[1:].isdigit() else 0


def _limit(name: str, value, integer: bool) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        raise RequestError(name, f"must be {'an integer' if integer else 'a number of seconds'} or null, "
                                 f"got {value!r}")
    if not math.isfinite(value) or value < 0 or value > 10 ** 12:
        raise RequestError(name, f"must be between 0 and {10 ** 12}, got {value!r}")
    return value


class Retention:
    """The VCs' retention policies and the collection of what they let go of."""

    def __init__(self, host: ServiceHost, quota: FolderQuota):
        self.host = host
        self.quota = quota           # told of every removed job (its folder's bytes no longer count)
        self.last_gc: float | None = None
        raw = getattr(host.store, "get_meta", lambda k: None)("retention")
        self.policies: dict = json.loads(raw) if raw else {}
        raw = getattr(host.store, "get_meta", lambda k: None)("gc_totals")
        # per VC, what the jobs gc removed had counted (the metrics' counters go on from there)
        self.gc_totals: dict[str, dict[str, int]] = json.loads(raw) if raw else {}

    def _gc_totals_with(self, ids: list[str]) -> dict[str, dict[str, int]]:
        totals = {vc: dict(t) for vc, t in self.gc_totals.items()}
        for j in ids:
            rec = self.host.eng.find(j)
            if rec is not None:
                t = totals.setdefault(rec.request.vc, {"submitted": 0, "preemptions": 0})
                t["submitted"] = t.get("submitted", 0) + 1
                t["preemptions"] = t.get("preemptions", 0) + rec.preemptions
        return totals

    def view(self) -> dict:
        """Every VC's policy (``null`` where none: its finished jobs are kept)."""
        with self.host.lock:
            return {"policies": {v: self.policies.get(v) for v in sorted(self.host.spec.vcs)}}

    def set(self, user: str, vc: str, max_age=None, keep=None, groups=()) -> dict:
        """Set (or, with both limits ``None``, remove) the policy of ``vc``; durable before it is
        answered. Raises ``ServiceDegraded`` (changing nothing) when the journal cannot take it."""
        max_age = _limit("max_age", max_age, integer=False)
        keep = _limit("keep", keep, integer=True)
        with self.host.lock:
            administered(self.host, user, vc, groups)
            now = self.host.clock()
            self.host.require_journal(now)
            policies = dict(self.policies)
            if max_age is None and keep is None:
                policies.pop(vc, None)
            else:
                policies[vc] = {"max_age": max_age, "keep": keep}
            self.host.write([], now, meta={"retention": json.dumps(policies)})
            self.policies = policies
            # its setters (REST, CLI) apply it at once with gc() and report what it removed;
            # a round slipping in between would remove it first: the automatic one waits its interval
            self.last_gc = now
            return {"vc": vc, "policy": policies.get(vc)}

    def gc(self, user: str, vc: str | None = None, dry_run: bool = False, policy: dict | None = None,
           groups=()) -> dict:
        """Apply the policies of the VCs ``user`` administers (or of ``vc``) now. ``policy``
        (with ``dry_run`` and ``vc``): what a policy would remove, without setting it."""
        with self.host.lock:
            vcs = administered(self.host, user, vc, groups)
            now = self.host.clock()
            if policy is not None:
                if not dry_run or vc is None:
                    raise RequestError("policy", "a trial policy needs vc and dry_run; set_retention sets one")
                policy = {"max_age": _limit("max_age", policy.get("max_age"), integer=False),
                          "keep": _limit("keep", policy.get("keep"), integer=True)}
                out = {**self._collect(vcs, now, True, {vc: policy}), "policy": policy}
            else:
                if not dry_run:
                    self.host.require_journal(now)
                out = self._collect(vcs, now, dry_run)
        # outside the lock: the folders are measured (and removed) by a walk no tree can break
        out["freed_bytes"] = sweep(out.pop("folders"), remove=not dry_run)
        return out

    def tick(self, now: float) -> None:
        if not self.policies or (self.last_gc is not None and now - self.last_gc < GC_INTERVAL):
            return
        from .degraded import ServiceDegraded
        self.last_gc = now
        try:
            out = self._collect(sorted(v for v in self.policies if v in self.host.spec.vcs), now, False)
        except ServiceDegraded:
            return   # degraded now; tried again at the next interval
        if out["removed"]:
            log.info("retention: removed %d finished jobs", len(out["removed"]))
            self.quota.aside_pending = True   # their folders are deleted by the quota meter, off the lock

    def _expired(self, vcs: list[str], now: float, policies: dict) -> list[str]:
        out = []
        for vc in vcs:
            policy = policies.get(vc)
            if not policy:
                continue
            # newest first; ties (jobs that ended in the same tick) by submission
            done = sorted(self.host.eng.jobs(vc, states=TERMINAL),
                          key=lambda r: (r.ended or r.submitted or 0.0, r.submitted or 0.0, _number(r.job_id)),
                          reverse=True)
            keep, max_age = policy.get("keep"), policy.get("max_age")
            for i, r in enumerate(done):
                if (keep is not None and i >= keep) or \
                        (max_age is not None and now - (r.ended or r.submitted or now) > max_age):
                    out.append(r.job_id)
        return sorted(out, key=_number)

    def _collect(self, vcs: list[str], now: float, dry_run: bool, policies: dict | None = None) -> dict:
        """Under the lock: forget the expired jobs and move their folders aside (a rename), so
        that the walk that measures and removes them runs after the lock is released
        (``folders``: what to measure, or to remove)."""
        from .degraded import ServiceDegraded
        from .store import JournalWriteError
        ids = self._expired(vcs, now, self.policies if policies is None else policies)
        jobs_dir = self.host.data_dir / "jobs"
        if dry_run or not ids:
            return {"removed": ids, "folders": [jobs_dir / j for j in ids], "dry_run": dry_run, "vcs": vcs}
        totals = self._gc_totals_with(ids)
        try:   # write, then act: the rows go first, so a crash leaves folders, never rows without them
            with self.host.store.transaction():   # with what they counted, so counters never go back
                self.host.store.set_meta("gc_totals", json.dumps(totals, sort_keys=True))
                self.host.store.delete_jobs(ids)
        except JournalWriteError as exc:
            self.host.degrade(exc)
            assert self.host.degraded is not None   # degrade has just set it
            raise ServiceDegraded(self.host.degraded) from None
        folders = []
        self.gc_totals = totals
        for j in ids:
            rec = self.host.eng.find(j)
            # what was freed counts at once (quota.py measures again later)
            self.quota.job_removed(j, None if rec is None else rec.request.vc)
            self.host.forget_job(j)
            aside = jobs_dir / f"{TRASH_PREFIX}{j}"
            try:
                os.rename(jobs_dir / j, aside)
                folders.append(aside)
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.error("retention: cannot move the folder of %s aside: %s", j, exc)
        self.quota.meter.poke()
        return {"removed": ids, "folders": folders, "dry_run": False, "vcs": vcs}


def sweep(folders, remove: bool) -> int:
    """The bytes the plain files under ``folders`` hold; with ``remove``, the folders go too.
    A folder that cannot be walked whole is logged and left (``sweep_aside`` tries again)."""
    total = 0
    for folder in folders:
        walk = TreeWalk(folder, remove=remove)
        walk.advance()
        total += walk.bytes
        if walk.error:
            log.error("retention: %s: %s", folder, walk.error)
    return total


def sweep_aside(jobs_dir) -> None:
    """Remove the folders of removed jobs left aside (by the automatic collection, or a crash)."""
    try:
        names = [n for n in os.listdir(jobs_dir) if n.startswith(TRASH_PREFIX)]
    except FileNotFoundError:
        return
    sweep([os.path.join(jobs_dir, n) for n in names], remove=True)
