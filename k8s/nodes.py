"""Node health from the cluster, as Kubernetes itself treats a node.

A node's state, for hived, is one of:

- ``ok``: Ready and schedulable;
- ``cordoned``: no new gangs go there, the gangs running there stay. This is
  what ``kubectl cordon`` (``spec.unschedulable``) means in Kubernetes, and
  also what a node that is NotReady (or Unknown, or whose Node object is
  missing) means while it is inside its *toleration*: a kubelet that misses a
  few heartbeats, or a node that restarts its kubelet, must not cost a running
  gang its work;
- ``lost``: NotReady (or Unknown, or no Node object) for longer than the
  toleration (``notready_toleration`` seconds, 60 by default; Kubernetes'
  own ``not-ready`` taint toleration is 300 s). Its cells are unhealthy and
  the gangs there are moved, as hivedscheduler moves them off a bad node.

``NodeHealth`` watches Node objects and reports *changes* of that state for
the nodes the spec knows, and of each node's allocatable CPU and memory
(``poll_capacity()``: what the kubelet admits, which placement must
respect). ``poll_states()`` gives ``[(node, state, reason)]``
(what KubernetesSchedulerService applies: cordoned -> no new placements,
lost -> move); ``poll()`` is the generic health-monitor form
``[(node, None, healthy, reason)]`` with healthy = not lost, so a plain
``SchedulerService`` never moves a gang because of a cordon.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

from .watch import ListWatch

OK, CORDONED, LOST = "ok", "cordoned", "lost"


def node_healthy(node: dict | None) -> bool:
    """Whether new pods may go to ``node``: Ready and not cordoned."""
    if not node:
        return False
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


def node_reason(node: dict | None) -> str:
    """Why a node is unhealthy (for logs and the cluster view); "" when healthy."""
    if not node:
        return "no Node object"
    if (node.get("spec") or {}).get("unschedulable"):
        return "cordoned (spec.unschedulable)"
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return "" if c.get("status") == "True" else f"Ready={c.get('status')} ({c.get('reason') or 'no reason'})"
    return "no Ready condition"


def node_allocatable(node: dict | None) -> tuple[float, float] | None:
    """(CPUs, memory in GB) the node's kubelet admits pods for; None when it does not say."""
    from kubernetes.utils.quantity import parse_quantity
    alloc = ((node or {}).get("status") or {}).get("allocatable") or {}
    try:
        cpus = float(parse_quantity(alloc["cpu"]))
        mem = float(parse_quantity(alloc["memory"])) / 2 ** 30
    except (KeyError, ValueError, TypeError):
        return None
    return cpus, mem


