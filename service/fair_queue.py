"""Submissions take turns by VC in front of the service's lock.

A submission holds the service's lock for its checks and its commit; a team that floods
the service keeps several submissions waiting for it at once. Waiting on the lock itself
is first come, first served, so another team's submission would wait behind all of them.
The gate lets one submission at a time on to the lock, taking the VCs with submissions
waiting in turn (round robin) and each VC's submissions in the order they came: another
team's submission waits for at most one of the flooding team's, whatever its number.
Scheduling rounds and reads take the lock as before (they are not submissions).
"""
from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Iterator


class FairGate:
    """One holder at a time; the next is taken from the VCs waiting, in turn."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queues: dict[str, deque[object]] = {}   # VC -> its waiting submissions, first come first
        self._turns: deque[str] = deque()              # the VCs with submissions waiting, in turn
        self._holder: object | None = None
        self._holder_vc: str | None = None

    @property
    def busy(self) -> bool:
        """A submission holds the gate."""
        with self._cond:
            return self._holder is not None

    @property
    def waiting(self) -> int:
        with self._cond:
            return sum(len(q) for q in self._queues.values())

    @contextlib.contextmanager
    def turn(self, vc: str) -> Iterator[None]:
        me = object()
        with self._cond:
            if self._holder is None and not self._turns:
                self._holder, self._holder_vc = me, vc
            else:
                queue = self._queues.setdefault(vc, deque())
                if not queue:
                    self._turns.append(vc)
                queue.append(me)
                while self._holder is not me:
                    self._cond.wait()
                self._holder_vc = vc
        try:
            yield
        finally:
            with self._cond:
                self._holder = self._next()
                self._cond.notify_all()

    def _next(self) -> object | None:
        if not self._turns:
            return None
        if len(self._turns) > 1 and self._turns[0] == self._holder_vc:
            self._turns.rotate(-1)   # the VC that just had its turn goes after the others
        vc = self._turns.popleft()
        queue = self._queues[vc]
        nxt = queue.popleft()
        if queue:
            self._turns.append(vc)   # its next one waits for the other VCs' turns
        else:
            del self._queues[vc]
        return nxt
