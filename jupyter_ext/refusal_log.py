"""Refusals for a limit (HTTP 429) in the server's log: one line per user and interval, not one per request.

A user flooding the API over their rate gets hundreds of 429s a second. Logged one by one (the
request line and the error, at WARNING) they would cost the event loop as much as the refusals
themselves, and bury every other line. So a user's first refusal is logged at once, with its
reason; the ones after it are counted, and at the end of the interval one line says how many there
were and the last reason (then a new interval starts if more came). ``flush`` writes what is
still counted (the server calls it when it stops).

Called on the event loop's thread only (tornado's log hook): no lock.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

INTERVAL_S = 10.0


@dataclass
class _Window:
    count: int   # refusals after the one already logged
    last: str    # the latest one's reason


class RefusalLog:
    """Counts each user's 429s; ``call_later(seconds, fn, *args)`` schedules the interval's end
    (the event loop's, in the server)."""

    def __init__(self, log: logging.Logger, call_later: Callable[..., object], interval: float = INTERVAL_S):
        self.log, self.call_later, self.interval = log, call_later, interval
        self._open: dict[str, _Window] = {}

    def note(self, user: str, request_line: str, reason: str) -> None:
        window = self._open.get(user)
        if window is not None:
            window.count += 1
            window.last = reason
            return
        self.log.warning("hived: 429 %s (user %r): %s; further refusals of this user are counted, one line "
                         "per %g s", request_line, user, reason, self.interval)
        self._open[user] = _Window(0, reason)
        self.call_later(self.interval, self._end, user)

    def _end(self, user: str) -> None:
        window = self._open.pop(user, None)
        if window is None or not window.count:
            return   # no more refusals: the next one is logged at once
        self._write(user, window)
        self._open[user] = _Window(0, window.last)   # still refused: keep counting
        self.call_later(self.interval, self._end, user)

    def _write(self, user: str, window: _Window) -> None:
        self.log.warning("hived: %d more request(s) of user %r refused (429) since the last line; the last: %s",
                         window.count, user, window.last)

    def flush(self) -> None:
        """Write the counts still open (at shutdown)."""
        for user, window in self._open.items():
            if window.count:
                self._write(user, window)
        self._open.clear()
