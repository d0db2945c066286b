"""Names -> classes for intra-VC queue policies and preemption policies.

Modules are imported only when their name is asked for, so the engine does
not pay for (or depend on) policies it does not use. "none" means no
preemption policy: TE jobs then wait instead of preempting BE jobs.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..engine_records import JobRecord
    from ..engine_view import ClusterView
    from .preemption_order import PreemptionPolicy


class QueuePolicy(Protocol):
    """Orders a VC's queued jobs for one scheduling round."""

    def order(self, vc: str, queued: list[JobRecord], view: ClusterView, now: float) -> list[JobRecord]: ...


# "module:Class"; None: no policy
QUEUE_POLICIES: dict[str, str | None] = {
    "fifo": "hived.core.policies.fifo:FifoPolicy",
    "allox": "hived.core.policies.allox:AlloXPolicy",
}
PREEMPTION_POLICIES: dict[str, str | None] = {
    "fitgpp": "hived.core.policies.fitgpp:FitGppPolicy",
    "lrtp": "hived.core.policies.lrtp:LRTPPolicy",
    "rand": "hived.core.policies.rand:RandPolicy",
    "none": None,
}


def _load(table: dict[str, str | None], kind: str, name: str) -> Any:
    if name not in table:
        raise ValueError(f"{kind}: unknown policy {name!r}; known: {', '.join(sorted(table))}")
    target = table[name]
    if target is None:
        return None
    module, _, attr = target.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"{kind}: policy {name!r} is registered as {target} but cannot be loaded: {e}") from None


def queue_policy_class(name: str) -> type[QueuePolicy]:
    cls: type[QueuePolicy] = _load(QUEUE_POLICIES, "queue_policy", name)
    return cls


def preemption_policy_class(name: str) -> type[PreemptionPolicy] | None:
    cls: type[PreemptionPolicy] | None = _load(PREEMPTION_POLICIES, "preemption_policy", name)
    return cls


def make_queue_policy(spec: Any, **kwargs: Any) -> QueuePolicy:
    """A policy object from a name (instantiated with ``kwargs``) or an object with ``order``."""
    if isinstance(spec, str):
        return queue_policy_class(spec)(**kwargs)
    if not hasattr(spec, "order"):
        raise ValueError(f"queue_policy: {spec!r} has no order(vc, queued, view, now) method")
    policy: QueuePolicy = spec
    return policy


def vc_queue_policies(spec: Any, default: QueuePolicy) -> dict[str, QueuePolicy]:
    """Each VC's queue policy: its spec's ``queuePolicy`` (one object per name, shared by the
    VCs that name it), else ``default``."""
    made: dict[str, QueuePolicy] = {}
    name = getattr(default, "name", None)
    if isinstance(name, str):
        made[name] = default
    out: dict[str, QueuePolicy] = {}
    for vc, vs in spec.vcs.items():
        wanted = getattr(vs, "queue_policy", None)
        if wanted is None:
            out[vc] = default
            continue
        if wanted not in made:
            made[wanted] = make_queue_policy(wanted)
        out[vc] = made[wanted]
    return out


def make_preemption_policy(spec: Any, **kwargs: Any) -> PreemptionPolicy | None:
    """A policy object, or None for "none"/None."""
    if spec is None:
        return None
    if isinstance(spec, str):
        cls = preemption_policy_class(spec)
        return None if cls is None else cls(**kwargs)
    if not hasattr(spec, "choose"):
        raise ValueError(f"preemption_policy: {spec!r} has no choose(job, candidates, view, now) method")
    policy: PreemptionPolicy = spec
    return policy


def register(kind: str, name: str, target: str) -> None:
    """Add a policy ("queue" or "preemption") as "module:Class"."""
    table = {"queue": QUEUE_POLICIES, "preemption": PREEMPTION_POLICIES}.get(kind)
    if table is None:
        raise ValueError(f"kind: must be 'queue' or 'preemption', got {kind!r}")
    table[name] = target
