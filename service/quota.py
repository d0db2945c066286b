"""Per-VC disk quota for job folders (``DiskQuota``, a part of SchedulerService, and the thread that measures).

Each job writes under ``jobs/<id>/`` (logs, ``work/``: ``$HIVED_JOB_DIR``), all on the data
directory's disk. A VC's admins (or a cluster admin) may cap what the folders of the VC's jobs
hold together. :class:`QuotaMeter` measures them, every folder of every job of the VC,
finished ones included (a job's account can still write into the folder of a finished job of
its own), every ``QUOTA_INTERVAL`` seconds per VC:

- on a thread of its own, never under the service lock: it takes the lock only to list a VC's
  jobs and to publish the result, so a slow tree delays no request and no scheduling round;
- in slices of ``SLICE`` seconds per VC in turn, so a VC whose folders hold 300,000 files
  delays its own measurement only;
- with an iterative walk that neither recursion depth nor path length can break
  (service/disk_walk.py); a VC whose walk fails is reported (``error`` in ``disk_quotas``,
  and the log) and measured again at its next interval; the other VCs go on.

While a VC is over its quota:

- its submissions are refused, saying how much it uses and what to do;
- its running jobs whose folders grew since the last measurement are stopped (cancelled,
  their history saying why); when the folder of a *finished* job grew, every running job of
  the VC is stopped, since any of them may be the writer. So one VC cannot fill the disk the
  journal and the other VCs share.

Removing finished jobs (``hived gc``) or raising the quota ends it.
The quotas are kept in the journal (``meta`` key ``disk_quota``).
"""
from __future__ import annotations

import json
import logging
import threading
import time

from hived.core.engine import RequestError
from hived.core.jobs import HOLDING

from .disk_walk import TreeWalk
from .host import ServiceHost, administered
from .retention import _limit, sweep_aside

log = logging.getLogger("hived.service")

QUOTA_INTERVAL = 5.0   # seconds between two measurements of a VC's job folders
SLICE = 0.05           # seconds one VC's walk goes on before the next VC's turn
SET_BUDGET = 2.0       # seconds set_disk_quota waits for a first measurement of its VC


def _size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


class _VcWalk:
    """One measurement of one VC: its job folders one after the other, resumable in slices."""

    def __init__(self, folders: list[tuple[str, object]]):
        self.folders = folders          # (job id, path)
        self.sizes: dict[str, int] = {}
        self.errors: list[str] = []
        self._walk: TreeWalk | None = None

    def advance(self, budget: float) -> bool:
        deadline = time.monotonic() + budget
        while self.folders:
            jid, path = self.folders[-1]
            if self._walk is None:
                self._walk = TreeWalk(path)
            if not self._walk.advance(max(0.0, deadline - time.monotonic())):
                return False
            self.sizes[jid] = self._walk.bytes
            if self._walk.error:
                self.errors.append(f"job {jid}: {self._walk.error}")
            self._walk = None
            self.folders.pop()
        return True

    def close(self) -> None:
        if self._walk is not None:
            self._walk.close()


class QuotaMeter:
    """Measures the job folders of the VCs that have a quota, off the service lock."""

    def __init__(self, svc: DiskQuota):
        self.svc = svc
        self._walks: dict[str, _VcWalk] = {}
        self._due: dict[str, float] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="hived-quota", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        for walk in self._walks.values():
            walk.close()
        self._walks.clear()

    @property
    def running(self) -> bool:
        return self._thread is not None

    def poke(self, vc: str | None = None) -> None:
        """Measure ``vc`` (every VC: None) now rather than at its interval."""
        if vc is None:
            self._due.clear()
        else:
            self._due.pop(vc, None)
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                busy = self.run_pass()
            except Exception:   # a bug here must not end the measurements
                log.exception("disk quota measurement failed")
                busy = False
            if not busy:
                due = min(list(self._due.values()), default=time.monotonic() + QUOTA_INTERVAL)   # poke() may change it
                self._wake.wait(max(0.01, min(QUOTA_INTERVAL, due - time.monotonic())))
                self._wake.clear()

    def run_pass(self, budget: float = SLICE) -> bool:
        """Start the walks that are due, give each walk ``budget`` seconds, publish the finished
        ones. True while a walk is unfinished. Folders of removed jobs left aside go first."""
        if self.svc.aside_pending:
            self.svc.aside_pending = False
            sweep_aside(self.svc.host.data_dir / "jobs")
        vcs = self.svc.quota_vcs()
        for vc in set(self._walks) - set(vcs):
            self._walks.pop(vc).close()
        now = time.monotonic()
        for vc in vcs:
            if vc not in self._walks and now >= self._due.get(vc, 0.0):
                self._walks[vc] = _VcWalk(self.svc.job_folders(vc))
        for vc, walk in list(self._walks.items()):
            try:
                if not walk.advance(budget):
                    continue
            except Exception as exc:   # one VC's failure is that VC's: reported, the others go on
                walk.errors.append(f"{type(exc).__name__}: {exc}")
            del self._walks[vc]
            self._due[vc] = time.monotonic() + QUOTA_INTERVAL
            self.svc.publish(vc, walk.sizes, walk.errors)
        return bool(self._walks)

    def run_inline(self) -> None:
        """Without the thread (the CLI, tests driving ``tick``): measure what is due, whole."""
        while self.run_pass(float("inf")):
            pass

    def measure_now(self, vc: str, budget: float) -> None:
        """Measure ``vc`` in the caller's thread (off the lock) for up to ``budget`` seconds."""
        walk = _VcWalk(self.svc.job_folders(vc))
        try:
            done = walk.advance(budget)
        except Exception as exc:
            walk.errors.append(f"{type(exc).__name__}: {exc}")
            done = True
        if done:
            self.svc.publish(vc, walk.sizes, walk.errors)
        else:
            walk.close()
            self.poke(vc)


