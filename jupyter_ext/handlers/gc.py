"""``/hived/api/gc``: retention of finished jobs (read by anyone; applied and set by admins).

The service decides who may act (the VC's admins and cluster admins); see
jupyter_ext/service/service_retention.py.
"""
from __future__ import annotations

from .base import ApiError, HivedHandler, service_errors


class GcHandler(HivedHandler):
    async def get(self):
        with service_errors("gc"):
            self.reply(await self.run(self.svc.retention))

    async def post(self):
        body = self.json_body("Gc", required=False)
        vc, dry_run, policy = body.get("vc"), bool(body.get("dry_run")), body.get("policy")
        if policy is not None and vc is None:
            raise ApiError(400, "a policy is for one VC: give vc", "body.vc")
        where = "body.vc" if vc is not None else "gc"
        if policy is not None and dry_run:   # what this policy would remove; nothing is set
            with service_errors(where):
                self.reply(await self.run(self.svc.gc, self.username, vc, True, policy))
            return
        out: dict = {}
        if policy is not None:
            with service_errors(where):
                out["policy"] = (await self.run(self.svc.set_retention, self.username, vc,
                                                policy.get("max_age"), policy.get("keep")))["policy"]
        with service_errors(where):
            out.update(await self.run(self.svc.gc, self.username, vc, dry_run))
        self.reply(out)
