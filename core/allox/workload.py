"""Workloads for the AlloX experiment: Philly jobs given a CPU configuration.

The Philly trace (shipped with hived, hived.core.sim.traces.PHILLY_DIR; Jeon et al. ATC'19, CC-BY-4.0)
has GPU run times only. AlloX (EuroSys '20) §5.1 reports GPU-over-CPU speedups of
1.8-10 for its TensorFlow jobs, so each job gets a CPU time of
``gpu_time * s`` with ``s`` drawn uniformly from [1.8, 10] per job (seeded).
Only 1-GPU jobs are used (AlloX places a job on one GPU or one CPU),
run times are clipped to [60 s, 6 h] so that a single multi-week job does
not decide the average, each job belongs to one of ``users`` users drawn
uniformly (the paper's 10 users with about equal job counts; the trace's
VCs are too lopsided for that: one VC has half the jobs), and arrival gaps are scaled
so that the GPU work offered equals ``load`` x the GPU capacity over the
arrival span. Schedulers see estimates with a relative error drawn from
N(0, error) (paper: about 10%), jobs run for their true times.
"""
from __future__ import annotations

import csv
import gzip
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone

from ..sim.traces import PHILLY_DIR
from .model import Machine, SimJob

PHILLY = os.path.join(PHILLY_DIR, "philly_jobs.csv.gz")
SPEEDUP = (1.8, 10.0)
CLIP = (60.0, 6 * 3600.0)


@dataclass(frozen=True)
class TraceJob:
    submit: float        # seconds since the epoch (UTC)
    duration: float      # seconds
    gpus: int
    vc: str


def philly_rows(path: str = PHILLY) -> Iterator[TraceJob]:
    """The trace's rows, as read (the .gz directly); raises with the line on a bad row."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"Philly trace not found at {path}")
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        for n, row in enumerate(csv.DictReader(f), start=2):
            try:
                ts = datetime.strptime(row["timestamp"], "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)
                yield TraceJob(ts.timestamp(), float(row["duration"]), int(row["num_gpus"]), row["cluster"])
            except (KeyError, ValueError) as e:
                raise ValueError(f"{path}:{n}: bad row {row!r}: {e}") from None


def cluster(gpus: int = 20, cpus: int = 20) -> list[Machine]:
    """The paper's simulated cluster: 20 GPUs and 20 CPUs (of 20 cores each)."""
    if gpus < 0 or cpus < 0 or gpus + cpus == 0:
        raise ValueError(f"cluster: need gpus, cpus >= 0 and some machine, got {gpus}, {cpus}")
    return [Machine(i, "gpu") for i in range(gpus)] + [Machine(gpus + i, "cpu") for i in range(cpus)]


@dataclass
class Workload:
    jobs: list[SimJob]                      # estimates (what schedulers see)
    truth: dict[str, dict[str, float]]      # true times
    users: list[str]
    speedups: dict[str, float]
    time_scale: float                       # arrival gaps were multiplied by this


def build(n_jobs: int = 1000, *, load: float = 1.2, gpus: int = 20, users: int = 10, seed: int = 0,
          error: float = 0.1, start: str = "2017-10-10", path: str = PHILLY,
          rows: list[TraceJob] | None = None) -> Workload:
    if n_jobs < 1:
        raise ValueError(f"n_jobs: must be >= 1, got {n_jobs}")
    if not load > 0:
        raise ValueError(f"load: must be > 0, got {load}")
    if not 0 <= error < 1:
        raise ValueError(f"error: must be in [0, 1), got {error}")
    if users < 1:
        raise ValueError(f"users: must be >= 1, got {users}")
    t0 = datetime.strptime(start, "%Y-%m-%d").replace(tzinfo=timezone.utc).timestamp()
    src = rows if rows is not None else philly_rows(path)
    picked: list[TraceJob] = []
    for r in src:
        if r.gpus == 1 and r.submit >= t0 and r.duration > 0:
            picked.append(r)
    picked.sort(key=lambda r: r.submit)
    picked = picked[:n_jobs]
    if len(picked) < n_jobs:
        raise ValueError(f"n_jobs: only {len(picked)} 1-GPU jobs after {start} in the trace, asked {n_jobs}")
    names = [f"user{i}" for i in range(users)]
    rng = random.Random(seed)
    durations = [min(max(r.duration, CLIP[0]), CLIP[1]) for r in picked]
    span = max(picked[-1].submit - picked[0].submit, 1.0)
    scale = sum(durations) / (load * gpus * span)     # arrival gaps x scale -> offered load = `load`
    jobs, truth, speed = [], {}, {}
    for n, (r, d) in enumerate(zip(picked, durations)):
        jid = f"j{n:05d}"
        user = names[rng.randrange(users)]
        s = rng.uniform(*SPEEDUP)
        true = {"gpu": d, "cpu": d * s}
        est = {k: max(1.0, v * (1 + rng.gauss(0, error))) for k, v in true.items()} if error else dict(true)
        jobs.append(SimJob(jid, user, (r.submit - picked[0].submit) * scale, est))
        truth[jid], speed[jid] = true, s
    return Workload(jobs, truth, names, speed, scale)
