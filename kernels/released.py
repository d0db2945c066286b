"""What answers on a kernel's ports once hived has released its job.

When hived ends a kernel's job on its own (idle release, an admin's cancel), the
notebook still holds the kernel's connection. Rather than a bare "kernel died",
the provisioner puts this small stand-in on the same ports: it speaks just enough
of the Jupyter messaging protocol (heartbeat, kernel_info, execute, shutdown) to
answer every cell with an error that says why the kernel went away and what to do.
It holds no GPU and runs in the provisioner's process; restarting the kernel
stops it and queues a new job.
"""
from __future__ import annotations

import threading

import zmq

from .host import session_for

ENAME = "KernelReleased"


class ReleasedKernel:
    def __init__(self, info: dict, reason: str):
        self.info, self.reason = info, reason
        self.session = session_for(info)
        self._stop = threading.Event()
        self._bound = threading.Event()
        self.error: Exception | None = None
        self._thread = threading.Thread(target=self._run, name="hived-released-kernel", daemon=True)

    def start(self) -> bool:
        """True once it listens on the kernel's ports (False: they are taken)."""
        self._thread.start()
        self._bound.wait(5)
        return self.error is None and self._bound.is_set()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=3)

    def _addr(self, port_key: str) -> str:
        return f"tcp://{self.info.get('ip') or '127.0.0.1'}:{int(self.info[port_key])}"

    def _run(self) -> None:
        ctx = zmq.Context()
        socks = {}
        try:
            for key, kind in (("shell_port", zmq.ROUTER), ("control_port", zmq.ROUTER),
                              ("iopub_port", zmq.PUB), ("hb_port", zmq.REP), ("stdin_port", zmq.ROUTER)):
                s = ctx.socket(kind)
                s.linger = 0
                s.bind(self._addr(key))
                socks[key] = s
        except zmq.ZMQError as exc:
            self.error = exc
            for s in socks.values():
                s.close()
            ctx.term()
            return
        self._bound.set()
        poller = zmq.Poller()
        for key in ("shell_port", "control_port", "hb_port"):
            poller.register(socks[key], zmq.POLLIN)
        try:
            while not self._stop.is_set():
                ready = dict(poller.poll(200))
                if socks["hb_port"] in ready:
                    socks["hb_port"].send(socks["hb_port"].recv())
                for key in ("shell_port", "control_port"):
                    if socks[key] in ready:
                        self._answer(socks[key], socks["iopub_port"])
        finally:
            for s in socks.values():
                s.close()
            ctx.term()

    def _answer(self, sock: zmq.Socket, iopub: zmq.Socket) -> None:
        try:
            idents, frames = self.session.feed_identities(sock.recv_multipart())
            msg = self.session.deserialize(frames)
        except (ValueError, KeyError):
            return   # not signed with the kernel's key
        kind, parent = msg["header"]["msg_type"], msg
        send = self.session.send
        if kind == "kernel_info_request":
            send(sock, "kernel_info_reply", {
                "status": "ok", "protocol_version": "5.3", "implementation": "hived-released",
                "implementation_version": "1", "banner": self.reason,
                "language_info": {"name": "python", "version": "", "mimetype": "text/x-python",
                                  "file_extension": ".py"}}, parent=parent, ident=idents)
        elif kind == "execute_request":
            send(iopub, "status", {"execution_state": "busy"}, parent=parent)
            error = {"ename": ENAME, "evalue": self.reason, "traceback": [f"{ENAME}: {self.reason}"]}
            send(iopub, "error", error, parent=parent)
            send(sock, "execute_reply", {"status": "error", "execution_count": 0, **error},
                 parent=parent, ident=idents)
            send(iopub, "status", {"execution_state": "idle"}, parent=parent)
        elif kind == "shutdown_request":
            send(sock, "shutdown_reply", {"status": "ok", "restart": bool(msg["content"].get("restart"))},
                 parent=parent, ident=idents)
            self._stop.set()
        elif kind.endswith("_request"):
            send(sock, kind.replace("_request", "_reply"),
                 {"status": "error", "ename": ENAME, "evalue": self.reason, "traceback": []},
                 parent=parent, ident=idents)