def node_ready(node: dict | None) -> bool:
    """The kubelet reports Ready (a cordon does not change that)."""
    for c in ((node or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


class NodeHealth:
    """Tracks the state (ok / cordoned / lost) of ``nodes`` (the spec's node names) from a Node watch.

    The first poll after ``start()`` reports every spec node; later ones report changes.
    ``clock`` (monotonic seconds) is what the toleration is measured on.
    """

    def __init__(self, core_v1, nodes: Iterable[str], *, on_change: Callable[[str, bool], None] | None = None,
                 timeout_seconds: int = 5, notready_toleration: float = 60.0,
                 clock: Callable[[], float] = time.monotonic):
        if notready_toleration < 0:
            raise ValueError(f"notready_toleration: must be >= 0 seconds, got {notready_toleration!r}")
        self.nodes = set(nodes)
        self.on_change = on_change
        self.toleration = float(notready_toleration)
        self.clock = clock
        self.state: dict[str, str] = {}         # node -> what was last reported
        self.reasons: dict[str, str] = {}
        self._seen: dict[str, dict | None] = {}
        self._notready_since: dict[str, float] = {}
        self._pending: dict[str, None] = {}     # nodes to re-evaluate (ordered)
        self._reported: dict[str, bool] = {}    # poll(): healthy as last reported
        self.allocatable: dict[str, tuple[float, float]] = {}
        self._cap_pending: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()
        self.watch = ListWatch(lambda **k: core_v1.list_node(**k), self._handle, name="node",
                               timeout_seconds=timeout_seconds)

    @property
    def health(self) -> dict[str, bool]:
        with self._lock:
            return {n: s != LOST for n, s in self.state.items()}

    def ready(self, name: str) -> bool | None:
        """Whether node ``name``'s kubelet reports Ready now (False: NotReady, unknown or no Node
        object); None for a node this watch does not follow or has not listed yet."""
        with self._lock:
            if name not in self.nodes or name not in self._seen:
                return None
            return node_ready(self._seen[name])

    def _set(self, name: str, node: dict | None) -> None:
        if name not in self.nodes:
            return
        cap = node_allocatable(node)
        with self._lock:
            self._seen[name] = node
            if cap is not None and self.allocatable.get(name) != cap:
                self.allocatable[name] = cap
                self._cap_pending[name] = cap
            if node_ready(node):
                self._notready_since.pop(name, None)
            else:
                self._notready_since.setdefault(name, self.clock())
            self._pending[name] = None

    def _handle(self, kind: str, node: dict) -> None:
        name = (node.get("metadata") or {}).get("name", "")
        self._set(name, None if kind == "DELETED" else node)

    def start(self) -> NodeHealth:
        self.watch.start()
        seen = {(n.get("metadata") or {}).get("name") for n in self.watch.snapshot()}
        for name in sorted(self.nodes - seen):
            self._set(name, None)
        return self

    def stop(self) -> None:
        self.watch.stop()

    def _evaluate(self, name: str, now: float) -> tuple[str, str, str] | None:
        """(node, state, reason) when the node's state changed (lock held)."""
        node = self._seen.get(name)
        since = self._notready_since.get(name)
        reason = node_reason(node)
        if since is None:
            state = CORDONED if reason else OK
        elif now - since >= self.toleration:
            state, reason = LOST, f"{_not_ready_reason(node)} for more than {self.toleration:g}s"
        else:
            state = CORDONED
            reason = f"{_not_ready_reason(node)} (within its {self.toleration:g}s toleration)"
        self.reasons[name] = reason
        if self.state.get(name) == state:
            return None
        self.state[name] = state
        return name, state, reason

    def poll_states(self) -> list[tuple[str, str, str]]:
        """State changes since the last call: ``[(node, ok | cordoned | lost, reason)]``."""
        now = self.clock()
        out = []
        with self._lock:
            # nodes whose toleration ran out since the last poll change without any event
            for name, since in self._notready_since.items():
                if now - since >= self.toleration and self.state.get(name) != LOST:
                    self._pending[name] = None
            names, self._pending = list(self._pending), {}
            for name in names:
                ch = self._evaluate(name, now)
                if ch is not None:
                    out.append(ch)
        if self.on_change:
            for name, state, _ in out:
                self.on_change(name, state != LOST)
        return out

    def poll_capacity(self) -> list[tuple[str, float, float]]:
        """Allocatable changes since the last call: ``[(node, cpus, memory_gb)]``."""
        with self._lock:
            out, self._cap_pending = self._cap_pending, {}
        return [(n, c, m) for n, (c, m) in out.items()]

    def poll(self) -> list[tuple[str, None, bool, str]]:
        """The generic health-monitor interface: ``[(node, None, healthy, reason)]``, healthy = not lost
        (a cordoned node keeps its gangs; only KubernetesSchedulerService also stops placing there)."""
        out: list[tuple[str, None, bool, str]] = []
        last: dict[str, bool] = {}
        for name, state, reason in self.poll_states():
            healthy = state != LOST
            if last.get(name, self._reported.get(name)) == healthy:
                continue
            last[name] = healthy
            out.append((name, None, healthy, reason))
        self._reported.update(last)
        return out

    def changes(self) -> list[tuple[str, bool]]:
        return [(n, ok) for n, _, ok, _ in self.poll()]

    def unhealthy(self) -> dict[str, str]:
        """Nodes that are not ``ok`` (cordoned or lost), with the reason."""
        with self._lock:
            return {n: self.reasons.get(n, "") for n, s in self.state.items() if s != OK}


def _not_ready_reason(node: dict | None) -> str:
    if not node:
        return "no Node object"
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return f"Ready={c.get('status')} ({c.get('reason') or 'no reason'})"
    return "no Ready condition"
