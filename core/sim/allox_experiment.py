"""AlloX's (EuroSys '20) simulation: AlloX against its baselines, and the alpha trade-off.

``run(config)`` builds the Philly-derived workload (core/allox/workload.py:
1-GPU Philly jobs, a CPU time per job from a speedup drawn in [1.8, 10],
estimates with ~10% error), replays it through each policy on the paper's
simulated cluster (20 GPUs, 20 CPUs) and returns, per policy, the average
job completion time, the mean over the longest 1% of jobs, the GPU and CPU
utilisation and the fairness metric (time-averaged standard deviation of
the users' progress); then the sweep over alpha (Fig. 16). It prints and
plots nothing: reports/allox.py does.
"""
from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from hived.core.allox import workload as W
from hived.core.allox.baselines import make
from hived.core.allox.scheduler import AlloX
from hived.core.allox.simulator import SimResult, simulate, simulate_srpt

POLICIES = ("es", "drff", "drfs", "drfa", "jsq+", "sjf+", "allox+", "allox", "srpt")
ALPHAS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0)
# AlloX (EuroSys '20) §5.2.2 (Fig. 13): AlloX (alpha 0.1) cuts the average completion time
# against DRFF, DRFS, ES and DRFA by 95%, 84%, 88% and 53%, and is 30% above SRPT.
PAPER_CUT = {"drff": 0.95, "drfs": 0.84, "es": 0.88, "drfa": 0.53}
PAPER_SRPT_GAP = 0.30


@dataclass
class Config:
    jobs: int = 1000
    load: float = 1.2
    gpus: int = 20
    cpus: int = 20
    users: int = 10
    seed: int = 0
    error: float = 0.1
    alpha: float = 0.1
    alphas: Sequence[float] = ALPHAS
    policies: Sequence[str] = POLICIES
    timeout_h: float = 4.0          # AlloX+ starvation timeout
    start: str = "2017-10-10"
    trace: str = W.PHILLY

    def check(self) -> None:
        unknown = [p for p in self.policies if p not in POLICIES]
        if unknown:
            raise ValueError(f"policies: unknown {', '.join(unknown)}; known: {', '.join(POLICIES)}")
        for a in list(self.alphas) + [self.alpha]:
            if not 0 < a <= 1:
                raise ValueError(f"alpha: must be in (0, 1], got {a}")
        if self.gpus < 1 or self.cpus < 0:
            raise ValueError(f"cluster: need gpus >= 1 and cpus >= 0, got {self.gpus}, {self.cpus}")
        if not self.timeout_h > 0:
            raise ValueError(f"timeout_h: must be > 0, got {self.timeout_h}")


@dataclass
class Row:
    policy: str
    avg_completion_min: float
    longest1_min: float              # mean completion of the 1% of jobs that are longest on a GPU
    gpu_util: float
    cpu_util: float
    progress_std: float
    on_cpu: float                    # share of jobs that ran (finished) on a CPU


@dataclass
class Result:
    config: Config
    rows: dict[str, Row]
    sweep: list[Row]                 # AlloX at each alpha
    mean_speedup: float
    time_scale: float

    def cut(self, base: str, policy: str = "allox") -> float:
        """Relative cut of the average completion time of ``policy`` against ``base``."""
        return 1 - self.rows[policy].avg_completion_min / self.rows[base].avg_completion_min

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["config"]["alphas"] = list(self.config.alphas)
        d["config"]["policies"] = list(self.config.policies)
        return d


def _row(name: str, r: SimResult, wl: W.Workload, cap: dict[str, int]) -> Row:
    util = r.utilization(cap)
    longest = sorted(wl.jobs, key=lambda j: -wl.truth[j.id]["gpu"])[:max(1, len(wl.jobs) // 100)]
    return Row(name, r.avg_completion / 60, statistics.fmean(r.completion[j.id] for j in longest) / 60,
               util.get("gpu", 0.0), util.get("cpu", 0.0), r.progress_std,
               sum(k == "cpu" for k in r.kind_of.values()) / max(len(r.kind_of), 1))


def run(cfg: Config, on_stage: Callable[[str], None] | None = None) -> Result:
    cfg.check()
    wl = W.build(cfg.jobs, load=cfg.load, gpus=cfg.gpus, users=cfg.users, seed=cfg.seed,
                 error=cfg.error, start=cfg.start, path=cfg.trace)
    machines = W.cluster(cfg.gpus, cfg.cpus)
    cap = {"gpu": cfg.gpus, "cpu": cfg.cpus}
    mean_speedup = statistics.fmean(wl.speedups.values())
    rows: dict[str, Row] = {}

    def one(name: str, alpha: float | None = None) -> SimResult:
        if on_stage:
            on_stage(name if alpha is None else f"allox alpha={alpha:g}")
        if name == "srpt":
            return simulate_srpt(wl.jobs, machines, truth=wl.truth, users=wl.users)
        disp = (AlloX(alpha=alpha if alpha is not None else cfg.alpha) if name == "allox"
                else make(name, speedup=mean_speedup, timeout=cfg.timeout_h * 3600))
        return simulate(wl.jobs, machines, disp, truth=wl.truth, users=wl.users)

    for p in cfg.policies:
        rows[p] = _row(p, one(p), wl, cap)
    sweep = []
    for a in cfg.alphas:
        if a == cfg.alpha and "allox" in rows:
            sweep.append(Row(f"allox(a={a:g})", **{k: v for k, v in asdict(rows["allox"]).items() if k != "policy"}))
        else:
            sweep.append(_row(f"allox(a={a:g})", one("allox", a), wl, cap))
    return Result(cfg, rows, sweep, mean_speedup, wl.time_scale)


def stages(cfg: Config) -> int:
    """How many simulations ``run`` does (for a progress bar)."""
    return len(cfg.policies) + sum(1 for a in cfg.alphas if not (a == cfg.alpha and "allox" in cfg.policies))
