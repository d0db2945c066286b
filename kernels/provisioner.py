"""``hived-provisioner``: a Jupyter kernel that is a TE job of hived.

A kernelspec names it in ``metadata.kernel_provisioner`` (``hived kernelspec install``
writes one). Starting the kernel submits a TE job to the kernelspec's VC through the
REST client (``hived.service.client.HivedClient``: the same service and identity rules
as the magics), waits while the job queues (telling the user its queue position and wait reason: queue_notice.py),
and returns the connection info of the kernel the job runs (``hived.kernels.host``).

What the kernel manager asks maps onto the job:

- interrupt (SIGINT) and the kill/terminate of a restart go to the kernel process only,
  through the host's signed control socket: the job, and its GPUs, stay;
- a restart starts a new kernel inside the same job;
- shutdown cancels the job, which gives its GPUs back.

On Kubernetes the kernel's pod picks its own ports and key and reports them to hived
(hived.kernels.report); the provisioner waits for that report after the job runs and connects to
the pod (``_pod_connection``); the host in the pod obeys the same signed requests.

A start that waits longer than ``start_timeout`` seconds cancels the queued job and fails
with the job's wait reason. While the kernel runs, the provisioner watches its iopub
messages and reports cell activity to hived (``POST jobs/{id}/activity``), which releases
kernels that ran no cell for their VC's ``kernelIdleTimeout``.
"""
from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any, cast

import zmq
from jupyter_client.connect import KernelConnectionInfo, LocalPortCache
from jupyter_client.provisioning import KernelProvisionerBase, LocalProvisioner
from tornado.web import HTTPError
from traitlets import Float, Integer, Unicode

from hived.core.jobs import KERNEL_LABEL
from hived.service.client import TERMINAL_STATES, HivedClient, HivedError

from .activity import ActivityReporter
from .host import CONNECTION_ENV, PLACEHOLDER, session_for
from .queue_notice import QueueNotice
from .released import ReleasedKernel

DEFAULT_START_TIMEOUT = 300.0
HOST_TIMEOUT_MS = 3000        # a host that does not answer in this long is taken as gone
END_WAIT = 15.0               # shutdown waits this long for the job to end
FAST_POLL_FOR = 5.0           # a start reads its job every 50 ms this long (an idle VC starts it at once), then less


class KernelStartError(HTTPError):
    """The kernel's job did not start; the message is the one line the user sees.

    An HTTP error to the Jupyter server, whose REST API answers any other exception of a
    kernel start with a bare "Unhandled error": this way the line reaches the frontend
    (JupyterLab's "Error Starting Kernel" dialog). ``status``: hived's refusal (403, 400,
    ...), else 503 (not started in time, or ended before it started)."""

    def __init__(self, line: str, status: int = 503):
        super().__init__(status, line)    # the Jupyter server answers log_message as the error's message
        self.line = line

    def __str__(self) -> str:
        return self.line


