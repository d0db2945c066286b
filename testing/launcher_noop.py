"""A launcher that runs nothing, for exercising the service without real processes.

Fuzzing the REST API must never execute the generated commands, and the
service and REST benchmarks time the store, the engine and the API, not
process start-up. ``hived serve --launcher hived.testing.launcher_noop.NoopLauncher``
uses it too, as a dry run of a spec.
"""
from __future__ import annotations

from hived.service.launcher import LauncherEvent


class NoopLauncher:
    """Every launch is reported started at the next poll; a termination as exit -15.

    ``finish_at_once``: also report exit 0 right after the start, so queues
    keep draining at the scheduler's pace. ``adopt``: what a restarted service
    hears when it asks whether a running job is still alive.
    """

    def __init__(self, finish_at_once: bool = False, adopt: bool = False):
        self.finish_at_once, self._adopt = finish_at_once, adopt
        self._events: list[LauncherEvent] = []

    def launch(self, job_id, request, placement, attempt):
        self._events.append(LauncherEvent(job_id, "started", attempt=attempt))
        if self.finish_at_once:
            self._events.append(LauncherEvent(job_id, "exited", exit_code=0, attempt=attempt))

    def terminate(self, job_id, grace_period):
        self._events.append(LauncherEvent(job_id, "exited", exit_code=-15))

    def poll(self):
        events, self._events = self._events, []
        return events

    def adopt(self, job_id, placement):
        return self._adopt

    def logs(self, job_id, rank=0, offset=0):
        return "", offset


class InstantLauncher(NoopLauncher):
    """A NoopLauncher whose jobs finish as soon as they start (constructible by import path)."""

    def __init__(self):
        super().__init__(finish_at_once=True)
