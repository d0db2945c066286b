"""Where a kernel job's pod says how to reach its kernel (``KernelConnections``, a part of SchedulerService).

On Kubernetes the kernel runs in a pod on another machine, which picks its own ports and signing
key (hived.kernels.host). The pod reports that connection info to hived
(``POST jobs/{id}/kernel-connection``) and the kernel's provisioner, running as the job's owner,
reads it there (``GET``). The pod proves who it is with the job's **kernel secret**: an HMAC of the
job id under a key kept in the data directory (``kernel-report.key``, 0600, made once), so nothing
secret is journaled and a restarted hived derives the same secret for the pods it adopts. The
launcher hands the secret to the kernel job's pods only (k8s/kernel_pod.py); no job view shows it.

A report is taken only with the job's secret, while the job holds its GPUs (placed, running, or
in its grace period), and
from a pod of its live gang (the launcher's ``pod_names``). The info lives in memory and is dropped
when the job stops holding its GPUs.
"""
from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import secrets
import threading
from pathlib import Path
from typing import Any

from hived.core.engine import RequestError
from hived.core.jobs import KERNEL_LABEL

from .errors import NotAuthorized, unknown_job
from .host import ServiceHost
from .launcher import capability

KEY_FILE = "kernel-report.key"
PORT_KEYS = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port", "hived_host_port")


class NotRunning(RequestError):
    """The job does not hold its GPUs (it ended, or has not started): a report is not taken (HTTP 409)."""


class SecretRefused(NotAuthorized):
    """The kernel secret does not open this job (the same answer whether or not the job exists)."""


class KernelConnections:
    def __init__(self, host: ServiceHost):
        self.host = host
        self.key_path = Path(host.data_dir) / KEY_FILE
        self._key: bytes | None = None
        self._key_lock = threading.Lock()
        self._reported: dict[str, tuple[str, dict]] = {}   # job -> (pod, connection info)

    # -- the secret ----------------------------------------------------------
    def _server_key(self) -> bytes:
        with self._key_lock:
            if self._key is None:
                try:
                    fd = os.open(self.key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                except FileExistsError:
                    self._key = bytes.fromhex(self.key_path.read_text().strip())
                else:
                    key = secrets.token_bytes(32)
                    with os.fdopen(fd, "w") as f:
                        f.write(key.hex())
                        f.flush()
                        os.fsync(f.fileno())
                    self._key = key
            return self._key

    def secret_for(self, job_id: str) -> str:
        """The kernel secret of ``job_id`` (what its pods get in ``HIVED_KERNEL_SECRET``)."""
        return hmac.new(self._server_key(), b"hived-kernel-report\0" + job_id.encode(), hashlib.sha256).hexdigest()

    # -- the pod reports -----------------------------------------------------
    def report(self, job_id: str, secret: str, body: dict) -> dict:
        """Store the connection info ``body["connection"]`` that pod ``body["pod"]`` of ``job_id`` reports."""
        if not isinstance(job_id, str) or not isinstance(secret, str) or not hmac.compare_digest(
                self.secret_for(job_id).encode(), secret.encode("utf-8", "replace")):
            raise SecretRefused(f"kernel secret not accepted for job {job_id!r}")
        pod, info = body["pod"], _checked(body["connection"])
        with self.host.lock:
            rec = self.host.eng.find(job_id)
            if rec is None or KERNEL_LABEL not in rec.request.labels:
                raise SecretRefused(f"kernel secret not accepted for job {job_id!r}")
            if not rec.state.holding:
                self._reported.pop(job_id, None)
                raise NotRunning("job_id", f"job {job_id} is {rec.state.value}, not running: nothing stored")
            names = self._pod_names(job_id)
            if pod not in names:
                raise NotAuthorized(f"pod {pod!r} is not one of job {job_id}'s pods "
                                    f"({', '.join(names) or 'none running'}): nothing stored")
            self._reported[job_id] = (pod, info)
        return {"id": job_id, "pod": pod, "stored": True}

    def _pod_names(self, job_id: str) -> list[str]:
        names = capability(getattr(self.host, "launcher", None), "pod_names")
        return list(names(job_id)) if names is not None else []

    # -- the provisioner reads -----------------------------------------------
    def connection(self, job_id: str, user: str) -> dict:
        """What the pod of ``job_id`` reported, for the job's owner only (it holds the kernel's key)."""
        with self.host.lock:
            rec = self.host.eng.find(job_id) if isinstance(job_id, str) else None
            if rec is None:
                raise unknown_job(job_id)
            if rec.request.user != user:
                raise NotAuthorized(f"user {user!r} may not read the kernel connection of {job_id}: only its "
                                    f"owner {rec.request.user!r} may")
            if not rec.state.holding:
                self._reported.pop(job_id, None)
            pod, info = self._reported.get(job_id, (None, None))
            kind = getattr(getattr(self.host, "launcher", None), "kind", "local")
            return {"id": job_id, "state": rec.state.value, "launcher": kind, "pod": pod, "connection": info}

    def tick(self) -> None:
        """Forget what jobs that stopped holding their GPUs reported (called under the service's lock)."""
        for job_id in list(self._reported):
            rec = self.host.eng.find(job_id)
            if rec is None or not rec.state.holding:
                del self._reported[job_id]

    def reported(self) -> dict[str, Any]:
        """job -> pod, of what is kept now (for tests and status)."""
        with self.host.lock:
            return {j: pod for j, (pod, _) in self._reported.items()}


def _checked(info: dict) -> dict:
    """The connection info as stored: the schema checked types and ranges; the address must be one."""
    try:
        ip = ipaddress.ip_address(info["ip"])
    except ValueError:
        raise RequestError("body.connection.ip", f"not an IP address: {str(info['ip'])[:64]!r}") from None
    if ip.is_unspecified:
        raise RequestError("body.connection.ip", f"{info['ip']} is where the kernel listens, not where it is "
                           "reached: report the pod's IP (status.podIP)")
    ports = [info[k] for k in PORT_KEYS]
    if len(set(ports)) != len(ports):
        raise RequestError("body.connection", f"the ports must differ, got {ports}")
    return {k: info[k] for k in ("ip", "transport", "key", "signature_scheme", *PORT_KEYS, "kernel_name")
            if k in info}
