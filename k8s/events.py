"""Kubernetes Events (core/v1) for what hived does to pods and jobs: binding, preemption, refusals.

``kubectl describe pod`` and ``kubectl get events`` then say why a pod went
where it went, or why it was deleted, as they do for the default scheduler.
A job is no Kubernetes object of its own: its Events name it as
``involvedObject: {apiVersion: hived.io/v1, kind: HivedJob, name: <job id>}``
in the namespace of its pods (``kubectl get events --field-selector
involvedObject.name=j12``).

Events are best effort, as client-go's recorder makes them: they are sent from
their own thread, so they never slow a launch, and dropped (and counted)
when the queue is full or the server refuses them.
"""
from __future__ import annotations

import json
import logging
import queue
import threading
from datetime import datetime, timezone

log = logging.getLogger("hived.k8s.events")

COMPONENT = "hived"
JOB_API_VERSION, JOB_KIND = "hived.io/v1", "HivedJob"


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventRecorder:
    """Queue Events and send them on one background thread (``raw``: a RawApi)."""

    def __init__(self, raw, *, enabled: bool = True, max_queued: int = 10_000):
        self.raw = raw
        self.enabled = enabled
        self.dropped = 0
        self.sent = 0
        self._q: queue.Queue = queue.Queue(max_queued)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def pod(self, ns: str, name: str, reason: str, message: str, warning: bool = False) -> None:
        self._record(ns, {"kind": "Pod", "apiVersion": "v1", "name": name, "namespace": ns},
                     reason, message, warning)

    def job(self, ns: str, job_id: str, reason: str, message: str, warning: bool = False) -> None:
        self._record(ns, {"kind": JOB_KIND, "apiVersion": JOB_API_VERSION, "name": job_id, "namespace": ns},
                     reason, message, warning)

    def _record(self, ns: str, obj: dict, reason: str, message: str, warning: bool) -> None:
        if not self.enabled:
            return
        now = _now()
        body = {"apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{obj['name']}.", "namespace": ns},
                "involvedObject": obj, "reason": reason, "message": message[:1024],
                "type": "Warning" if warning else "Normal", "source": {"component": COMPONENT},
                "firstTimestamp": now, "lastTimestamp": now, "count": 1,
                "reportingComponent": COMPONENT, "reportingInstance": COMPONENT}
        try:
            self._q.put_nowait((ns, body))
        except queue.Full:
            self.dropped += 1
            return
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="hived-k8s-events", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                ns, body = self._q.get(timeout=5)
            except queue.Empty:
                return          # idle: the thread ends, the next Event starts another
            try:
                self.raw.create_event(ns, json.dumps(body, separators=(",", ":")).encode())
                self.sent += 1
            except Exception as e:   # best effort: an Event must never fail what it reports
                self.dropped += 1
                status = getattr(e, "status", None)
                if status == 404 and b"the server could not find the requested resource" in (
                        getattr(e, "body", b"") or b""):
                    self.enabled = False     # this API server serves no Events
                log.info("event %s on %s not recorded: %s", body["reason"], body["involvedObject"]["name"], e)
            finally:
                self._q.task_done()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued Event was sent or dropped (tests)."""
        q = self._q
        with q.all_tasks_done:
            return q.all_tasks_done.wait_for(lambda: not q.unfinished_tasks, timeout)
