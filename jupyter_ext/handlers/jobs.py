"""Jobs: submit, list, get, cancel, logs (with follow)."""
from __future__ import annotations

import asyncio
import json
import math
import time
from typing import Any

from tornado import httputil, web

from hived.core.jobs import JobState
from hived.service.client import TERMINAL_STATES

from ..auth import job_resource, vc_resource
from .base import ApiError, HivedHandler, one_line, service_errors, to_json

STATES = tuple(s.value for s in JobState)


class JobsHandler(HivedHandler):
    async def prepare(self) -> None:  # type: ignore[override]
        await super().prepare()
        if self.request.method == "POST" and self.current_user is not None and not self._finished:
            with service_errors("body.vc"):   # a user over their rate: refused before the body is read
                self.svc.refuse_early(self.username)

    async def post(self):
        body = await self.json_body("JobSubmit")
        vc = body["vc"]
        if vc not in self.hived.access.vc_users:
            yours = self.hived.access.vcs_text(self.username, self.groups)
            raise ApiError(404, f"no VC named {vc!r}; your VCs: {yours}", "body.vc")
        access = self.hived.access
        members = "users or groups" if access.vc_groups.get(vc) or access.vc_admin_groups.get(vc) else "users"
        await self.require("write", vc_resource(vc), f"submit to VC {vc!r} (not in its {members})", "body.vc")
        svc, user, groups = self.svc, self.username, self.groups
        with service_errors("body"):
            # the answer echoes the command and env (up to a megabyte): encoded off the IOLoop too
            text = await self.run(lambda: to_json(svc.submit(user, body, groups)))
        self.reply_text(text, status=201)

    async def get(self):
        vc = self.get_query_argument("vc", None) or None
        state = self.get_query_argument("state", None) or None
        user = self.get_query_argument("user", None) or None
        if state is not None and state not in STATES:
            raise ApiError(400, f"must be one of {', '.join(STATES)}", "query.state")
        # users in no VC see status and openapi.json only (docs/security.md)
        await self.require("read", "hived:cluster", "list jobs (not in any VC)", "jobs")
        if vc is not None and not await self.allowed("read", vc_resource(vc)):
            # another team's VC answers as one that does not exist: no oracle of VC names
            raise ApiError(404, f"no VC named {vc!r}", "query.vc")
        with service_errors("query"):
            jobs = await self.run(self.svc.list_jobs, vc=vc, state=state, user=user)
        if not self.hived.access.is_admin(self.username, self.groups):
            jobs = [j for j in jobs if await self.allowed("read", job_resource(j["vc"], j["user"]))]
        self.reply({"jobs": jobs})


class JobHandler(HivedHandler):
    async def get(self, job_id: str):
        self.reply(await self.job_or_404(job_id))


class CancelHandler(HivedHandler):
    async def post(self, job_id: str):
        await self.json_body("Cancel", required=False)
        job = await self.job_or_404(job_id, "write")
        if job["state"] in TERMINAL_STATES:
            raise ApiError(409, f"job {job_id} already {job['state']}", f"jobs/{job_id}")
        with service_errors(f"jobs/{job_id}"):
            self.reply(await self.run(self.svc.cancel, job_id, self.username, self.groups))


class ActivityHandler(HivedHandler):
    """A kernel job ran a cell (its provisioner reports it): idle release counts from now."""

    async def post(self, job_id: str):
        await self.json_body("Activity", required=False)
        await self.job_or_404(job_id, "write")
        with service_errors(f"jobs/{job_id}"):
            self.reply(await self.run(self.svc.kernel_activity, job_id, self.username, self.groups))


class ControlHandler(HivedHandler):
    """POST jobs/{id}/hold | release | requeue (who may: as for a cancel)."""

    async def post(self, job_id: str, action: str):
        await self.json_body("Cancel", required=False)
        job = await self.job_or_404(job_id, "write")
        if job["state"] in TERMINAL_STATES:
            raise ApiError(409, f"job {job_id} already {job['state']}", f"jobs/{job_id}")
        with service_errors(f"jobs/{job_id}"):
            self.reply(await self.run(self.svc.control, job_id, action, self.username, self.groups))


