"""The launcher's side of the loop: launches, kills and polls, never under the service's lock.

A scheduling round decides and commits under the service's lock, then hands
the launcher actions it decided to this queue, in decision order. One worker
thread carries them out one at a time, so a job's START (committed first) is
launched before a later kill of the same job reaches the launcher. After each
batch, and whenever the launcher says it has news (``poke``: a pod exited),
the worker polls the launcher; what it saw (started, exited, and a launch that
failed, as an exit with code 127) goes back to the service through
``deliver``, which wakes a round.

Without a worker (a service nobody started: the CLI on a data directory,
tests that step rounds themselves), ``run_pending`` does the same work in the
caller's thread, which must not hold the service's lock.
"""
from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from .launcher import Launcher, LauncherEvent

log = logging.getLogger("hived.service")

Deliver = Callable[[list[LauncherEvent]], None]


class LaunchQueue:
    """Launcher actions in order, run by one worker thread (or inline, see ``run_pending``).

    ``poll_seconds``: how long the worker waits for work before it polls anyway
    (grace periods that end inside the launcher, launchers that cannot poke).
    ``on_error``: told of a launcher call that raised (the service shows the last one).
    """

    def __init__(self, launcher: Launcher, deliver: Deliver, poll_seconds: float,
                 on_error: Callable[[str], None] | None = None) -> None:
        self.launcher = launcher
        self._deliver = deliver
        self._poll_seconds = poll_seconds
        self._on_error = on_error
        self._items: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        # one caller at a time runs the actions: the worker, or run_pending's caller
        self._running_lock = threading.Lock()

    @property
    def running(self) -> bool:
        return self._thread is not None

    # -- what the service asks for -----------------------------------------

    def launch(self, job_id: str, request: Any, placement: Any, attempt: int) -> None:
        self._items.put(("launch", job_id, request, placement, attempt))

    def terminate(self, job_id: str, grace_period: float) -> None:
        self._items.put(("terminate", job_id, grace_period))

    def poke(self) -> None:
        """The launcher has news for ``poll`` (called from any thread)."""
        self._items.put(("poll",))

    # -- the worker ---------------------------------------------------------

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="hived-launcher", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Carry out what is queued, then end the worker."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._items.put(("stop",))
            thread.join(timeout)

    def run_pending(self) -> None:
        """Without a worker: carry out what is queued and poll, in this thread."""
        self._batch([])

    def _run(self) -> None:
        while True:
            try:
                first = self._items.get(timeout=self._poll_seconds)
            except queue.Empty:
                first = ("poll",)
            if not self._batch([first]):
                return

    def _batch(self, items: list[tuple[Any, ...]]) -> bool:
        """Everything queued now, then one poll; False once told to stop."""
        go_on = True
        with self._running_lock:
            while True:
                try:
                    items.append(self._items.get_nowait())
                except queue.Empty:
                    break
            events: list[LauncherEvent] = []
            for item in items:
                if item[0] == "stop":
                    go_on = False
                elif item[0] != "poll":
                    events += self._do(item)
            try:
                events += self.launcher.poll()
            except Exception as exc:  # noqa: BLE001  (a launcher in trouble, API down: polled again later)
                self._error("poll", exc)
        if events:
            self._deliver(events)
        return go_on

    def _do(self, item: tuple[Any, ...]) -> list[LauncherEvent]:
        kind, job_id = item[0], item[1]
        if kind == "launch":
            attempt = item[4]
            try:
                self.launcher.launch(job_id, item[2], item[3], attempt)
            except Exception as exc:  # noqa: BLE001  (cannot start at all: the run fails like a bad command)
                log.error("launch of %s failed: %s", job_id, exc)
                return [LauncherEvent(job_id, "exited", 127, f"hived: launch failed: {exc}", attempt)]
        else:
            try:
                self.launcher.terminate(job_id, item[2])
            except Exception as exc:  # noqa: BLE001  (shown; the job's exit is still awaited)
                self._error(f"terminate {job_id}", exc)
        return []

    def _error(self, what: str, exc: Exception) -> None:
        log.error("launcher %s failed: %s", what, exc)
        if self._on_error is not None:
            self._on_error(f"launcher {what}: {type(exc).__name__}: {exc}")
