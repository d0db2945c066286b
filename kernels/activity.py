"""Cell activity of a kernel job, reported to hived for idle release.

The provisioner's reporter subscribes to the kernel's iopub channel (it holds the
kernel's key, so it checks every message's signature) and tells hived
(``POST jobs/{id}/activity``) when a cell starts, when it ends, and every
``BUSY_EVERY`` seconds while one runs. hived releases a kernel job whose VC sets
``kernelIdleTimeout`` once no activity came for that long (service/kernel_idle.py).
"""
from __future__ import annotations

import logging
import threading
import time

import zmq

from hived.service.client import HivedClient, HivedError

from .host import session_for

BUSY_EVERY = 10.0   # seconds between reports while a cell runs


class ActivityReporter:
    def __init__(self, client: HivedClient, job_id: str, info: dict, log: logging.Logger | logging.LoggerAdapter):
        self.client, self.job_id, self.info, self.log = client, job_id, info, log
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"hived-kernel-activity-{job_id}", daemon=True)
        self.reports = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)

    def _report(self) -> None:
        try:
            self.client.kernel_activity(self.job_id)
            self.reports += 1
        except HivedError as exc:
            self.log.debug("hived: activity of job %s not reported: %s", self.job_id, exc.line())

    def _run(self) -> None:
        session = session_for(self.info)
        ctx = zmq.Context.instance()
        sock = ctx.socket(zmq.SUB)
        sock.linger = 0
        sock.setsockopt(zmq.SUBSCRIBE, b"")
        sock.connect(f"tcp://{self.info.get('ip') or '127.0.0.1'}:{self.info['iopub_port']}")
        busy_since_report: float | None = None
        try:
            while not self._stop.is_set():
                if sock.poll(200):
                    try:
                        _, frames = session.feed_identities(sock.recv_multipart())
                        msg = session.deserialize(frames, content=True)
                    except (ValueError, KeyError):
                        continue   # not signed with the kernel's key: not the kernel's word
                    if msg.get("msg_type") != "status" or \
                            msg.get("parent_header", {}).get("msg_type") != "execute_request":
                        continue
                    state = msg.get("content", {}).get("execution_state")
                    if state == "busy":
                        busy_since_report = time.monotonic()
                        self._report()
                    elif state == "idle":
                        busy_since_report = None
                        self._report()
                elif busy_since_report is not None and time.monotonic() - busy_since_report >= BUSY_EVERY:
                    busy_since_report = time.monotonic()
                    self._report()
        finally:
            sock.close()
