"""Which Jupyter kernel jobs have been idle past their VC's ``kernelIdleTimeout``.

A kernel job (label ``kernel``, hived.kernels) that ran no cell for its VC's
timeout gives its GPUs back: the service cancels it with the reason this
module writes. A kernel's idle time counts from the last activity its
provisioner reported, or from its start when none came.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from .engine_records import JobRecord
from .jobs import KERNEL_LABEL, JobState

RELEASED = "released"   # every release reason starts with it (the provisioner shows it to the user)


def release_reason(vc: str, timeout: float) -> str:
    return (f"{RELEASED}: the kernel ran no cell for {timeout:g} s (kernelIdleTimeout of VC {vc}); "
            "its GPUs went back to the VC. Restart the kernel to queue for GPUs again")


def idle_kernels(jobs: Iterable[JobRecord], timeouts: Mapping[str, float | None],
                 last_activity: Mapping[str, float], now: float) -> list[tuple[str, str]]:
    """(job id, release reason) of each running kernel job idle for at least its VC's timeout."""
    out = []
    for rec in jobs:
        if rec.state is not JobState.RUNNING or rec.cancel_requested or KERNEL_LABEL not in rec.request.labels:
            continue
        timeout = timeouts.get(rec.request.vc)
        if timeout is None:
            continue
        since = max(rec.started or 0.0, last_activity.get(rec.job_id, 0.0))
        if now - since >= timeout:
            out.append((rec.job_id, release_reason(rec.request.vc, timeout)))
    return out



def gpus_in_use(utilization: Iterable[int | None]) -> bool:
    """Whether a kernel's GPUs show work: NVML's ``utilization.gpu`` above 0 on any of them. Such a
    kernel is not idle even when no cell ran (a training loop started in a thread, a cell whose
    messages did not reach the provisioner). None (NVML could not tell) is no sign of work."""
    return any(u is not None and u > 0 for u in utilization)
