"""JSON views of the cluster and of VCs for SchedulerService (GET cluster, vcs)."""
from __future__ import annotations

import dataclasses
import enum
from typing import TYPE_CHECKING, Any

from hived.core.jobs import HOLDING, JobState

if TYPE_CHECKING:
    from hived.core.engine import Engine
    from hived.core.engine_records import JobRecord


def jsonable(x: Any) -> Any:
    """Allocator views are dataclasses keyed by tuples: make them plain JSON."""
    if hasattr(x, "to_dict") and callable(x.to_dict):
        return jsonable(x.to_dict())
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: jsonable(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, dict):
        return {("/".join(map(str, k)) if isinstance(k, tuple) else str(k)): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in x]
    if isinstance(x, enum.Enum):
        return x.value
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    return str(x)


def holders(svc) -> dict:
    """(node, gpu) -> job id, for every job holding cells."""
    out: dict[tuple[str, int], str] = {}
    for rec in svc.eng.jobs(states=HOLDING):
        if rec.placement is not None:
            for pod in rec.placement.pods:
                for g in pod.gpus:
                    out.setdefault((pod.node, g), rec.job_id)
    return out


def cluster_dict(svc) -> dict:
    held = holders(svc)
    chains = {}
    for name, chain in svc.spec.chains.items():
        ngpus = chain.gpus_per_level[chain.node_level - 1]
        nodes = {}
        for node in svc.eng.alloc.node_free(name):
            nodes[node] = {"gpus": [{
                "index": g, "holder": held.get((node, g)),
                "healthy": (node, g) not in svc.unhealthy and (node, None) not in svc.unhealthy,
                "problem": svc.unhealthy.get((node, g)) or svc.unhealthy.get((node, None)),
            } for g in range(ngpus)]}
        chains[name] = {"levels": list(chain.levels), "node_level": chain.node_level,
                        "gpus_per_level": list(chain.gpus_per_level), "nodes": nodes,
                        "free_gpus": svc.eng.alloc.free_gpus(name)}
    counts: dict = {}
    for (_, state), n in svc.eng.counts().items():
        counts[state] = counts.get(state, 0) + n
    return {"chains": chains, "jobs": counts, "vcs": sorted(svc.spec.vcs)}


def loans(svc, vc: str) -> tuple[int, int]:
    """(GPUs lent, GPUs borrowed) by cell exchange now; (0, 0) where cells cannot move."""
    view = svc.eng.alloc.vc_view(vc)
    levels = getattr(view, "levels", None) or {}
    return (sum(lv.lent * lv.gpus_per_cell for lv in levels.values()),
            sum(lv.borrowed * lv.gpus_per_cell for lv in levels.values()))


def vc_dict(svc, vc: str) -> dict:
    """One VC: ``gpus_total`` is what it holds now (loans counted, as ``view.gpus_total``);
    ``gpus_spec`` what its spec guarantees; ``gpus_lent``/``gpus_borrowed`` the difference."""
    spec = svc.spec.vcs[vc]
    view = jsonable(svc.eng.alloc.vc_view(vc))
    holding = svc.eng.holding(vc)
    lent, borrowed = loans(svc, vc)
    return {
        "name": vc, "users": list(spec.users or []), "admins": list(getattr(spec, "admins", []) or []),
        "cells": {f"{c}/{lvl}": n for (c, lvl), n in spec.cells.items()},
        "view": view, "queue": svc.eng.queue(vc), "running": sorted(r.job_id for r in holding),
        "gpus_used": sum(r.gpus for r in holding if not r.opportunistic),
        "gpus_total": svc.eng.capacity(vc), "gpus_spec": spec_gpus(svc.spec, vc),
        "gpus_lent": lent, "gpus_borrowed": borrowed,
        "queue_policy": getattr(svc.eng.vc_policies.get(vc), "name", "custom"),
    }


def spec_gpus(spec, vc: str) -> int:
    """GPUs the spec guarantees a VC."""
    return sum(n * spec.chains[c].gpus_per_level[lvl - 1] for (c, lvl), n in spec.vcs[vc].cells.items())


def tail_position(eng: Engine, rec: JobRecord) -> int | None:
    """Position of a job just queued, without listing the queue (O(1) for
    order-keeping policies; submissions stay fast with long queues)."""
    pol = eng.vc_policies[rec.request.vc]
    lanes = eng.lanes(rec.request.vc)
    if rec.state is not JobState.QUEUED or lanes is None or not getattr(pol, "preserves_order", False):
        return queue_position(eng, rec)
    te, rest = lanes
    if getattr(pol, "te_first", False) and rec.job_id in te:
        return len(te) - 1
    return len(te) + len(rest) - 1


def queue_position(eng: Engine, rec: JobRecord) -> int | None:
    if rec.state is not JobState.QUEUED:
        return None
    try:
        return eng.queue(rec.request.vc).index(rec.job_id)
    except ValueError:
        return None
