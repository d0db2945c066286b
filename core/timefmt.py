"""Times for people: the service's clock is Unix time, the simulator's and the tests' start at 0.

Unix times (past ``EPOCH``) are written as local time with the zone
(``2026-11-27 22:04:05 UTC``); smaller clocks as plain seconds, as the
simulator counts them. Formatting a given time reads no clock.
"""
from __future__ import annotations

from datetime import datetime, timezone

EPOCH = 1e9     # clocks past this are Unix time (the service)


def clock(t: float) -> str:
    """One time for a person."""
    if isinstance(t, bool) or not isinstance(t, (int, float)) or t != t:
        return repr(t)
    if t >= EPOCH:
        return datetime.fromtimestamp(t).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
    return f"{t:g}"


def window(start: float, end: float) -> str:
    """A half-open window ``[start, end)`` for a person."""
    return f"[{clock(start)}, {clock(end)})"


def at(t: float, now: float) -> str:
    """``t`` for a person: the service's clock is Unix time, the simulator's starts at 0."""
    if t >= EPOCH:   # Unix time (the service): a UTC date, not seconds
        when = datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    else:
        when = f"t={t:g}"
    return f"{when} (in {max(0.0, t - now):.0f} s)"
