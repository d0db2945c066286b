"""What a user sees while their kernel's job queues.

A kernel start that has to wait is no error, but the user should not stare at a
"starting" kernel without knowing why. Once per change of the job's queue position or
wait reason, the provisioner's ``QueueNotice``

- logs one line at WARNING, the level Jupyter's own tools show by default (``jupyter
  console``, ``jupyter execute``, nbclient, the Jupyter server's log), not only to the
  server's log at INFO;
- and, inside a Jupyter server, emits it as an event of its own schema
  (``KERNEL_QUEUE_EVENT``) on the server's event bus, which frontends read from
  ``/api/events/subscribe`` (the websocket JupyterLab's event manager listens to; the server
  extension ``hived.kernels`` registers the schema when the server starts).

The same line ends the error of a start that waited past ``start_timeout``, so the
error dialog says where the job stood when it was cancelled.
"""
from __future__ import annotations

import logging
from typing import Any

KERNEL_QUEUE_EVENT = "https://events.hived.dev/kernels/kernel_queue/v1"

EVENT_SCHEMA: dict[str, Any] = {
    "$id": KERNEL_QUEUE_EVENT,
    "version": "1",
    "title": "hived kernel queueing",
    "personal-data": True,
    "description": "A hived kernel's job waits in its VC's queue: where it stands and why.",
    "type": "object",
    "required": ["kernel_id", "job_id", "vc", "state", "msg"],
    "properties": {
        "kernel_id": {"type": "string", "description": "the Jupyter kernel id"},
        "job_id": {"type": "string", "description": "the kernel's hived job"},
        "vc": {"type": "string", "description": "the VC it queues in"},
        "state": {"type": "string", "description": "the job's state (queued, placed)"},
        "queue_position": {"type": ["integer", "null"], "description": "1 = next in its VC; null: not ranked"},
        "wait_reason": {"type": "string", "description": "why it waits, as `hived jobs` says it"},
        "msg": {"type": "string", "description": "the line the user reads"},
    },
}


class QueueNotice:
    """Tells the user, once per change, where a kernel's job stands in its VC's queue."""

    def __init__(self, kernel_id: str, job_id: str, vc: str,
                 log: logging.Logger | logging.LoggerAdapter, manager: Any = None):
        self.kernel_id, self.job_id, self.vc, self.log = kernel_id, job_id, vc, log
        self._bus = _event_bus(manager)
        self._seen: tuple = ()
        self.line = ""
        self.shown = 0

    def update(self, job: dict) -> None:
        state = job.get("state") or "queued"
        index = job.get("queue_position")
        position = None if index is None else int(index) + 1
        reason = job.get("wait_reason") or "waiting for a scheduling round"
        if (state, position, reason) == self._seen:
            return
        self._seen = (state, position, reason)
        where = "" if position is None else f" at position {position}"
        self.line = f"hived: kernel job {self.job_id} {state}{where} in VC {self.vc}: {reason}"
        self.shown += 1
        self.log.warning("%s", self.line)
        if self._bus is not None:
            self._bus.emit(schema_id=KERNEL_QUEUE_EVENT, data={
                "kernel_id": self.kernel_id, "job_id": self.job_id, "vc": self.vc, "state": state,
                "queue_position": position, "wait_reason": reason, "msg": self.line})


def _event_bus(manager: Any) -> Any:
    """The Jupyter server's event logger of the kernel's manager, with hived's schema registered;
    None outside a Jupyter server (a bare jupyter_client KernelManager has none)."""
    bus = getattr(manager, "event_logger", None)
    if bus is None or not hasattr(bus, "register_event_schema"):
        return None
    register_schema(bus)
    return bus


def register_schema(bus: Any) -> None:
    """Registers ``EVENT_SCHEMA`` once. A subscriber of the server's events hears only the schemas
    registered when it subscribed: the server extension ``hived.kernels`` registers it at start."""
    if KERNEL_QUEUE_EVENT not in bus.schemas.schema_ids:
        bus.register_event_schema(EVENT_SCHEMA)
