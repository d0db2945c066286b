"""Being told at once when a pod's runner process ends, instead of finding out at the next poll.

Linux pidfds (``os.pidfd_open``, kernel 5.3+) become readable when their
process ends, whether it is our child or a runner adopted after a restart, and
without reaping it (``Popen.poll`` still gets its exit status). One thread
waits on all of them and calls ``notify`` after each wake that saw an exit.
Where pidfds are missing, ``watch`` returns False and the launcher's periodic
poll is what notices the exit.
"""
from __future__ import annotations

import logging
import os
import selectors
import threading
from collections.abc import Callable

log = logging.getLogger("hived.local_launcher")


class ExitWatcher:
    """Calls ``notify()`` (from its own thread) soon after a watched process ends."""

    def __init__(self, notify: Callable[[], None]) -> None:
        self._notify = notify
        self._lock = threading.Lock()
        self._new: list[int] = []            # pidfds not yet in the selector
        self._thread: threading.Thread | None = None
        self._sel: selectors.BaseSelector | None = None
        self._wake_r = self._wake_w = -1
        self._closed = False

    def watch(self, pid: int) -> bool:
        """Watch ``pid``; False when this system cannot (the caller's poll will see it end)."""
        opener = getattr(os, "pidfd_open", None)
        if opener is None:
            return False
        try:
            fd = opener(pid)
        except ProcessLookupError:   # already gone: that is news now
            self._notify()
            return True
        except OSError:
            return False
        with self._lock:
            if self._closed:
                os.close(fd)
                return False
            self._new.append(fd)
            self._ensure_thread()
            self._wake()        # under the lock: close() cannot have shut the pipe meanwhile
        return True

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"\0")
        except BlockingIOError:     # the pipe is full of wakes already: the thread will look
            pass

    def _ensure_thread(self) -> None:
        if self._thread is None:
            self._sel = selectors.DefaultSelector()
            self._wake_r, self._wake_w = os.pipe()
            os.set_blocking(self._wake_r, False)
            os.set_blocking(self._wake_w, False)
            self._sel.register(self._wake_r, selectors.EVENT_READ, None)
            self._thread = threading.Thread(target=self._run, name="hived-exits", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        sel = self._sel
        assert sel is not None
        while True:
            ended = False
            for key, _ in sel.select():
                if key.data is None:          # new pidfds, or close()
                    try:
                        os.read(self._wake_r, 4096)
                    except BlockingIOError:
                        pass
                    with self._lock:
                        if self._closed:
                            self._shut(sel)
                            return
                        new, self._new = self._new, []
                    for fd in new:
                        sel.register(fd, selectors.EVENT_READ, fd)
                else:                         # a process ended: its pidfd is done
                    sel.unregister(key.fd)
                    os.close(key.fd)
                    ended = True
            if ended:
                try:
                    self._notify()
                except Exception:   # the watcher must outlive a failing listener
                    log.exception("exit notification failed")

    def _shut(self, sel: selectors.BaseSelector) -> None:
        for key in list(sel.get_map().values()):
            sel.unregister(key.fd)
            os.close(key.fd)
        sel.close()
        os.close(self._wake_w)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for fd in self._new:
                os.close(fd)
            self._new = []
            started = self._thread is not None
            if started:
                self._wake()
        if started:
            assert self._thread is not None
            self._thread.join(5)
