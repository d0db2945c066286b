"""The simulated launcher: a job ends ``remaining`` seconds after it starts.

It keeps one heap of future exits. ``launch`` schedules the natural end of a
run; ``terminate`` schedules the end of a preempted run when its grace
period is over (the process obeys SIGTERM at the last moment, the worst
case). Each exit carries the run's token (the job's attempt number) so that
an exit of an older run, overtaken by a preemption or a restart, is
recognised as stale and dropped.
"""
from __future__ import annotations

import heapq
import itertools


class SimLauncher:
    FINISHED = "finished"
    PREEMPTED = "preempted"

    def __init__(self) -> None:
        # (time, tie-break, FINISHED or PREEMPTED, job id, token)
        self._heap: list[tuple[float, int, str, str, int]] = []
        self._seq = itertools.count()
        self.running: dict[str, int] = {}   # job id -> token of its current run

    def launch(self, job_id: str, now: float, remaining: float, token: int) -> None:
        self.running[job_id] = token
        heapq.heappush(self._heap, (now + max(0.0, remaining), next(self._seq), self.FINISHED, job_id, token))

    def terminate(self, job_id: str, now: float, grace_period: float) -> None:
        token = self.running.get(job_id)
        if token is None:
            token = -1  # placed but never launched: gone at once
        heapq.heappush(self._heap, (now + max(0.0, grace_period), next(self._seq), self.PREEMPTED, job_id, token))

    def next_time(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def due(self, now: float) -> list[tuple[str, str]]:
        """(kind, job id) of every exit at or before ``now``, stale ones dropped."""
        out = []
        while self._heap and self._heap[0][0] <= now:
            _, _, kind, jid, token = heapq.heappop(self._heap)
            if self.running.get(jid, -1) != token:
                continue
            self.running.pop(jid, None)
            out.append((kind, jid))
        return out
