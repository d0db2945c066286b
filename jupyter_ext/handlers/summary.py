"""GET summary: the service in numbers (jobs per state, recovery at start, unhealthy GPUs).

What ``hived status`` prints without a job id. Counts are cluster-wide and
name no job; where the data lives and the process id are for admins only.
"""
from __future__ import annotations

from .base import HivedHandler, service_errors

_ADMIN_ONLY = ("data_dir", "pid", "last_error", "shared_account")


class SummaryHandler(HivedHandler):
    async def get(self):
        # cluster-wide counts: for people in a VC (docs/security.md: others get status and openapi.json only)
        await self.require("read", "hived:cluster", "see the summary (not in any VC)", "summary")
        with service_errors("summary"):
            doc = dict(await self.run(self.svc.status))
        if not self.hived.access.is_admin(self.username, self.groups):
            for key in _ADMIN_ONLY:
                doc.pop(key, None)
        self.reply(doc)
