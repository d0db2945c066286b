"""Pod watch: a list + watch loop with resourceVersion handling, and pod -> job state.

``ListWatch`` (``pod_watch`` for pods) keeps a cache of the pods hived owns (a tiny informer): it lists
them, then watches from the list's resourceVersion, following every event's
resourceVersion and the server's BOOKMARKs. When the server says the version
is gone (410 Expired, e.g. after an API server restart or etcd compaction) it
lists again and turns the difference into synthetic events, so no change is
lost and none is seen twice. Connection errors back off and resume from the
last version seen.

``pod_state`` turns one pod's phase and container states into what hived
cares about: running, succeeded, failed (reason + exit code), OOMKilled,
evicted, node lost. Pods are plain dicts (the JSON the API returns): that is
cheaper than the client's typed models and is all we read.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from kubernetes.client.rest import ApiException

log = logging.getLogger("hived.k8s.watch")

# Pod states (the job-level kinds are in launcher.py).
PENDING, RUNNING, SUCCEEDED, FAILED, OOM_KILLED, EVICTED, NODE_LOST, DELETED = (
    "pending", "running", "succeeded", "failed", "oom_killed", "evicted", "node_lost", "deleted")
TERMINAL = (SUCCEEDED, FAILED, OOM_KILLED, EVICTED, NODE_LOST, DELETED)

# Exit codes for ends that have no container exit code of their own.
EXIT_OOM = 137          # SIGKILL by the kernel's OOM killer (128 + 9)
EXIT_EVICTED = 143      # the kubelet's SIGTERM (128 + 15)
EXIT_NODE_LOST = 255    # nothing came back from the node
EXIT_DELETED = 143      # deleted by someone: SIGTERM after the grace period

_NODE_LOST_REASONS = {"NodeLost", "NodeShutdown", "Shutdown", "Terminated", "UnexpectedAdmissionError"}
_DISRUPTION_NODE = {"DeletionByTaintManager", "DeletionByPodGC", "TerminationByKubelet"}
_DISRUPTION_EVICT = {"EvictionByEvictionAPI", "PreemptionByScheduler"}


@dataclass(frozen=True)
class PodState:
    state: str                    # one of the constants above
    reason: str = ""
    exit_code: int | None = None
    message: str = ""

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL


def _terminated(status: dict) -> dict | None:
    """The first terminated container state (current, else last), if any."""
    for cs in status.get("containerStatuses") or []:
        st = (cs.get("state") or {}).get("terminated")
        if st:
            return st
    for cs in status.get("containerStatuses") or []:
        st = (cs.get("lastState") or {}).get("terminated")
        if st:
            return st
    return None


def _disruption(status: dict) -> str:
    for c in status.get("conditions") or []:
        if c.get("type") == "DisruptionTarget" and c.get("status") == "True":
            return c.get("reason") or ""
    return ""


def pod_state(pod: dict, deleted: bool = False) -> PodState:
    """What one pod's status says about its gang member."""
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    reason = status.get("reason") or ""
    message = status.get("message") or ""
    term = _terminated(status)
    disruption = _disruption(status)
    if reason == "Evicted" or disruption in _DISRUPTION_EVICT:
        return PodState(EVICTED, reason or disruption, (term or {}).get("exitCode", EXIT_EVICTED), message)
    if reason in _NODE_LOST_REASONS or disruption in _DISRUPTION_NODE or phase == "Unknown":
        return PodState(NODE_LOST, reason or disruption or "Unknown",
                        (term or {}).get("exitCode", EXIT_NODE_LOST), message)
    if term and term.get("reason") == "OOMKilled":
        return PodState(OOM_KILLED, "OOMKilled", term.get("exitCode", EXIT_OOM), term.get("message") or message)
    if phase == "Succeeded":
        return PodState(SUCCEEDED, reason or "Completed", 0, message)
    if phase == "Failed":
        code = (term or {}).get("exitCode")
        why = (term or {}).get("reason") or reason or "Error"
        return PodState(FAILED, why, 1 if code is None else int(code), (term or {}).get("message") or message)
    if deleted:
        return PodState(DELETED, "Deleted", EXIT_DELETED, message)
    if phase == "Running":
        return PodState(RUNNING, reason, None, message)
    waiting = ""
    for cs in status.get("containerStatuses") or []:
        waiting = ((cs.get("state") or {}).get("waiting") or {}).get("reason") or waiting
    return PodState(PENDING, waiting or reason, None, message)


def pod_key(pod: dict) -> tuple[str, str]:
    md = pod.get("metadata") or {}
    return md.get("namespace", ""), md.get("name", "")


Handler = Callable[[str, dict], None]    # (ADDED | MODIFIED | DELETED, pod)


