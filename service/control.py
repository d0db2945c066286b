"""Job control for the service: hold, release, requeue, and the ``after`` check at submission.

A mixin of ``SchedulerService`` (see mixin_host.py). Who may: the job's owner,
an admin of its VC or a cluster admin (``Access.may_change_job``), as for a
cancel. The engine does the work (core/engine_control.py); this part checks,
journals and acts on what the engine decided.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hived.core.engine import RequestError
from hived.core.jobs import TERMINAL, JobState

from .mixin_host import MixinHost
from .payload import job_dict

if TYPE_CHECKING:
    from hived.core.engine_records import JobRecord
    from hived.core.jobs import Decision

ACTIONS = ("hold", "release", "requeue")


class ControlMixin(MixinHost):
    if TYPE_CHECKING:
        _pending: list[Decision]

        def _rec(self, job_id: str) -> JobRecord: ...
        def _flush(self, now: float, also: Any = ()) -> bool: ...
        def _settle(self) -> None: ...
        @property
        def access(self) -> Any: ...

    def control(self, job_id: str, action: str, user: str, groups=()) -> dict:
        """``hold`` (a queued job waits until released), ``release``, or ``requeue`` (a running
        job stops and queues again at the head). Returns the job dict."""
        if action not in ACTIONS:
            raise RequestError("action", f"must be one of {', '.join(ACTIONS)}, got {action!r}")
        from .scheduler import NotAuthorized
        with self._lock:
            rec = self._rec(job_id)
            if not self.access.may_change_job(user, rec.request.vc, rec.request.user, groups):
                raise NotAuthorized(f"user {user!r} may not {action} {job_id}: it belongs to "
                                    f"{rec.request.user!r} and {user!r} is not an admin of VC {rec.request.vc!r}")
            now = self.clock()
            self._require_journal(now)
            if action == "hold":
                self.eng.hold(job_id, now, user)
            elif action == "release":
                self.eng.unhold(job_id, now, user)
            else:
                self._pending.extend(self.eng.requeue(job_id, now, user))
            self._seen[job_id] = None    # held_by is no part of the write fingerprint: write it
            self._flush(now, also=[job_id])
            out = job_dict(self._rec(job_id))
        self._settle()
        self._wake.set()
        return out

    def _check_after(self, user: str, after: list[str], groups=()) -> None:
        """Every job named in ``after`` exists, may be seen by ``user`` and can still succeed;
        a job the caller may not see answers as one that does not exist."""
        for dep in after:
            rec = self.eng.find(dep)
            if rec is None or not self.access.may_see_job(user, rec.request.vc, rec.request.user, groups):
                raise RequestError("after", f"unknown job {dep!r}")
            if rec.state in TERMINAL and rec.state is not JobState.SUCCEEDED:
                raise RequestError("after", f"{dep} {rec.state.value}: a job after it would never start")
