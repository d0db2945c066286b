"""Retention of finished jobs (a mixin of SchedulerService).

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

from hived.core.engine import RequestError
from hived.core.jobs import TERMINAL

from .disk_walk import TreeWalk
from .mixin_host import MixinHost

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


class RetentionMixin(MixinHost):
    _retention: dict
    _last_gc: float | None = None

    def _load_retention(self) -> None:
        raw = getattr(self.store, "get_meta", lambda k: None)("retention")
        self._retention = json.loads(raw) if raw else {}
        raw = getattr(self.store, "get_meta", lambda k: None)("gc_totals")
        # per VC, what the jobs gc removed had counted (the metrics' counters go on from there)
        self.gc_totals: dict[str, dict[str, int]] = json.loads(raw) if raw else {}

    def _gc_totals_with(self, ids: list[str]) -> dict[str, dict[str, int]]:
        totals = {vc: dict(t) for vc, t in self.gc_totals.items()}
        for j in ids:
            rec = self.eng.find(j)
            if rec is not None:
                t = totals.setdefault(rec.request.vc, {"submitted": 0, "preemptions": 0})
                t["submitted"] = t.get("submitted", 0) + 1
                t["preemptions"] = t.get("preemptions", 0) + rec.preemptions
        return totals

    def _administered(self, user: str, vc: str | None, groups=()) -> list[str]:
        from .scheduler import NotAuthorized
        if vc is not None:
            if vc not in self.spec.vcs:
                raise self.unknown_vc(vc, user, groups)
            if not self._is_admin(user, vc, groups):
                raise NotAuthorized(f"user {user!r} may not set or apply the retention of VC {vc!r}"
                                    f"{self.access.admins_for(user, vc, groups)}")
            return [vc]
        mine = [v for v in sorted(self.spec.vcs) if self._is_admin(user, v, groups)]
        if not mine:
            raise NotAuthorized(f"user {user!r} administers no VC: garbage collection is for admins")
        return mine

    def retention(self) -> dict:
        """Every VC's policy (``null`` where none: its finished jobs are kept)."""
        with self._lock:
            return {"policies": {v: self._retention.get(v) for v in sorted(self.spec.vcs)}}

    def set_retention(self, user: str, vc: str, max_age=None, keep=None, groups=()) -> dict:
        """Set (or, with both limits ``None``, remove) the policy of ``vc``; durable before it is
        answered. Raises ``ServiceDegraded`` (changing nothing) when the journal cannot take it."""
        max_age = _limit("max_age", max_age, integer=False)
        keep = _limit("keep", keep, integer=True)
        with self._lock:
            self._administered(user, vc, groups)
            now = self.clock()
            self._require_journal(now)
            policies = dict(self._retention)
            if max_age is None and keep is None:
                policies.pop(vc, None)
            else:
                policies[vc] = {"max_age": max_age, "keep": keep}
            self._write([], now, meta={"retention": json.dumps(policies)})
            self._retention = policies
            # its setters (REST, CLI) apply it at once with gc() and report what it removed;
            # a round slipping in between would remove it first: the automatic one waits its interval
            self._last_gc = now
            return {"vc": vc, "policy": policies.get(vc)}

    def gc(self, user: str, vc: str | None = None, dry_run: bool = False, policy: dict | None = None,
           groups=()) -> dict:
        """Apply the policies of the VCs ``user`` administers (or of ``vc``) now. ``policy``
        (with ``dry_run`` and ``vc``): what a policy would remove, without setting it."""
        with self._lock:
            vcs = self._administered(user, vc, groups)
            now = self.clock()
            if policy is not None:
                if not dry_run or vc is None:
                    raise RequestError("policy", "a trial policy needs vc and dry_run; set_retention sets one")
                policy = {"max_age": _limit("max_age", policy.get("max_age"), integer=False),
                          "keep": _limit("keep", policy.get("keep"), integer=True)}
                out = {**self._collect(vcs, now, True, {vc: policy}), "policy": policy}
            else:
                if not dry_run:
                    self._require_journal(now)
                out = self._collect(vcs, now, dry_run)
        # outside the lock: the folders are measured (and removed) by a walk no tree can break
        out["freed_bytes"] = sweep(out.pop("folders"), remove=not dry_run)
        return out

    def _gc_tick(self, now: float) -> None:
        if not self._retention or (self._last_gc is not None and now - self._last_gc < GC_INTERVAL):
            return
        from .degraded import ServiceDegraded
        self._last_gc = now
        try:
            out = self._collect(sorted(v for v in self._retention if v in self.spec.vcs), now, False)
        except ServiceDegraded:
            return   # degraded now; tried again at the next interval
        if out["removed"]:
            log.info("retention: removed %d finished jobs", len(out["removed"]))
            self._aside_pending = True   # their folders are deleted by the quota meter, off the lock

    def _expired(self, vcs: list[str], now: float, policies: dict) -> list[str]:
        out = []
        for vc in vcs:
            policy = policies.get(vc)
            if not policy:
                continue
            # newest first; ties (jobs that ended in the same tick) by submission
            done = sorted(self.eng.jobs(vc, states=TERMINAL),
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
        ids = self._expired(vcs, now, self._retention if policies is None else policies)
        jobs_dir = self.data_dir / "jobs"
        if dry_run or not ids:
            return {"removed": ids, "folders": [jobs_dir / j for j in ids], "dry_run": dry_run, "vcs": vcs}
        totals = self._gc_totals_with(ids)
        try:   # write, then act: the rows go first, so a crash leaves folders, never rows without them
            with self.store.transaction():   # with what they counted, so counters never go back
                self.store.set_meta("gc_totals", json.dumps(totals, sort_keys=True))
                self.store.delete_jobs(ids)
        except JournalWriteError as exc:
            self._degrade(exc)
            assert self.degraded is not None   # _degrade has just set it
            raise ServiceDegraded(self.degraded) from None
        folders = []
        self.gc_totals = totals
        for j in ids:
            rec = self.eng.find(j)
            if rec is not None:
                vc = rec.request.vc
                if vc in self._used:   # what was freed counts at once (quota.py measures again later)
                    self._used[vc] = max(0, self._used[vc] - self._job_bytes.get(j, 0))
                self.eng.forget(j)
            self._seen.pop(j, None)
            self._live.discard(j)
            self._forget_sizes(j)
            self._admission.forget(j)
            aside = jobs_dir / f"{TRASH_PREFIX}{j}"
            try:
                os.rename(jobs_dir / j, aside)
                folders.append(aside)
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.error("retention: cannot move the folder of %s aside: %s", j, exc)
        self._meter.poke()
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
