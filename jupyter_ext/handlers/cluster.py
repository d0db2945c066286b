"""Read-only views (status, cluster, VCs), the OpenAPI document and spec reload."""
from __future__ import annotations

import os
from typing import Any

from hived.core.jobs import HOLDING as HOLDING_STATES
from hived.core.jobs import state_values

from ..auth import vc_resource
from .base import ApiError, HivedHandler, service_errors
from .schema import openapi

# keys that name who holds a GPU; hidden from users outside the holder's VC
_PRIVATE_KEYS = ("holder", "job", "job_id", "user", "owner", "name", "jobs")
HOLDING = state_values(HOLDING_STATES)


class StatusHandler(HivedHandler):
    async def get(self):
        state, user = self.hived, self.username
        access = state.access
        self.reply({
            "ok": state.service is not None,
            "version": state.version,
            "user": user,
            "admin": access.is_admin(user, self.groups),
            "vcs": access.vcs_of(user, self.groups),
            **({"error": state.error} if state.service is None else {}),
        })


class OpenAPIHandler(HivedHandler):
    async def get(self):
        self.reply(openapi())


class ClusterHandler(HivedHandler):
    async def get(self):
        await self.require("read", "hived:cluster", "see the cluster (not in any VC)", "cluster")
        with service_errors("cluster"):
            doc, held = await self.run(_cluster_and_holders, self.svc)
        doc = with_holders(doc, held)
        if not self.hived.access.is_admin(self.username, self.groups):
            doc = redact(doc, set(self.hived.access.vcs_of(self.username, self.groups)))
        self.reply(doc)


def _cluster_and_holders(svc) -> tuple[dict, dict]:
    return svc.cluster(), {j["id"]: j for state in HOLDING for j in svc.list_jobs(state=state)}


def with_holders(doc: Any, held: dict) -> Any:
    """Give every held GPU its holder's VC, user, class and priority, so the
    dashboards can colour the picture by VC and priority in one request."""
    for chain in (doc.get("chains") or {}).values() if isinstance(doc, dict) else ():
        for node in (chain.get("nodes") or {}).values():
            for gpu in node.get("gpus") or ():
                job = held.get(gpu.get("holder"))
                if job is not None:
                    placement = job.get("placement") or {}
                    gpu.update(vc=job["vc"], user=job["user"], job_class=job["job_class"],
                               opportunistic=bool(placement.get("opportunistic")))
    return doc


def redact(doc: Any, own_vcs: set) -> Any:
    """Hide job ids and users of GPUs held by other VCs (keep the VC: the
    picture is coloured by VC for everyone)."""
    if isinstance(doc, list):
        return [redact(v, own_vcs) for v in doc]
    if not isinstance(doc, dict):
        return doc
    vc = doc.get("vc")
    hide = isinstance(vc, str) and vc not in own_vcs
    return {k: (None if hide and k in _PRIVATE_KEYS else redact(v, own_vcs)) for k, v in doc.items()}


class VCsHandler(HivedHandler):
    async def get(self):
        await self.require("read", "hived:cluster", "see VCs (not in any VC)", "vcs")
        with service_errors("vcs"):
            doc = await self.run(self.svc.vcs)
        vcs = doc.get("vcs", doc) if isinstance(doc, dict) else {}
        visible = set(self.hived.access.vcs_of(self.username, self.groups))
        self.reply({"vcs": {name: view for name, view in vcs.items() if name in visible}})


class VCHandler(HivedHandler):
    async def get(self, vc: str):
        if vc not in self.hived.access.vc_users:
            raise ApiError(404, f"no VC named {vc!r}", f"vcs/{vc}")
        await self.require("read", vc_resource(vc), f"see VC {vc!r} (not a member)", f"vcs/{vc}")
        with service_errors(f"vcs/{vc}"):
            self.reply(await self.run(self.svc.vc, vc))


class SpecReloadHandler(HivedHandler):
    async def post(self):
        await self.require("write", "hived:admin", "reload the spec (cluster admins only)", "spec/reload")
        body = await self.json_body("SpecReload", required=False)
        configured = self.hived.config.spec_path
        if "path" in body and not _same_file(body["path"], configured):
            # the server reads the file, and a parse error quotes it: only the
            # file the operator named may be read this way
            raise ApiError(400, "by path, only the server's own spec file can be reloaded; "
                                "send another spec's text in 'spec'", "body.path")
        source = body.get("spec") or configured
        if not source:
            raise ApiError(400, "no spec given and none configured", "body.spec")
        with service_errors("body.spec" if "spec" in body else "body.path"):
            result = await self.run(self.hived.reload, source)
        self.reply(result if isinstance(result, dict) else {"ok": True})


def _same_file(path: Any, configured: str) -> bool:
    return isinstance(path, str) and bool(configured) and \
        os.path.realpath(path) == os.path.realpath(configured)
