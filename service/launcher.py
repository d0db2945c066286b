"""The launcher protocol: how the service starts, stops and watches gangs.

The service executes the engine's decisions through a launcher and feeds
what the launcher sees back to the engine. ``local_launcher.LocalLauncher``
runs pods as processes on this machine; ``hived.k8s.launcher`` runs them as
Kubernetes pods; the simulator has its own.

A launcher may also offer ``validate(request)``, raising ``ValueError`` (with
``where``/``problem``) for what its ``launch`` would refuse: the service calls
it at submission for requests carrying launcher-specific fields
(``k8s_template``), so such a job is refused before it is queued.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from hived.core.jobs import JobRequest, Placement


@dataclass(frozen=True)
class LauncherEvent:
    """Something the launcher saw happen to a job.

    ``kind`` is ``"started"`` (every pod of the gang runs) or ``"exited"`` (the
    whole gang is gone). For ``exited``: ``exit_code`` is the first non-zero
    pod exit code in rank order (0 when all succeeded; negative = killed by
    that signal, Python's convention), or ``None`` when the processes vanished
    without a trace (the service then records failure class "lost");
    ``log_tail`` is the end of that pod's log, for failure classification.
    """

    job_id: str
    kind: str
    exit_code: int | None = None
    log_tail: str = ""
    attempt: int = 0


@runtime_checkable
class Launcher(Protocol):
    def launch(self, job_id: str, request: JobRequest, placement: Placement, attempt: int) -> None: ...

    def terminate(self, job_id: str, grace_period: float) -> None: ...

    def poll(self) -> list[LauncherEvent]: ...

    def adopt(self, job_id: str, placement: Placement) -> bool: ...

    def logs(self, job_id: str, rank: int = 0, offset: int = 0) -> tuple[str, int]: ...