class DiskQuota:
    """The VCs' disk quotas, their last measurements, and the refusals and stops they cause."""

    def __init__(self, host: ServiceHost):
        self.host = host
        raw = getattr(host.store, "get_meta", lambda k: None)("disk_quota")
        self.quota: dict[str, float] = json.loads(raw) if raw else {}   # vc -> max bytes
        self._used: dict[str, int] = {}          # vc -> bytes at the last measurement
        self._job_bytes: dict[str, int] = {}     # job id -> bytes at the last measurement
        self._quota_errors: dict[str, str] = {}  # vc -> why its last measurement was incomplete
        self._final_seen: set[str] = set()       # finished jobs measured since they finished
        self.aside_pending = True                # folders of removed jobs to delete (a crash may leave some)
        self.meter = QuotaMeter(self)

    def view(self) -> dict:
        with self.host.lock:
            return {"quotas": {v: {"max_bytes": self.quota.get(v), "used_bytes": self._used.get(v),
                                   "over": self._over(v),
                                   **({"error": self._quota_errors[v]} if v in self._quota_errors else {})}
                               for v in sorted(self.host.spec.vcs)}}

    def set(self, user: str, vc: str, max_bytes=None, groups=()) -> dict:
        """Cap the job folders of ``vc`` at ``max_bytes`` (``None``: no cap); durable first. The VC
        is measured at once, off the lock, for up to ``SET_BUDGET`` s (``used_bytes`` None: later)."""
        max_bytes = _limit("max_bytes", max_bytes, integer=True)
        with self.host.lock:
            administered(self.host, user, vc, groups)
            now = self.host.clock()
            self.host.require_journal(now)
            quota = dict(self.quota)
            if max_bytes is None:
                quota.pop(vc, None)
            else:
                quota[vc] = max_bytes
            self.host.write([], now, meta={"disk_quota": json.dumps(quota)})
            self.quota = quota
        if max_bytes is not None:
            self.meter.measure_now(vc, SET_BUDGET)
        with self.host.lock:
            return {"vc": vc, "max_bytes": self.quota.get(vc), "used_bytes": self._used.get(vc)}

    def _over(self, vc: str) -> bool:
        cap = self.quota.get(vc)
        return cap is not None and self._used.get(vc, 0) > cap

    def check(self, vc: str) -> None:
        """Refuse a submission to a VC over its disk quota (as of the last measurement)."""
        if self._over(vc):
            raise RequestError("vc", f"VC {vc!r} job folders hold {_size(self._used[vc])}, over its disk quota "
                                     f"of {_size(self.quota[vc])}: remove finished jobs (hived gc) or files "
                                     f"under their work folders, or ask a VC admin to raise the quota")

    def quota_vcs(self) -> list[str]:
        with self.host.lock:
            return sorted(v for v in self.quota if v in self.host.spec.vcs)

    def job_folders(self, vc: str) -> list[tuple[str, object]]:
        jobs_dir = self.host.data_dir / "jobs"
        with self.host.lock:
            return [(rec.job_id, jobs_dir / rec.job_id) for rec in self.host.eng.jobs(vc)]

    def publish(self, vc: str, sizes: dict[str, int], errors: list[str]) -> None:
        """A finished measurement of ``vc``: record it, and stop the VC's writers when over."""
        with self.host.lock:
            writers: set[str] = set()
            for jid, n in sizes.items():
                rec = self.host.eng.find(jid)
                if rec is None:
                    continue   # removed while measured
                grew = n > self._job_bytes.get(jid, 0)
                self._job_bytes[jid] = n
                if grew and rec.state in HOLDING:
                    writers.add(jid)
                elif grew and rec.state.terminal and jid in self._final_seen:
                    # a finished job's folder grew: some running job of the VC wrote there
                    writers.update(r.job_id for r in self.host.eng.jobs(vc) if r.state in HOLDING)
                if rec.state.terminal:
                    self._final_seen.add(jid)
            self._used[vc] = sum(n for jid, n in sizes.items() if jid in self.host.eng)
            if errors:
                self._quota_errors[vc] = f"measured in part ({len(errors)} problem(s)), first: {errors[0]}"
                log.warning("disk quota of VC %s: %s", vc, self._quota_errors[vc])
            else:
                self._quota_errors.pop(vc, None)
            if self._over(vc):
                self._stop_writers(vc, sorted(writers))

    def _stop_writers(self, vc: str, writers: list[str]) -> None:
        from .degraded import ServiceDegraded
        now = self.host.clock()
        for jid in writers:
            rec = self.host.eng.find(jid)
            if rec is None or rec.state not in HOLDING or rec.cancel_requested:
                continue
            why = (f"stopped: VC {vc!r} job folders hold {_size(self._used[vc])}, over its disk quota of "
                   f"{_size(self.quota[vc])}, and this job was writing")
            log.warning("%s: %s", jid, why)
            rec.history.append((now, rec.state.value, why))
            try:
                self.host.cancel_job(jid, rec.request.user)
            except ServiceDegraded:
                rec.history.pop()
                return

    def job_removed(self, job_id: str, vc: str | None) -> None:
        """``job_id`` (of ``vc``; None: not in memory) was removed: its folder's bytes no longer count."""
        if vc is not None and vc in self._used:
            self._used[vc] = max(0, self._used[vc] - self._job_bytes.get(job_id, 0))
        self._job_bytes.pop(job_id, None)
        self._final_seen.discard(job_id)
