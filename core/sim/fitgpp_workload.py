"""The synthetic workload of FitGpp (OpML '19) §4.2, seeded, and a spec for its cluster.

The paper fits normal distributions to its cluster's trace and samples jobs
from truncated versions; it gives the execution-time means (TE 5 min, BE
30 min), the truncation points (30 min, 24 h), the grace-period mean (3 min,
truncated at 20 min), the TE share (30%) and the cluster (84 nodes of 32 CPUs,
256 GB, 8 GPUs). The standard deviations and the CPU/RAM/GPU distributions
are not printed in the paper; ``PARAMS`` holds the values we picked, and
docs/fitgpp.md lists them. Every job is a single pod on one node, as in the
paper. All times are whole minutes because the paper's scheduler decides once
per simulated minute.

Arrival times are set so that the cluster load (the jobs in the system,
running or queued, over the capacity, taking the most loaded of CPU, RAM and
GPU) stays at ``load`` (2.0) when the jobs are scheduled by FIFO: a FIFO run
submits the next jobs whenever the load drops below the target. Those arrival
times are then fixed and replayed under every policy.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy.stats import truncnorm

NODES = 84
NODE_CPUS = 32
NODE_MEMORY_GB = 256
NODE_GPUS = 8
TE_SHARE = 0.30
LOAD = 2.0
JOBS = 1 << 16


@dataclass(frozen=True)
class Dist:
    """A normal with mean ``mean`` and deviation ``sd``, truncated to [low, high]."""

    mean: float
    sd: float
    low: float
    high: float

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        a, b = (self.low - self.mean) / self.sd, (self.high - self.mean) / self.sd
        return truncnorm.rvs(a, b, loc=self.mean, scale=self.sd, size=n, random_state=rng)


# (TE, BE) per quantity. Means of exec time, truncations of exec time and GP:
# from the paper; the rest: our choice (docs/fitgpp.md).
PARAMS: dict[str, tuple[Dist, Dist]] = {
    "exec_min": (Dist(5, 5, 1, 30), Dist(30, 60, 1, 24 * 60)),
    # BE jobs are the bigger ones (training runs); TE jobs are mostly 1-2 GPUs
    # with a tail up to a whole node. These were picked (docs/fitgpp.md) so
    # that a TE job often finds no room in a full cluster, as in the paper.
    "gpus": (Dist(2, 3, 1, NODE_GPUS), Dist(4, 3, 1, NODE_GPUS)),
    "cpus": (Dist(8, 8, 1, NODE_CPUS), Dist(12, 8, 1, NODE_CPUS)),
    "memory_gb": (Dist(64, 64, 1, NODE_MEMORY_GB), Dist(96, 64, 1, NODE_MEMORY_GB)),
    "grace_min": (Dist(3, 3, 0, 20), Dist(3, 3, 0, 20)),
}


@dataclass(frozen=True)
class SynthJob:
    """One job of the synthetic workload (times in whole minutes)."""

    idx: int
    te: bool
    exec_min: int
    cpus: int
    memory_gb: int
    gpus: int
    grace_min: int
    arrival_min: int = 0

    @property
    def demand(self) -> tuple[float, float, float]:
        return (float(self.cpus), float(self.memory_gb), float(self.gpus))


def sample_jobs(n: int = JOBS, seed: int = 0, te_share: float = TE_SHARE, gp_scale: float = 1.0) -> list[SynthJob]:
    """``n`` jobs in submission order, without arrival times.

    ``gp_scale`` multiplies the grace-period mean, deviation and truncation
    (paper Fig. 7's "2.0", "4.0" ...).
    """
    if n < 1:
        raise ValueError(f"workload: job count must be >= 1, got {n}")
    if not 0.0 <= te_share <= 1.0:
        raise ValueError(f"workload: TE share must be in [0, 1], got {te_share}")
    if gp_scale <= 0:
        raise ValueError(f"workload: grace-period scale must be > 0, got {gp_scale}")
    rng = np.random.default_rng(seed)
    te = rng.random(n) < te_share
    cols = {}
    for key, (d_te, d_be) in PARAMS.items():
        if key == "grace_min":
            d_te = Dist(d_te.mean * gp_scale, d_te.sd * gp_scale, d_te.low, d_te.high * gp_scale)
            d_be = Dist(d_be.mean * gp_scale, d_be.sd * gp_scale, d_be.low, d_be.high * gp_scale)
        x_te, x_be = d_te.sample(rng, n), d_be.sample(rng, n)
        vals = np.where(te, x_te, x_be)
        low = max(d_te.low, d_be.low)
        cols[key] = np.maximum(np.rint(vals), low if key != "grace_min" else 0).astype(int)
    return [
        SynthJob(i, bool(te[i]), int(cols["exec_min"][i]), int(cols["cpus"][i]), int(cols["memory_gb"][i]),
                 int(cols["gpus"][i]), int(cols["grace_min"][i]))
        for i in range(n)
    ]


def generate(n: int = JOBS, seed: int = 0, *, load: float = LOAD, nodes: int = NODES,
             te_share: float = TE_SHARE, gp_scale: float = 1.0,
             tick: Callable[[int], object] | None = None) -> list[SynthJob]:
    """The full workload: sampled jobs with arrival times calibrated at ``load`` under FIFO."""
    if load <= 0:
        raise ValueError(f"workload: load must be > 0, got {load}")
    from .fitgpp_experiment import calibrate_arrivals  # the FIFO simulator lives there

    jobs = sample_jobs(n, seed, te_share, gp_scale)
    arrivals = calibrate_arrivals(jobs, nodes=nodes, load=load, tick=tick)
    return [replace(j, arrival_min=int(a)) for j, a in zip(jobs, arrivals)]


def cluster_spec(nodes: int = NODES, vc: str = "vc0", users: list[str] | None = None) -> dict[str, Any]:
    """A hivedscheduler-style spec dict for the paper's cluster: one chain of
    ``nodes`` node cells (8 GPUs, 32 CPUs, 256 GB each) and one VC owning them all.

    Each node is split in buddy cells of 4 and 2 GPUs (FG-GPU4, FG-GPU2), as a
    DGX-style node is (socket, PCIe switch): HiveD's allocator gives a pod the
    smallest cell holding its GPUs, so without these levels every pod of 2..8
    GPUs would hold a whole node. The quota allocator ignores the levels."""
    if nodes < 1:
        raise ValueError(f"spec: node count must be >= 1, got {nodes}")
    return {
        "physicalCluster": {
            "cellTypes": {
                "FG-GPU2": {"childCellType": "GPU", "childCellNumber": 2},
                "FG-GPU4": {"childCellType": "FG-GPU2", "childCellNumber": 2},
                "FG-NODE": {"childCellType": "FG-GPU4", "childCellNumber": NODE_GPUS // 4, "isNodeLevel": True,
                            "cpus": NODE_CPUS, "memoryGB": NODE_MEMORY_GB},
                "FG-CLUSTER": {"childCellType": "FG-NODE", "childCellNumber": nodes},
            },
            "physicalCells": [{
                "cellType": "FG-CLUSTER",
                "cellChildren": [{"cellAddress": f"node{i:04d}"} for i in range(nodes)],
            }],
        },
        "virtualClusters": {
            vc: {"virtualCells": [{"cellType": "FG-CLUSTER.FG-NODE", "cellNumber": nodes}],
                 **({"users": list(users)} if users else {})},
        },
    }
