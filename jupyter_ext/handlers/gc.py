"""``/hived/api/gc``: retention of finished jobs (read by members of the VCs shown; applied and set by admins).

The service decides who may act (the VC's admins and cluster admins); see
service/retention.py.
"""
from __future__ import annotations

from .base import ApiError, HivedHandler, service_errors


class GcHandler(HivedHandler):
    async def get(self):
        """The policies and quotas of the VCs the caller is in (all of them for cluster admins)."""
        await self.require("read", "hived:cluster", "see retention and quotas (not in any VC)", "gc")
        mine = set(self.hived.access.vcs_of(self.username, self.groups))
        with service_errors("gc"):
            out = await self.run(self.svc.retention)
            out.update(await self.run(self.svc.disk_quotas))
        self.reply({key: {vc: v for vc, v in views.items() if vc in mine} for key, views in out.items()})

    async def post(self):
        body = await self.json_body("Gc", required=False)
        vc, dry_run, policy = body.get("vc"), bool(body.get("dry_run")), body.get("policy")
        quota = "disk_quota" in body or body.get("clear_disk_quota")
        if (policy is not None or quota) and vc is None:
            raise ApiError(400, "a policy or a quota is for one VC: give vc", "body.vc")
        if "disk_quota" in body and body.get("clear_disk_quota"):
            raise ApiError(400, "give disk_quota or clear_disk_quota, not both", "body.clear_disk_quota")
        where = "body.vc" if vc is not None else "gc"
        if policy is not None and dry_run:   # what this policy would remove; nothing is set
            with service_errors(where):
                self.reply(await self.run(self.svc.gc, self.username, vc, True, policy, self.groups))
            return
        out: dict = {}
        if quota and not dry_run:
            with service_errors("body.disk_quota"):
                out["quota"] = await self.run(self.svc.set_disk_quota, self.username, vc, body.get("disk_quota"),
                                                self.groups)
        if policy is not None:
            with service_errors(where):
                out["policy"] = (await self.run(self.svc.set_retention, self.username, vc,
                                                policy.get("max_age"), policy.get("keep"), self.groups))["policy"]
        with service_errors(where):
            out.update(await self.run(self.svc.gc, self.username, vc, dry_run, None, self.groups))
        self.reply(out)