class HivedProvisioner(LocalProvisioner):
    """Ports and the connection file as Jupyter's local provisioner makes them (the kernel of a
    local launcher runs on this machine); the process is a hived job."""

    vc = Unicode("", config=True, help="the VC the kernel's job is submitted to")
    gpus = Integer(1, config=True, help="GPUs of the kernel's job")
    start_timeout = Float(DEFAULT_START_TIMEOUT, config=True,
                          help="seconds a start may wait in the queue before it fails")
    url = Unicode("", config=True, help="hived's URL; empty: the client's rules (Hub, HIVED_URL, ...)")

    job_id: str | None = None
    host_port: int | None = None
    end_reason: str = ""
    _client: HivedClient | None = None
    _reporter: ActivityReporter | None = None
    _released: ReleasedKernel | None = None
    _ending = False       # we asked the job to end (shutdown): its end is no news to the user
    _on_pod = False       # the kernel runs in a Kubernetes pod, reached at what the pod reported

    # -- plumbing ---------------------------------------------------------
    @property
    def client(self) -> HivedClient:
        if self._client is None:
            self._client = HivedClient(url=self.url or None)
        return self._client

    async def _rest(self, fn, *args):
        return await asyncio.to_thread(fn, *args)

    def _host(self, op: str, **content: Any) -> dict | None:
        """One signed request to the job's host; None when it does not answer."""
        if self.host_port is None or not self.connection_info:
            return None
        info = dict(self.connection_info)
        session = session_for(_jsonable(info))
        ctx: zmq.Context = zmq.Context.instance()
        sock = ctx.socket(zmq.DEALER)
        sock.linger = 0
        try:
            sock.connect(f"tcp://{info.get('ip') or '127.0.0.1'}:{self.host_port}")
            session.send(sock, "hived_host_request", {"op": op, **content})
            if not sock.poll(HOST_TIMEOUT_MS):
                return None
            _, frames = session.feed_identities(sock.recv_multipart())
            return session.deserialize(frames).get("content")
        except (zmq.ZMQError, ValueError, KeyError):
            return None
        finally:
            sock.close()

    # -- start ------------------------------------------------------------
    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        if not self.vc:
            raise KernelStartError(f"hived: kernelspec {self.kernel_spec.display_name!r} names no VC "
                                   "(metadata.kernel_provisioner.config.vc)")
        if self._on_pod and self.job_id is not None and self.end_reason == "":
            # a restart in a pod's job: the connection is the pod's, not one of this machine's interfaces
            kwargs.pop("extra_arguments", None)
            return await KernelProvisionerBase.pre_launch(self, cmd=list(self.kernel_spec.argv), **kwargs)
        kwargs = await super().pre_launch(**kwargs)
        if self.host_port is None:
            assert self.parent is not None   # the kernel manager that owns us
            self.host_port = LocalPortCache.instance().find_available_port(self.parent.ip)
        return kwargs

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> KernelConnectionInfo:
        if self._released is not None:
            self._released.stop()
            self._released = None
        if self.job_id is not None and self.end_reason == "":
            answer = await asyncio.to_thread(self._host, "start")
            if answer is not None:     # a restart: a new kernel in the same job, same GPUs
                self._watch()
                return self.connection_info
        self.end_reason, self._ending = "", False
        self._stop_watch()
        body = self._job_body(cmd, kwargs)
        began = time.monotonic()
        try:
            job = await self._rest(self.client.submit, body)
        except HivedError as exc:
            raise KernelStartError(f"hived: kernel not started: {exc.line()}",
                                   exc.status if 400 <= exc.status < 600 else 503) from exc
        self.job_id = job["id"]
        self.log.info("hived: kernel %s is job %s in VC %s (%d GPU%s)", self.kernel_id, self.job_id,
                      self.vc, self.gpus, "" if self.gpus == 1 else "s")
        await self._wait_running(job, began)
        await self._pod_connection(began)
        self._watch()
        return self.connection_info

    def _job_body(self, cmd: list[str], kwargs: dict) -> dict:
        assert self.parent is not None
        conn = Path(self.parent.connection_file)
        info = json.loads(conn.read_text())
        info["hived_host_port"] = self.host_port
        argv = [PLACEHOLDER if a == str(conn) else a for a in cmd]
        env = {k: str(v) for k, v in (self.kernel_spec.env or {}).items()
               if not k.startswith("HIVED_") and k not in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")}
        session_name = (kwargs.get("env") or {}).get("JPY_SESSION_NAME")
        if session_name:
            env["JPY_SESSION_NAME"] = session_name
        env[CONNECTION_ENV] = json.dumps(info)
        body: dict[str, Any] = {
            "vc": self.vc, "gpus": self.gpus, "job_class": "te",
            "command": [sys.executable, "-m", "hived.kernels.host", "--", *argv],
            "name": f"kernel {self.kernel_spec.display_name}"[:200],
            "labels": {KERNEL_LABEL: str(self.kernel_id)}, "env": env, "grace_period": 5, "max_retries": 0,
        }
        cwd = kwargs.get("cwd")
        if cwd and Path(cwd).is_dir():
            body["workdir"] = str(cwd)
        return body

    async def _wait_running(self, job: dict, began: float) -> None:
        notice = QueueNotice(str(self.kernel_id), str(self.job_id), self.vc, self.log, self.parent)
        pause = 0.05
        while True:
            state = job.get("state")
            if state == "running":
                if notice.shown:
                    self.log.warning("hived: kernel job %s started after %.0f s in VC %s's queue", self.job_id,
                                     time.monotonic() - began, self.vc)
                return
            if state in TERMINAL_STATES:
                self.end_reason = job.get("reason") or state
                raise KernelStartError(f"hived: kernel job {self.job_id} {state} before it started: "
                                       f"{self.end_reason}")
            if state in ("queued", "placed"):
                notice.update(job)
            if time.monotonic() - began >= self.start_timeout:
                await self._cancel_quietly()
                where = "" if job.get("queue_position") is None else f" at position {job['queue_position'] + 1}"
                raise KernelStartError(
                    f"hived: kernel job {self.job_id} did not start within {self.start_timeout:g} s "
                    f"(start_timeout) and was cancelled{where} in VC {self.vc}'s queue: "
                    f"{job.get('wait_reason') or state}")
            await asyncio.sleep(pause)
            if time.monotonic() - began > FAST_POLL_FOR:
                pause = min(pause * 1.5, 1.0)
            job = await self._rest(self.client.job, self.job_id)

    async def _pod_connection(self, began: float) -> None:
        """On Kubernetes the kernel's pod picks its ports and key and reports them to hived: wait for
        that report (within the same start_timeout), then connect there. On the local launcher the
        kernel uses the connection file made here, and this returns at once."""
        while True:
            try:
                answer = await self._rest(self.client.kernel_connection, self.job_id)
            except HivedError as exc:
                if exc.status == 404:    # a hived without the route runs kernels locally only
                    return
                raise KernelStartError(f"hived: kernel job {self.job_id}: {exc.line()}") from exc
            if answer.get("launcher") != "kubernetes":
                return
            if answer.get("connection"):
                self._use_pod(dict(answer["connection"]), str(answer.get("pod")))
                return
            if answer.get("state") not in ("placed", "running"):
                self.end_reason = str(answer.get("state"))
                raise KernelStartError(f"hived: kernel job {self.job_id} {answer.get('state')} before its pod "
                                       "reported the kernel's connection")
            if time.monotonic() - began >= self.start_timeout:
                await self._cancel_quietly()
                raise KernelStartError(f"hived: kernel job {self.job_id} runs, but its pod did not report the "
                                       f"kernel's connection within {self.start_timeout:g} s (start_timeout); the "
                                       "job was cancelled. Its log (hived logs) says why")
            await asyncio.sleep(0.2)

    def _use_pod(self, info: dict, pod: str) -> None:
        if self.ports_cached:     # the ports taken here for a local kernel are not used
            cache = LocalPortCache.instance()
            for name in ("shell_port", "iopub_port", "stdin_port", "hb_port", "control_port"):
                cache.return_port(int(self.connection_info[name]))
            self.ports_cached = False
        if self.host_port is not None:
            LocalPortCache.instance().return_port(self.host_port)
        self.host_port = int(info.pop("hived_host_port"))
        info["key"] = str(info["key"]).encode()
        self.connection_info = cast(KernelConnectionInfo, info)
        self._on_pod = True
        self.log.info("hived: kernel %s runs in pod %s at %s", self.kernel_id, pod, info.get("ip"))

    # -- the running kernel -----------------------------------------------
    def _watch(self) -> None:
        if self._reporter is None and self.job_id is not None:
            self._reporter = ActivityReporter(self.client, self.job_id, _jsonable(dict(self.connection_info)),
                                              self.log, self._job_ended)
            self._reporter.start()

    def _stop_watch(self) -> None:
        if self._reporter is not None:
            self._reporter.stop()
            self._reporter = None

    def _job_ended(self, job: dict) -> None:
        """hived ended the kernel's job (not our shutdown): the notebook's next cell is told why."""
        self.end_reason = _end_reason(job)
        if self._ending or self._released is not None:
            return
        self.log.warning("hived: kernel %s: job %s %s: %s", self.kernel_id, job.get("id"), job.get("state"),
                         self.end_reason)
        stand_in = ReleasedKernel(_jsonable(dict(self.connection_info)),
                                  f"hived ended this kernel's job {job.get('id')}: {self.end_reason}")
        if stand_in.start():
            self._released = stand_in

    @property
    def has_process(self) -> bool:
        return self.job_id is not None

    async def poll(self) -> int | None:
        if self._released is not None:
            return None if self._released.alive else 0
        if self.job_id is None:
            return 0
        answer = await asyncio.to_thread(self._host, "status")
        if answer is not None:
            return None if answer.get("alive") else int(answer.get("exit_code") or 0)
        try:
            job = await self._rest(self.client.job, self.job_id)
        except HivedError:
            return None     # cannot tell: a service that is restarting is not a dead kernel
        if job.get("state") in TERMINAL_STATES:
            await asyncio.to_thread(self._job_ended, job)
            if self._released is not None:
                return None
            return int(job.get("exit_code") or 1)
        return None

    async def wait(self) -> int | None:
        while (code := await self.poll()) is None:
            await asyncio.sleep(0.1)
        return code

    async def send_signal(self, signum: int) -> None:
        if self._released is not None:
            if signum in (signal.SIGTERM, signal.SIGKILL):
                self._released.stop()
            return
        if signum == 0:
            return
        await asyncio.to_thread(self._host, "signal", signum=int(signum))

    async def kill(self, restart: bool = False) -> None:
        if not restart:
            self._ending = True
        await self.send_signal(signal.SIGKILL)
        if not restart:
            await self._cancel_quietly()

    async def terminate(self, restart: bool = False) -> None:
        await self.send_signal(signal.SIGTERM)

    async def shutdown_requested(self, restart: bool = False) -> None:
        self._ending = self._ending or not restart

    async def cleanup(self, restart: bool = False) -> None:
        if restart:
            return
        self._ending = True
        self._stop_watch()
        if self._released is not None:
            self._released.stop()
            self._released = None
        if self.job_id is not None:
            await self._cancel_quietly()
            deadline = time.monotonic() + END_WAIT
            while time.monotonic() < deadline:
                job = await self._rest(self.client.job, self.job_id)
                if job.get("state") in TERMINAL_STATES:
                    break
                await asyncio.sleep(0.1)
        if self.host_port is not None:
            LocalPortCache.instance().return_port(self.host_port)
            self.host_port = None
        await super().cleanup(restart=restart)
        self.job_id, self._on_pod = None, False

    async def _cancel_quietly(self) -> None:
        if self.job_id is None:
            return
        try:
            await self._rest(self.client.cancel, self.job_id)
        except HivedError as exc:
            if exc.status not in (404, 409):   # already over, or gone: nothing to give back
                self.log.warning("hived: could not cancel kernel job %s: %s", self.job_id, exc.line())

    # -- a server that restarts finds its kernels again ------------------
    async def get_provisioner_info(self) -> dict[str, Any]:
        info = await super().get_provisioner_info()
        info.update({"hived_job_id": self.job_id, "hived_host_port": self.host_port, "hived_on_pod": self._on_pod})
        return info

    async def load_provisioner_info(self, provisioner_info: dict) -> None:
        await super().load_provisioner_info(provisioner_info)
        self.job_id = provisioner_info.get("hived_job_id")
        self.host_port = provisioner_info.get("hived_host_port")
        self._on_pod = bool(provisioner_info.get("hived_on_pod"))

    def get_shutdown_wait_time(self, recommended: float = 5.0) -> float:
        return max(recommended, 2.0)


def _end_reason(job: dict) -> str:
    """Why the job ended, as the user should read it (the release line when hived released it)."""
    for entry in reversed(job.get("history") or []):
        if str(entry.get("reason", "")).startswith("released"):
            return entry["reason"]
    return job.get("reason") or job.get("state") or "ended"


def _jsonable(info: dict) -> dict:
    return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in info.items()}
