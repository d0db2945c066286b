"""Job control for the service: hold, release, requeue, and the ``after`` check at submission.

``JobControl``, a part of ``SchedulerService`` (see host.py). Who may: the job's owner,
an admin of its VC or a cluster admin (``Access.may_change_job``), as for a
cancel. The engine does the work (core/engine_control.py); this part checks,
journals and acts on what the engine decided.
"""
from __future__ import annotations

from hived.core.engine import RequestError
from hived.core.jobs import TERMINAL, JobState

from .errors import NotAuthorized
from .host import ServiceHost
from .payload import job_dict

ACTIONS = ("hold", "release", "requeue")


class JobControl:
    def __init__(self, host: ServiceHost):
        self.host = host

    def control(self, job_id: str, action: str, user: str, groups=()) -> dict:
        """``hold`` (a queued job waits until released), ``release``, or ``requeue`` (a running
        job stops and queues again at the head). Returns the job dict."""
        if action not in ACTIONS:
            raise RequestError("action", f"must be one of {', '.join(ACTIONS)}, got {action!r}")
        with self.host.lock:
            rec = self.host.record(job_id)
            if not self.host.access.may_change_job(user, rec.request.vc, rec.request.user, groups):
                raise NotAuthorized(f"user {user!r} may not {action} {job_id}: it belongs to "
                                    f"{rec.request.user!r} and {user!r} is not an admin of VC {rec.request.vc!r}")
            now = self.host.clock()
            self.host.require_journal(now)
            decisions = []
            if action == "hold":
                self.host.eng.hold(job_id, now, user)
            elif action == "release":
                self.host.eng.unhold(job_id, now, user)
            else:
                decisions = self.host.eng.requeue(job_id, now, user)
            self.host.rewrite(job_id)    # held_by is no part of the write fingerprint: write it
            self.host.act(decisions, now, also=[job_id])
            out = job_dict(self.host.record(job_id))
        self.host.settle()
        self.host.wake()
        return out

    def check_after(self, user: str, after: list[str], groups=()) -> None:
        """Every job named in ``after`` exists, may be seen by ``user`` and can still succeed;
        a job the caller may not see answers as one that does not exist."""
        for dep in after:
            rec = self.host.eng.find(dep)
            if rec is None or not self.host.access.may_see_job(user, rec.request.vc, rec.request.user, groups):
                raise RequestError("after", f"unknown job {dep!r}")
            if rec.state in TERMINAL and rec.state is not JobState.SUCCEEDED:
                raise RequestError("after", f"{dep} {rec.state.value}: a job after it would never start")
