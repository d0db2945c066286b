"""Finished pods are deleted a while after they end, as a Job's ``ttlSecondsAfterFinished`` does.

Without it every pod hived ever ran stays in etcd: each list and each restart
reads more, and a namespace's pod quota fills up. ``FinishedPods`` looks at
the launcher's pod cache and deletes the pods that have ended (Succeeded or
Failed) and belong to no gang hived still tracks, ``ttl`` seconds after it
first saw them ended (hived's own clock: a pod's timestamps come from the
kubelet's). Logs of a collected pod are gone with it: keep the TTL longer than
users read logs after a job ends.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from .watch import pod_key, pod_state

log = logging.getLogger("hived.k8s.gc")


class FinishedPods:
    """``collect(pods, tracked, now)`` picks what to delete; ``maybe_run`` does it off the caller's thread."""

    def __init__(self, ttl: float, delete: Callable[[str, str], bool], *, every: float = 30.0,
                 clock: Callable[[], float] = time.monotonic):
        if not ttl > 0:
            raise ValueError(f"finished pod TTL: must be > 0 seconds, got {ttl!r}")
        self.ttl = float(ttl)
        self.every = float(every)
        self.delete = delete          # (namespace, name) -> True once deleted (or already gone)
        self.clock = clock
        self.collected = 0
        self._ended_at: dict[tuple[str, str], float] = {}
        self._last = float("-inf")
        self._thread: threading.Thread | None = None

    def due(self, pods: Iterable[dict], tracked: Callable[[dict], bool], now: float) -> list[tuple[str, str]]:
        """The (namespace, name) of ended, untracked pods seen ended for ``ttl`` seconds."""
        seen, out = set(), []
        for p in pods:
            if (p.get("metadata") or {}).get("deletionTimestamp") or not pod_state(p).terminal or tracked(p):
                continue
            key = pod_key(p)
            seen.add(key)
            first = self._ended_at.setdefault(key, now)
            if now - first >= self.ttl:
                out.append(key)
        for key in [k for k in self._ended_at if k not in seen]:
            del self._ended_at[key]       # gone (or tracked again): forget it
        return out

    def maybe_run(self, pods: Callable[[], list[dict]], tracked: Callable[[dict], bool]) -> None:
        """At most every ``every`` seconds, delete what is due on a background thread."""
        now = self.clock()
        if now - self._last < self.every or (self._thread is not None and self._thread.is_alive()):
            return
        self._last = now
        todo = self.due(pods(), tracked, now)
        if todo:
            self._thread = threading.Thread(target=self._delete_all, args=(todo,), name="hived-k8s-gc",
                                            daemon=True)
            self._thread.start()

    def _delete_all(self, todo: list[tuple[str, str]]) -> None:
        for ns, name in todo:
            if self.delete(ns, name):
                self.collected += 1
                self._ended_at.pop((ns, name), None)
        log.info("collected %d finished pod(s) older than %.0fs", len(todo), self.ttl)

    def join(self, timeout: float = 30.0) -> None:
        if self._thread is not None:
            self._thread.join(timeout)
