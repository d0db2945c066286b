"""A launcher that runs nothing: for fuzzing the API, where generated
commands must never be executed. Jobs it is asked to launch start at once
and stay running until terminated (then they exit with code -15)."""
from __future__ import annotations

from hived.jupyter_ext.service.launcher import LauncherEvent


class NullLauncher:
    def __init__(self):
        self._events: list[LauncherEvent] = []

    def launch(self, job_id, request, placement, attempt):
        self._events.append(LauncherEvent(job_id, "started", attempt=attempt))

    def terminate(self, job_id, grace_period):
        self._events.append(LauncherEvent(job_id, "exited", exit_code=-15))

    def poll(self):
        events, self._events = self._events, []
        return events

    def adopt(self, job_id, placement):
        return False

    def logs(self, job_id, rank=0, offset=0):
        return "", offset
