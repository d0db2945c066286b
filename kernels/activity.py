"""Cell activity of a kernel job, reported to hived for idle release; and the job's end.

The provisioner's reporter subscribes to the kernel's iopub channel (it holds the
kernel's key, so it checks every message's signature) and tells hived
(``POST jobs/{id}/activity``) when a cell starts, when it ends, and every
``BUSY_EVERY`` seconds while one runs. hived releases a kernel job whose VC sets
``kernelIdleTimeout`` once no activity came for that long (service/kernel_idle.py).
Every ``JOB_EVERY`` seconds it also reads the job: when hived ended it (released it,
an admin cancelled it), ``on_end`` gets the job, and the provisioner puts the
reason where the notebook will see it (released.py).
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import zmq

from hived.service.client import TERMINAL_STATES, HivedClient, HivedError

from .host import session_for

BUSY_EVERY = 10.0   # seconds between reports while a cell runs (a third of the VC's timeout when shorter)
JOB_EVERY = 1.0     # seconds between two reads of the job's state


class ActivityReporter:
    def __init__(self, client: HivedClient, job_id: str, info: dict, log: logging.Logger | logging.LoggerAdapter,
                 on_end: Callable[[dict], None]):
        self.client, self.job_id, self.info, self.log, self.on_end = client, job_id, info, log, on_end
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"hived-kernel-activity-{job_id}", daemon=True)
        self.reports = 0
        self.busy_every = BUSY_EVERY

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)

    def _report(self) -> None:
        try:
            answer = self.client.kernel_activity(self.job_id)
            self.reports += 1
            if answer.get("release_at") is not None:   # a running cell must be seen well before then
                self.busy_every = min(BUSY_EVERY, max(0.2, (answer["release_at"] - answer["activity"]) / 3))
        except HivedError as exc:
            self.log.debug("hived: activity of job %s not reported: %s", self.job_id, exc.line())

    def _ended(self) -> bool:
        try:
            job = self.client.job(self.job_id)
        except HivedError:
            return False    # cannot tell now (a service restarting): asked again later
        if job.get("state") not in TERMINAL_STATES:
            return False
        if not self._stop.is_set():
            self.on_end(job)
        return True

    def _run(self) -> None:
        session = session_for(self.info)
        ctx: zmq.Context = zmq.Context.instance()
        sock = ctx.socket(zmq.SUB)
        sock.linger = 0
        sock.setsockopt(zmq.SUBSCRIBE, b"")
        sock.connect(f"tcp://{self.info.get('ip') or '127.0.0.1'}:{self.info['iopub_port']}")
        busy_since_report: float | None = None
        checked = time.monotonic()
        try:
            while not self._stop.is_set():
                if time.monotonic() - checked >= JOB_EVERY:
                    checked = time.monotonic()
                    if self._ended():
                        return
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
                elif busy_since_report is not None and time.monotonic() - busy_since_report >= self.busy_every:
                    busy_since_report = time.monotonic()
                    self._report()
        finally:
            sock.close()