class LogsHandler(HivedHandler):
    async def get(self, job_id: str):
        rank = self.query_int("rank", 0, 0, 100_000)
        offset = self.query_int("offset", 0, 0, 1 << 40)
        follow = self.query_int("follow", 0, 0, 1)
        job = await self.job_or_404(job_id)
        pods = _pod_count(job)
        if pods is not None and rank >= pods:
            raise ApiError(400, f"job {job_id} has {pods} pod(s); rank must be below {pods}", "query.rank")
        deadline = time.monotonic() + self.hived.config.follow_timeout
        while True:
            # read the state before the log: a job that is done now has all its text written
            done = job["state"] in TERMINAL_STATES
            with service_errors(f"jobs/{job_id}/logs"):
                text, next_offset = await self.run(self.svc.logs, job_id, rank=rank, offset=offset)
            if text or done or not follow or time.monotonic() >= deadline:
                break
            await asyncio.sleep(self.hived.config.follow_poll)
            with service_errors(f"jobs/{job_id}"):
                job = await self.run(self.svc.get_job, job_id)
        self.reply({"text": text, "offset": next_offset, "done": bool(done and not text)})


def _pod_count(job: dict):
    pods = job.get("pods")
    if isinstance(pods, int):
        return pods
    placement = job.get("placement")
    if isinstance(placement, dict) and placement.get("pods"):
        return len(placement["pods"])
    return None


@web.stream_request_body
class RateRefusal(web.RequestHandler):
    """``POST jobs`` of a user over their submission rate, answered where tornado picks the handler.

    A user flooding the API sends hundreds of these a second; each costs the event loop, which every
    other team's requests share. This answers what ``JobsHandler`` would (429, ``Retry-After``, the
    same one-line reason) without jupyter-server's handler, its checks and the request's body (the
    connection is closed if the body is large). It only ever refuses: a request it lets through is
    checked again, and its token taken, by ``JobsHandler`` as before."""

    hived_refusal: str | None = None   # for the refusal log (extension.py)

    def initialize(self, user: Any, problem: str, retry_after: float | None) -> None:
        self.current_user, self.problem, self.retry_after = user, problem, retry_after

    def prepare(self) -> None:
        self.set_status(429)
        self.set_header("Content-Type", "application/json")
        if self.retry_after is not None:
            self.set_header("Retry-After", str(max(1, math.ceil(self.retry_after))))
        self.hived_refusal = self.problem
        self.finish(json.dumps({"error": one_line(self.problem), "where": "vc"}))

    def data_received(self, chunk: bytes) -> None:
        pass   # dropped unread

    def check_xsrf_cookie(self) -> None:
        pass   # only token-authenticated requests come here (no cookie to forge)


def refuse_floods_early(web_app: web.Application) -> None:
    """Route ``POST jobs`` of a user whose token is valid and who is over their rate to
    :class:`RateRefusal`. Installed before the route gate (gate.py) wraps the routing."""
    original = web_app.get_handler_delegate

    def get_handler_delegate(request: httputil.HTTPServerRequest, target_class: type[web.RequestHandler],
                             target_kwargs: dict[str, Any] | None = None, path_args: list[bytes] | None = None,
                             path_kwargs: dict[str, bytes] | None = None) -> Any:   # tornado's _HandlerDelegate
        if target_class is JobsHandler and request.method == "POST":
            refusal = _over_rate(web_app.settings, request)
            if refusal is not None:
                target_class, target_kwargs, path_args, path_kwargs = RateRefusal, refusal, [], {}
        return original(request, target_class, target_kwargs, path_args, path_kwargs)

    web_app.get_handler_delegate = get_handler_delegate  # type: ignore[method-assign]


def _over_rate(settings: dict, request: httputil.HTTPServerRequest) -> dict | None:
    """RateRefusal's arguments when the request's token is valid and its user over their rate."""
    who = getattr(settings.get("identity_provider"), "token_user_of", None)   # hived's providers
    svc = getattr(settings.get("hived"), "service", None)
    if who is None or svc is None:
        return None
    user = who(request.headers)
    refusal = svc.rate_refusal(user.username) if user is not None else None
    if refusal is None:
        return None
    return {"user": user, "problem": str(refusal.problem), "retry_after": refusal.retry_after}
