"""Which nodes of the spec are this machine, and which real GPU each position is.

The spec numbers a node's GPUs by position (the order of its cell tree);
NVML numbers them by index, and CUDA by its own order. When the spec came
from ``hived discover`` on this host, its node is named after the host and
discovery knows, per position, the GPU's UUID and NVML index. The local
launcher then puts UUIDs in CUDA_VISIBLE_DEVICES (unambiguous whatever
CUDA's device order), and the health monitor watches those GPUs.

A spec that does not name this host (the demo cluster, a test spec) or a
machine without a driver gets no mapping: positions are used as they are
and no health monitor runs. ``$HIVED_NVML=0`` turns the look-up off.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

log = logging.getLogger("hived.service")


@dataclass
class LocalGpus:
    gpu_ids: dict = field(default_factory=dict)   # (node, position) -> UUID (or NVML index as text)
    nodes: dict = field(default_factory=dict)     # node -> NVML indices in position order
    notes: list = field(default_factory=list)


def spec_nodes(spec, alloc) -> dict:
    """node name -> GPUs per node, for every node of every chain (``alloc``: the engine's allocator)."""
    out = {}
    for name, chain in spec.chains.items():
        for node in alloc.node_free(name):
            out[node] = chain.node_gpus
    return out


def match_local(spec, alloc, nvml=None, host: str | None = None) -> LocalGpus | None:
    """The spec's nodes that are this machine, or None (no driver, no such node)."""
    if os.environ.get("HIVED_NVML", "1") == "0":
        return None
    from .discovery import NoGpuError, discover
    try:
        d = discover(nvml=nvml, host=host)
    except NoGpuError as exc:
        log.info("no local GPU mapping: %s", exc)
        return None
    except Exception as exc:   # nvidia-ml-py missing or broken: schedule by position
        log.warning("no local GPU mapping: NVML look-up failed (%s: %s)", type(exc).__name__, exc)
        return None
    wanted = spec_nodes(spec, alloc)
    out = LocalGpus(notes=list(d.notes))
    for node, indices in d.nodes.items():
        if wanted.get(node) == len(indices):
            out.nodes[node] = list(indices)
            out.gpu_ids.update({k: v for k, v in d.gpu_ids.items() if k[0] == node})
        elif node in wanted:
            out.notes.append(f"node {node}: the spec has {wanted[node]} GPUs, this machine {len(indices)}; "
                             f"not mapped, positions used as they are")
    return out if out.nodes else None


def this_machine(spec, alloc, launcher, health, jobs_dir, log_bytes: int, log_keep: int, current_spec):
    """(local GPUs, launcher, health monitor) of a service: ``launcher == "local"`` becomes a
    ``LocalLauncher`` running jobs on this machine's GPUs as the spec's accounts (``current_spec()``:
    the spec in force, which a reload changes); ``health == "auto"`` NVML health checks for the
    GPUs of this machine, if any. ``local`` is None when the spec does not name this host."""
    local = None
    if launcher == "local" or health == "auto":
        local = match_local(spec, alloc)
    if launcher == "local":
        from .local_accounts import spec_account
        from .local_launcher import LocalLauncher
        launcher = LocalLauncher(jobs_dir, gpu_ids=local.gpu_ids if local else None,
                                 max_log_bytes=log_bytes, keep_logs=log_keep,
                                 accounts=lambda user, vc: spec_account(current_spec(), user, vc))
    if health == "auto":   # NVML health checks for the GPUs of this machine, if any
        from .health import HealthMonitor
        health = HealthMonitor(local.nodes) if local else None
    return local, launcher, health
