"""``EngineConfig``: the engine's settings (core/engine.py), in a module of their own so that
the engine's parts and the policies read their type without importing the engine."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class EngineConfig:
    soft_wait: float = 150.0      # the Philly study (ATC '19) §2: wait 2-3 min for the wanted locality ...
    relax_backoff: float = 2.0    # ... then relax one level; each next wait is this factor longer
    preemption_cap: int = 1       # P: a BE job is preempted by the policy at most this often (a VC's
                                  # maxPreemptions overrides it; preemption_order.preemption_cap)
    retry_cap: int = 3            # engine-wide bound on counted retries (failures.py decides per class)
    keep_progress: bool = True    # simulator: a preempted job resumes where it stopped (checkpoints)
    isolated_vcs: bool | None = None  # None: ask the allocator (HiveD: True, quota: False)
    wait_reasons: bool = True     # write JobRecord.wait_reason (the simulator, which shows none, turns it off)
    backfill: bool = True         # later jobs may pass a blocked VC head holding a reservation (engine_backfill.py)
    backfill_estimates: str = "hint"  # reservations from: hint (estimator), oracle (sim durations), none
