"""The command a kernel job runs: it starts the kernel, keeps it, and obeys its provisioner.

``python -m hived.kernels.host -- python -m ipykernel_launcher -f {connection_file}``

The job holds the GPUs; the kernel is a child of this host. The host

- writes the connection info the provisioner sent (``$HIVED_KERNEL_CONNECTION`` is refused
  by hived as a job variable, so it comes as ``JUPYTER_KERNEL_CONNECTION``) to a 0600 file in
  ``$HIVED_JOB_DIR`` and puts that path where the command says ``{connection_file}``;
- answers its provisioner on a control socket (the connection info's ``hived_host_port``),
  every message signed with the kernel's own key (``jupyter_client.session.Session``):
  ``status`` (is the kernel alive, its exit code), ``signal`` (interrupt, terminate or kill the
  kernel only) and ``start`` (a kernel restart: a new kernel in the same job, the same GPUs);
- ends the job when the kernel is gone and no restart came for ``LINGER`` seconds, and
  stops the kernel when the job is stopped (SIGTERM from the launcher).

In a Kubernetes pod (``$HIVED_KERNEL_REPORT_URL`` set: k8s/kernel_pod.py) the provisioner's ports
and key are another machine's: the host picks free ports and a new key itself, has the kernel
listen on every interface of the pod, and once the kernel and its control socket are up reports
them, with the pod's IP, to hived (hived.kernels.report), where the provisioner reads them. A
refused report ends the job with hived's line in its log.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from jupyter_client.session import Session

# zmq and jupyter_client are imported once the kernel is on its way: the kernel's own start
# (an interpreter and ipykernel) is the long part, and the host's imports overlap with it

CONNECTION_ENV = "JUPYTER_KERNEL_CONNECTION"
PLACEHOLDER = "{connection_file}"
LINGER = 60.0       # seconds a dead kernel waits for a restart before the job ends
STOP_GRACE = 3.0    # seconds between SIGTERM and SIGKILL of the kernel when the job stops


def session_for(info: dict) -> Session:
    """The kernel's own signing session: only who holds the kernel's key can steer the host."""
    from jupyter_client.session import Session
    key = info.get("key") or ""
    return Session(key=key.encode() if isinstance(key, str) else key,
                   signature_scheme=info.get("signature_scheme") or "hmac-sha256", username="hived")


def write_connection(info: dict, job_dir: Path) -> Path:
    path = job_dir / f"kernel-{os.environ.get('HIVED_JOB_ID', 'job')}.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(info, f)
    return path


class Host:
    def __init__(self, argv: list[str], info: dict, conn_path: Path):
        self.argv = [str(conn_path) if a == PLACEHOLDER else a for a in argv]
        self.info = info
        self.kernel: subprocess.Popen | None = None
        self.generation = 0
        self.dead_since: float | None = None
        self.stopping = False
        self.on_ready: Callable[[], object] | None = None   # called once the kernel and the socket are up

    def listen(self) -> None:
        import zmq
        self.session = session_for(self.info)
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.linger = 0
        self.sock.bind(f"tcp://{self.info.get('ip') or '127.0.0.1'}:{int(self.info['hived_host_port'])}")

    def start_kernel(self) -> None:
        self.stop_kernel()
        self.generation += 1
        self.kernel = subprocess.Popen(self.argv)
        self.dead_since = None

    def stop_kernel(self) -> None:
        k = self.kernel
        if k is None or k.poll() is not None:
            return
        k.terminate()
        try:
            k.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            k.kill()
            k.wait()

    def status(self) -> dict:
        code = None if self.kernel is None else self.kernel.poll()
        return {"alive": code is None, "exit_code": code, "generation": self.generation,
                "pid": None if self.kernel is None else self.kernel.pid}

    def handle(self, idents: list, msg: dict) -> None:
        content = msg.get("content") or {}
        op = content.get("op")
        reply: dict = {"ok": True}
        if op == "signal" and self.kernel is not None and self.kernel.poll() is None:
            try:
                self.kernel.send_signal(int(content.get("signum", signal.SIGINT)))
            except (OSError, ValueError) as exc:
                reply = {"ok": False, "error": str(exc)}
        elif op == "start":
            self.start_kernel()
        elif op not in ("status", "signal"):
            reply = {"ok": False, "error": f"unknown op {op!r}"}
        reply.update(self.status())
        self.session.send(self.sock, "hived_host_reply", reply, ident=idents)

    def serve(self) -> int:
        signal.signal(signal.SIGTERM, self._stop)
        # an interrupt is for the kernel, sent by op; a handler, not SIG_IGN, which the kernel would inherit
        signal.signal(signal.SIGINT, lambda signum, frame: None)
        self.start_kernel()
        self.listen()
        if self.on_ready is not None:
            from .report import ReportRefused
            try:
                self.on_ready()
            except ReportRefused as exc:
                print(f"[hived kernel host] {exc}", file=sys.stderr)
                self.stop_kernel()
                return 1
        import zmq
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        while not self.stopping:
            try:
                ready = dict(poller.poll(200))
            except zmq.ZMQError:
                continue   # interrupted by a signal
            if self.sock in ready:
                try:
                    idents, frames = self.session.feed_identities(self.sock.recv_multipart())
                    self.handle(idents, self.session.deserialize(frames))
                except (ValueError, KeyError) as exc:   # unsigned, badly signed or malformed: dropped
                    print(f"[hived kernel host] dropped a control message: {exc}", file=sys.stderr)
            code = None if self.kernel is None else self.kernel.poll()
            if code is not None:
                now = time.monotonic()
                self.dead_since = self.dead_since or now
                if now - self.dead_since >= LINGER:
                    print(f"[hived kernel host] the kernel exited ({code}) and no restart came in "
                          f"{LINGER:g} s: ending the job", file=sys.stderr)
                    return 0
        self.stop_kernel()
        return 0

    def _stop(self, signum, frame) -> None:
        self.stopping = True


def pod_connection() -> dict:
    """A kernel pod's own connection info: free ports of the pod, a new key, every interface."""
    import secrets

    from jupyter_client.connect import LocalPortCache
    ports = {name: LocalPortCache.instance().find_available_port("0.0.0.0")   # six different free ports
             for name in ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port", "hived_host_port")}
    return {"ip": "0.0.0.0", "transport": "tcp", "signature_scheme": "hmac-sha256", "kernel_name": "",
            "key": secrets.token_hex(32), **ports}


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--"]:
        args = args[1:]
    raw = os.environ.pop(CONNECTION_ENV, "")
    in_pod = bool(os.environ.get("HIVED_KERNEL_REPORT_URL"))
    if not args or not (raw or in_pod):
        print(f"usage: {CONNECTION_ENV}=<json> python -m hived.kernels.host -- KERNEL COMMAND "
              f"(with {PLACEHOLDER} where the connection file goes)", file=sys.stderr)
        return 2
    if in_pod:
        import tempfile
        info = pod_connection()
        job_dir = Path(os.environ.get("HIVED_JOB_DIR") or tempfile.gettempdir())
    else:
        info = json.loads(raw)
        job_dir = Path(os.environ.get("HIVED_JOB_DIR") or ".")
    host = Host(args, info, write_connection(info, job_dir))
    if in_pod:
        from .report import from_env
        host.on_ready = lambda: from_env(info)
    return host.serve()


if __name__ == "__main__":
    sys.exit(main())
