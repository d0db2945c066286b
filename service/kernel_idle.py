"""Idle release of Jupyter kernel jobs (a mixin of SchedulerService).

A kernel job's provisioner reports cell activity (``POST jobs/{id}/activity``,
``kernel_activity``); every ``IDLE_INTERVAL`` seconds the service asks
``hived.core.kernel_idle`` which running kernel jobs of VCs with a
``kernelIdleTimeout`` ran no cell for that long, and cancels them, their
history saying why. Where the GPUs are this machine's (``self.local``), GPUs at work
count as activity too (kernel_gpu_use.py). The activity times live in memory: after a restart of the
service, a kernel's idle time counts from the restart (never earlier).
"""
from __future__ import annotations

import logging
from typing import Any

from hived.core.engine import RequestError
from hived.core.jobs import KERNEL_LABEL, JobState
from hived.core.kernel_idle import gpus_in_use, idle_kernels

from .mixin_host import MixinHost

log = logging.getLogger("hived.service")

IDLE_INTERVAL = 1.0   # seconds between two looks for idle kernels


class KernelIdleMixin(MixinHost):
    _kernel_seen: dict[str, float]
    _kernel_checked: float | None
    _kernel_gpu: Any    # KernelGpuUse | None

    def _kernel_idle_init(self, now: float) -> None:
        self._kernel_seen, self._kernel_checked = {}, None
        self._kernel_gpu = None    # KernelGpuUse, made at the first look when GPUs are local
        self._kernel_since = now   # activity before this service started is unknown: counted from here

    def kernel_activity(self, job_id: str, user: str, groups=()) -> dict:
        """The kernel of ``job_id`` ran a cell now (its owner's provisioner, or a VC admin, says so)."""
        from .scheduler import NotAuthorized, NotFound
        with self._lock:
            rec = self.eng.find(job_id) if isinstance(job_id, str) else None
            if rec is None:
                raise NotFound("job_id", f"unknown job {job_id!r}")
            if not self.access.may_change_job(user, rec.request.vc, rec.request.user, groups):
                raise NotAuthorized(f"user {user!r} may not report activity of {job_id}: it belongs to "
                                    f"{rec.request.user!r}")
            if KERNEL_LABEL not in rec.request.labels:
                raise RequestError("job_id", f"{job_id} is not a kernel job (no '{KERNEL_LABEL}' label)")
            if rec.state is not JobState.RUNNING:
                raise RequestError("job_id", f"{job_id} is {rec.state.value}, not running")
            now = self.clock()
            self._kernel_seen[job_id] = now
            timeout = self.spec.vcs[rec.request.vc].kernel_idle_timeout
            return {"id": job_id, "activity": now,
                    "release_at": None if timeout is None else now + timeout}

    def _kernel_gpus_busy(self, rec) -> bool:
        local = getattr(self, "local", None)
        if local is None or rec.placement is None or rec.state is not JobState.RUNNING:
            return False
        if self._kernel_gpu is None:
            from .kernel_gpu_use import KernelGpuUse
            self._kernel_gpu = KernelGpuUse(local.nodes)
        return gpus_in_use(self._kernel_gpu.utilization(rec.placement))

    def _kernel_idle_tick(self, now: float) -> None:
        if self._kernel_checked is not None and now - self._kernel_checked < IDLE_INTERVAL:
            return
        self._kernel_checked = now
        timeouts = {v: s.kernel_idle_timeout for v, s in self.spec.vcs.items() if s.kernel_idle_timeout}
        if not timeouts:
            return
        from .degraded import ServiceDegraded
        jobs = [r for v in timeouts for r in self.eng.holding(v)]
        for held in jobs:   # GPUs at work count as activity (kernel_gpu_use.py)
            if KERNEL_LABEL in held.request.labels and self._kernel_gpus_busy(held):
                self._kernel_seen[held.job_id] = now
        seen = {j: max(t, self._kernel_since) for j, t in self._kernel_seen.items()}
        for jid in (r.job_id for r in jobs):
            seen.setdefault(jid, self._kernel_since)
        for jid, why in idle_kernels(jobs, timeouts, seen, now):
            rec = self.eng.find(jid)
            assert rec is not None
            log.info("%s: %s", jid, why)
            rec.history.append((now, rec.state.value, why))
            try:
                self._cancel(jid, "hived")
            except ServiceDegraded:
                rec.history.pop()
                return
            self._kernel_seen.pop(jid, None)