class ListWatch:
    """List + watch of one kind of object; ``lister(**kw)`` is the list call.

    ``handler(type, obj)`` runs on the watch thread for every change, and for
    the synthetic changes found by a re-list. ``objects`` is the current cache.
    """

    def __init__(self, lister: Callable, handler: Handler, *, name: str = "objects",
                 timeout_seconds: int = 5, backoff: float = 0.2):
        self.lister = lister
        self.handler = handler
        self.name = name
        self.timeout_seconds = timeout_seconds
        self.backoff = backoff
        self.pods: dict[tuple[str, str], dict] = {}
        self.resource_version: str | None = None
        self.relists = 0            # how many times the watch had to list again (410 etc.)
        self.listed_at = float("-inf")   # monotonic time of the last full list
        self.synced = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._resp = None
        self._lock = threading.Lock()

    # -- API calls -------------------------------------------------------
    def _call(self, **kw):
        return self.lister(_preload_content=False, **kw)

    def list_now(self) -> tuple[list[dict], str]:
        """One consistent list: (pods, resourceVersion)."""
        resp = self._call()
        try:
            body = json.loads(resp.read())
        finally:
            resp.release_conn()
        return body.get("items") or [], body["metadata"]["resourceVersion"]

    # -- cache -----------------------------------------------------------
    def relist(self) -> None:
        """List, diff against the cache, emit the difference, reset the version."""
        items, rv = self.list_now()
        fresh = {pod_key(p): p for p in items}
        with self._lock:
            old = self.pods
            self.pods = fresh
            self.resource_version = rv
            self.relists += 1
            self.listed_at = time.monotonic()
        for key, pod in old.items():
            if key not in fresh:
                self._emit("DELETED", pod)
        for key, pod in fresh.items():
            before = old.get(key)
            if before is None:
                self._emit("ADDED", pod)
            elif (before.get("metadata") or {}).get("resourceVersion") != pod["metadata"].get("resourceVersion"):
                self._emit("MODIFIED", pod)
        self.synced.set()

    def _emit(self, kind: str, pod: dict) -> None:
        try:
            self.handler(kind, pod)
        except Exception:  # a bad handler must not kill the watch
            log.exception("%s watch handler failed on %s %s", self.name, kind, pod_key(pod))

    def _apply(self, kind: str, pod: dict) -> None:
        key = pod_key(pod)
        with self._lock:
            if kind == "DELETED":
                self.pods.pop(key, None)
            else:
                self.pods[key] = pod
            self.resource_version = pod["metadata"].get("resourceVersion", self.resource_version)
        self._emit(kind, pod)

    # -- the loop --------------------------------------------------------
    def watch_once(self) -> None:
        """One watch request from the current version until the server closes it."""
        resp = self._call(watch=True, resource_version=self.resource_version, allow_watch_bookmarks=True,
                          timeout_seconds=self.timeout_seconds,
                          _request_timeout=(5, self.timeout_seconds + 10))
        self._resp = resp
        try:
            buf = b""
            for chunk in resp.stream(65536, decode_content=False):
                if self._stop.is_set():
                    return
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        self._line(json.loads(line))
        finally:
            self._resp = None
            resp.release_conn()

    def _line(self, ev: dict) -> None:
        kind, obj = ev.get("type"), ev.get("object") or {}
        if kind == "ERROR":
            code = obj.get("code")
            if code == 410:
                raise _Expired(obj.get("message", "resource version expired"))
            raise ApiException(status=code, reason=f"{obj.get('reason')}: {obj.get('message')}")
        if kind == "BOOKMARK":
            self.resource_version = (obj.get("metadata") or {}).get("resourceVersion", self.resource_version)
            return
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            self._apply(kind, obj)

    def run(self) -> None:
        delay = self.backoff
        while not self._stop.is_set():
            try:
                if self.resource_version is None:
                    self.relist()
                self.watch_once()
                delay = self.backoff
            except _Expired as e:
                log.info("%s watch: %s; listing again", self.name, e)
                self.resource_version = None
            except ApiException as e:
                if e.status == 410:
                    log.info("%s watch: 410 Gone; listing again", self.name)
                    self.resource_version = None
                    continue
                log.warning("%s watch: API error %s %s; retrying in %.1fs", self.name, e.status, e.reason, delay)
                self._stop.wait(delay)
                delay = min(delay * 2, 5.0)
            except Exception as e:  # connection refused/reset: the API server restarts
                if self._stop.is_set():
                    return
                log.warning("%s watch: %s; retrying in %.1fs", self.name, e.__class__.__name__, delay)
                self._stop.wait(delay)
                delay = min(delay * 2, 5.0)

    def start(self) -> ListWatch:
        if self._thread is not None and self._thread.is_alive():
            return self     # already running (the launcher and the service may both start it)
        self._stop.clear()
        if self.resource_version is None:
            self.relist()   # synchronous first list: callers see a synced cache at once
        self._thread = threading.Thread(target=self.run, name=f"hived-{self.name}-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        resp = self._resp
        if resp is not None:
            try:
                resp.shutdown() if hasattr(resp, "shutdown") else resp.close()
            except Exception:
                pass
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_seconds + 2)

    def snapshot(self) -> list[dict]:
        with self._lock:
            return list(self.pods.values())


def pod_watch(core_v1, label_selector: str, handler: Handler, *, namespace: str | None = None,
              **kw) -> ListWatch:
    """A ListWatch over the pods matching ``label_selector`` in ``namespace`` (None = all)."""
    if namespace:
        def lister(**k):
            return core_v1.list_namespaced_pod(namespace, label_selector=label_selector, **k)
    else:
        def lister(**k):
            return core_v1.list_pod_for_all_namespaces(label_selector=label_selector, **k)
    return ListWatch(lister, handler, name="pod", **kw)


class _Expired(Exception):
    """The watch's resourceVersion is too old (HTTP 410 as a watch ERROR event)."""


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0, step: float = 0.02) -> bool:
    """Poll ``predicate`` until true or ``timeout``; used by callers that need the watch to catch up."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(step)
    return predicate()
