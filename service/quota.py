"""Per-VC disk quota for job folders (a mixin of SchedulerService).

Each job writes under ``jobs/<id>/`` (logs, ``work/``: ``$HIVED_JOB_DIR``),
all on the data directory's disk. A VC's admins (or a cluster admin) may cap
what the folders of the VC's jobs hold together. The timer measures them
every ``QUOTA_INTERVAL`` seconds (a finished job's folder is measured once:
nothing writes to it any more). While a VC is over its quota:

- its submissions are refused, saying how much it uses and what to do;
- its running jobs whose folders grew since the last measurement are
  stopped (cancelled, their history saying why), so that one VC cannot fill
  the disk the journal and the other VCs share.

Removing finished jobs (``hived gc``) or raising the quota ends it.
The quotas are kept in the journal (``meta`` key ``disk_quota``).
"""
from __future__ import annotations

import json
import logging

from hived.core.engine import RequestError
from hived.core.jobs import HOLDING

from .mixin_host import MixinHost
from .retention import _dir_bytes, _limit

log = logging.getLogger("hived.service")

QUOTA_INTERVAL = 5.0   # seconds between two measurements of the job folders


def _size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


class QuotaMixin(MixinHost):
    _quota: dict[str, float]     # vc -> max bytes
    _last_quota: float | None = None

    def _load_quota(self) -> None:
        raw = getattr(self.store, "get_meta", lambda k: None)("disk_quota")
        self._quota = json.loads(raw) if raw else {}
        self._used: dict[str, int] = {}        # vc -> bytes at the last measurement
        self._job_bytes: dict[str, int] = {}   # job id -> bytes at the last measurement
        self._final_bytes: dict[str, int] = {}  # finished jobs: measured once

    def disk_quotas(self) -> dict:
        with self._lock:
            return {"quotas": {v: {"max_bytes": self._quota.get(v), "used_bytes": self._used.get(v),
                                   "over": self._over(v)} for v in sorted(self.spec.vcs)}}

    def set_disk_quota(self, user: str, vc: str, max_bytes=None, groups=()) -> dict:
        """Cap the job folders of ``vc`` at ``max_bytes`` (``None``: no cap); durable first."""
        max_bytes = _limit("max_bytes", max_bytes, integer=True)
        with self._lock:
            self._administered(user, vc, groups)
            now = self.clock()
            self._require_journal(now)
            quota = dict(self._quota)
            if max_bytes is None:
                quota.pop(vc, None)
            else:
                quota[vc] = max_bytes
            self._write([], now, meta={"disk_quota": json.dumps(quota)})
            self._quota = quota
            self._measure(now, [vc])
            return {"vc": vc, "max_bytes": quota.get(vc), "used_bytes": self._used.get(vc)}

    def _over(self, vc: str) -> bool:
        cap = self._quota.get(vc)
        return cap is not None and self._used.get(vc, 0) > cap

    def _check_quota(self, vc: str) -> None:
        """Refuse a submission to a VC over its disk quota (as of the last measurement)."""
        if self._over(vc):
            raise RequestError("vc", f"VC {vc!r} job folders hold {_size(self._used[vc])}, over its disk quota "
                                     f"of {_size(self._quota[vc])}: remove finished jobs (hived gc) or files "
                                     f"under their work folders, or ask a VC admin to raise the quota")

    def _quota_tick(self, now: float) -> None:
        if not self._quota or (self._last_quota is not None and now - self._last_quota < QUOTA_INTERVAL):
            return
        self._last_quota = now
        for vc in self._measure(now, sorted(v for v in self._quota if v in self.spec.vcs)):
            self._stop_writers(vc)

    def _measure(self, now: float, vcs: list[str]) -> list[str]:
        """Measure the folders of ``vcs``' jobs; returns the VCs over their quota."""
        jobs_dir = self.data_dir / "jobs"
        wanted = set(vcs)
        used = {v: 0 for v in vcs}
        grew: dict[str, list] = {v: [] for v in vcs}
        for rec in self.eng.jobs():
            vc = rec.request.vc
            if vc not in wanted:
                continue
            jid = rec.job_id
            if jid in self._final_bytes:
                n = self._final_bytes[jid]
            else:
                n = _dir_bytes(jobs_dir / jid)
                if rec.state.terminal:
                    self._final_bytes[jid] = n
                elif rec.state in HOLDING and n > self._job_bytes.get(jid, 0):
                    grew[vc].append(jid)
            self._job_bytes[jid] = n
            used[vc] += n
        self._used.update(used)
        self._growing = grew
        return [v for v in vcs if self._over(v)]

    def _stop_writers(self, vc: str) -> None:
        from .degraded import ServiceDegraded
        now = self.clock()
        for jid in self._growing.get(vc, []):
            rec = self.eng.find(jid)
            if rec is None or rec.state not in HOLDING or rec.cancel_requested:
                continue
            why = (f"stopped: VC {vc!r} job folders hold {_size(self._used[vc])}, over its disk quota of "
                   f"{_size(self._quota[vc])}, and this job was writing")
            log.warning("%s: %s", jid, why)
            rec.history.append((now, rec.state.value, why))
            try:
                self._cancel(jid, rec.request.user)
            except ServiceDegraded:
                rec.history.pop()
                return

    def _forget_sizes(self, job_id: str) -> None:
        for book in (self._job_bytes, self._final_bytes):
            book.pop(job_id, None)
