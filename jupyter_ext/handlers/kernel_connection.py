"""``jobs/{id}/kernel-connection``: a kernel pod reports how to reach its kernel; its provisioner reads it.

- ``POST`` comes from the kernel's pod (hived.kernels.report), which has no user token: it is
  authenticated by the job's kernel secret in ``X-Hived-Kernel-Secret`` (service/kernel_connect.py).
  A header a cross-site form cannot set, so no XSRF cookie is asked for. The body is small
  (``REPORT_BYTES``). A wrong secret answers the same for a job that exists and one that does not.
- ``GET`` is the job's owner's (the provisioner, as the user): the connection info, key included.
"""
from __future__ import annotations

from hived.service.kernel_connect import NotRunning

from .base import ApiError, HivedHandler, service_errors

SECRET_HEADER = "X-Hived-Kernel-Secret"
REPORT_BYTES = 4096


class KernelConnectionHandler(HivedHandler):
    async def prepare(self) -> None:  # type: ignore[override]
        if self.request.method == "POST":
            self.public = True   # the secret, not a user, authenticates a report (checked in post)
        await super().prepare()
        if self.request.method != "POST" or self._finished:
            return
        if not self.request.headers.get(SECRET_HEADER):
            raise ApiError(403, f"a kernel connection report needs its job's kernel secret in {SECRET_HEADER}",
                           SECRET_HEADER)
        self.cap_body(REPORT_BYTES)

    def check_xsrf_cookie(self) -> None:
        if self.request.method == "POST":
            return None    # authenticated by a header, not a cookie
        return super().check_xsrf_cookie()

    async def post(self, job_id: str):
        secret = self.request.headers.get(SECRET_HEADER, "")
        raw = b"".join(self._body_parts)
        if len(raw) > REPORT_BYTES:
            raise ApiError(413, f"body is {len(raw)} bytes, the limit is {REPORT_BYTES}", "body")
        body = await self.json_body("KernelConnectionReport")
        with service_errors(f"jobs/{job_id}"):
            try:
                self.reply(await self.run(self.svc.report_kernel_connection, job_id, secret, body))
            except NotRunning as exc:
                raise ApiError(409, str(exc.problem), f"jobs/{job_id}") from None

    async def get(self, job_id: str):
        await self.job_or_404(job_id)
        with service_errors(f"jobs/{job_id}"):
            self.reply(await self.run(self.svc.kernel_connection, job_id, self.username))
