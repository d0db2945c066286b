"""Liveness and readiness, for load balancers and supervisors: no token needed.

``healthz`` answers as long as the server's IOLoop does. ``readyz`` is 200
only while the scheduler service runs and is not degraded (its journal can
commit); otherwise 503 with the reason. Neither says anything a stranger may
not know: no spec path, no user, no job.
"""
from __future__ import annotations

from jupyter_server.auth.decorator import allow_unauthenticated

from .base import HivedHandler


def readiness(state) -> tuple[bool, str]:
    service = state.service
    if service is None:
        return False, "scheduler service not started (the server's log says why)"
    check = getattr(service, "readiness", None)
    if check is None:
        return True, ""
    ready, reason = check() if callable(check) else check
    return bool(ready), str(reason or "")


class HealthHandler(HivedHandler):
    public = True

    @allow_unauthenticated
    async def get(self):
        self.reply({"ok": True})


class ReadyHandler(HivedHandler):
    public = True

    @allow_unauthenticated
    async def get(self):
        ready, reason = await self.run(readiness, self.hived)
        self.reply({"ready": True} if ready else {"ready": False, "reason": reason}, status=200 if ready else 503)
