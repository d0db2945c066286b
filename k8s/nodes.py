"""Node health from the cluster: Ready and schedulable, as hivedscheduler decides it.

hivedscheduler's bad-node rule: a node is healthy when its ``Ready`` condition
is ``True`` *and* it is not cordoned (``spec.unschedulable``). Anything else
(NotReady, Unknown, no Ready condition at all, cordoned, or the Node object
missing) makes every cell on it unhealthy. The allocator then prefers other
cells and, when it has no choice, binds the bad cell so the VC sees it.

``NodeHealth`` watches Node objects and reports *changes* of health for the
nodes the spec knows. It is a health monitor in the service's sense
(``start()`` + ``poll()``), so ``SchedulerService(..., health=NodeHealth(...))``
applies the changes through ``Engine.set_health(node, None, healthy)`` each
tick: the allocator stops binding the node's cells and moves the jobs on them.
"""
from __future__ import annotations

import threading
from typing import Callable, Iterable, Optional

from .watch import ListWatch


def node_healthy(node: Optional[dict]) -> bool:
    if not node:
        return False
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


def node_reason(node: Optional[dict]) -> str:
    """Why a node is unhealthy (for logs and the cluster view); "" when healthy."""
    if not node:
        return "no Node object"
    if (node.get("spec") or {}).get("unschedulable"):
        return "cordoned (spec.unschedulable)"
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return "" if c.get("status") == "True" else f"Ready={c.get('status')} ({c.get('reason') or 'no reason'})"
    return "no Ready condition"


class NodeHealth:
    """Tracks the health of ``nodes`` (the spec's node names) from a Node watch.

    ``changes()`` drains ``[(node, healthy)]`` since the last call, starting
    with the full state of every spec node after the first list (a node the
    cluster does not have is unhealthy). ``on_change`` is called at once too.
    """

    def __init__(self, core_v1, nodes: Iterable[str], *, on_change: Optional[Callable[[str, bool], None]] = None,
                 timeout_seconds: int = 5):
        self.nodes = set(nodes)
        self.on_change = on_change
        self.health: dict[str, bool] = {}
        self.reasons: dict[str, str] = {}
        self._pending: list[tuple[str, bool]] = []
        self._lock = threading.Lock()
        self.watch = ListWatch(lambda **k: core_v1.list_node(**k), self._handle, name="node",
                               timeout_seconds=timeout_seconds)

    def _set(self, name: str, node: Optional[dict]) -> None:
        if name not in self.nodes:
            return
        ok = node_healthy(node)
        with self._lock:
            self.reasons[name] = node_reason(node)
            if self.health.get(name) == ok:
                return
            self.health[name] = ok
            self._pending.append((name, ok))
        if self.on_change:
            self.on_change(name, ok)

    def _handle(self, kind: str, node: dict) -> None:
        name = (node.get("metadata") or {}).get("name", "")
        self._set(name, None if kind == "DELETED" else node)

    def start(self) -> "NodeHealth":
        self.watch.start()
        seen = {(n.get("metadata") or {}).get("name") for n in self.watch.snapshot()}
        for name in sorted(self.nodes - seen):
            self._set(name, None)
        return self

    def stop(self) -> None:
        self.watch.stop()

    def poll(self) -> list[tuple[str, None, bool, str]]:
        """The service's health-monitor interface (``SchedulerService(health=...)``):
        ``[(node, None, healthy, reason)]``; ``None`` = every GPU of the node."""
        out = self.changes()
        with self._lock:
            return [(n, None, ok, self.reasons.get(n, "")) for n, ok in out]

    def changes(self) -> list[tuple[str, bool]]:
        with self._lock:
            out, self._pending = self._pending, []
        return out

    def unhealthy(self) -> dict[str, str]:
        with self._lock:
            return {n: self.reasons.get(n, "") for n, ok in self.health.items() if not ok}
