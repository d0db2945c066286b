"""Cluster specs for simulations: N identical 8-GPU nodes and a VC per tenant.

``node_spec`` builds a spec dict in the project's format (core/spec.py):
nodes of 2 sockets x 2 PCIe switches x 2 GPUs (the four-level hierarchy of
HiveD (OSDI '20) §5.1), one top-level cell per node (no racks: the paper's simulated
cluster has none). VCs get

* ``cells="node"``: whole nodes only (single-level cells, HiveD (OSDI '20) §5.3), the
  quota rounded to nodes;
* ``cells="multi"``: cells at levels 1-4 in proportion to the GPU-hours the
  tenant's jobs ask at each size (1 GPU -> level 1, 2 -> 2, 3-4 -> 3,
  more -> 4), same total GPUs.

Cell-type names: GPU, PCIE, SOCKET, NODE; the chain is ``NODE``.
"""
from __future__ import annotations

import math
from typing import Any

LEVEL_TYPES = ["GPU", "PCIE", "SOCKET", "NODE"]
LEVEL_GPUS = [1, 2, 4, 8]
NODE_GPUS = 8


def level_for(gpus_per_pod: int) -> int:
    for lvl, g in enumerate(LEVEL_GPUS, start=1):
        if gpus_per_pod <= g:
            return lvl
    return 4


def node_spec(nodes: int, quotas: dict[str, int], *, cells: str = "node",
              demand: dict[str, dict[int, float]] | None = None,
              node_cpus: float = 64, node_memory_gb: float = 512,
              min_cells: dict[str, dict[int, int]] | None = None) -> dict[str, Any]:
    """Spec dict with ``nodes`` nodes; ``quotas`` maps VC -> GPUs (multiples of 8 for
    node cells; rounded down to whole cells otherwise). ``demand`` (for multi-level
    cells) maps VC -> {level: GPU-hours}; ``min_cells`` maps VC -> {level: cells} the
    split must keep (so that the VC's largest gang still fits, as in its private cluster)."""
    if cells not in ("node", "multi"):
        raise ValueError(f"cells: must be 'node' or 'multi', got {cells!r}")
    if nodes < 1:
        raise ValueError(f"nodes: must be >= 1, got {nodes}")
    types = {
        "PCIE": {"childCellType": "GPU", "childCellNumber": 2},
        "SOCKET": {"childCellType": "PCIE", "childCellNumber": 2},
        "NODE": {"childCellType": "SOCKET", "childCellNumber": 2, "isNodeLevel": True,
                 "cpus": node_cpus, "memoryGB": node_memory_gb},
    }
    phys = [{"cellType": "NODE", "cellAddress": f"n{i:04d}"} for i in range(nodes)]
    vcs = {}
    for vc, gpus in quotas.items():
        if cells == "node" or not demand or vc not in demand:
            vcs[vc] = {"virtualCells": [{"cellType": "NODE", "cellNumber": max(1, gpus // NODE_GPUS)}]}
        else:
            vcs[vc] = {"virtualCells": split_cells(gpus, demand[vc], (min_cells or {}).get(vc))}
    return {"physicalCluster": {"cellTypes": types, "physicalCells": phys}, "virtualClusters": vcs}


def split_cells(gpus: int, demand: dict[int, float], min_cells: dict[int, int] | None = None) -> list[dict[str, Any]]:
    """Cells per level in proportion to ``demand`` ({level: weight}), summing to ``gpus``.

    ``min_cells`` ({level: cells}) are set aside first (a gang of four 8-GPU pods
    needs four node cells whatever the GPU-hours say). The rest is split by
    ``demand``, each level rounded down to whole cells, and what is left goes
    to the lowest levels (a 1-GPU cell always fits the remainder)."""
    counts: dict[int, int] = {}
    used = 0
    for lvl, n in sorted((min_cells or {}).items(), reverse=True):
        # cells already set aside at higher levels split into cells of this level
        n -= sum(c * (LEVEL_GPUS[k - 1] // LEVEL_GPUS[lvl - 1]) for k, c in counts.items() if k > lvl)
        n = min(n, (gpus - used) // LEVEL_GPUS[lvl - 1])
        if n > 0:
            counts[lvl] = n
            used += n * LEVEL_GPUS[lvl - 1]
    rest = gpus - used
    total = sum(demand.values()) or 1.0
    for lvl in sorted(demand, reverse=True):
        share = rest * demand[lvl] / total
        n = int(share // LEVEL_GPUS[lvl - 1])
        counts[lvl] = counts.get(lvl, 0) + n
        used += n * LEVEL_GPUS[lvl - 1]
    left = gpus - used
    for lvl in (4, 3, 2, 1):
        g = LEVEL_GPUS[lvl - 1]
        if left >= g and (lvl in demand or lvl == 1):
            n = left // g
            counts[lvl] = counts.get(lvl, 0) + n
            left -= n * g
    out = [{"cellType": f"NODE.{LEVEL_TYPES[lvl - 1]}" if lvl < 4 else "NODE", "cellNumber": n}
           for lvl, n in sorted(counts.items(), reverse=True) if n > 0]
    return out or [{"cellType": "NODE.GPU", "cellNumber": max(1, gpus)}]


def private_spec(vc: str, gpus: int, cells: str = "node", demand: dict[int, float] | None = None) -> dict[str, Any]:
    """The tenant alone on a cluster the size of its quota (whole nodes, rounded up)."""
    nodes = max(1, math.ceil(gpus / NODE_GPUS))
    return node_spec(nodes, {vc: nodes * NODE_GPUS}, cells="node")
