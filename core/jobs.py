"""The job model every part of hived shares: requests, states and decisions.

These are plain data. The engine (``hived.core.engine``) owns the state
machine; the doors build ``JobRequest`` objects and the launchers act on
``Decision`` objects. Times are seconds on the caller's clock (``now``); core
never reads the wall clock itself.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class JobClass(str, enum.Enum):
    """What kind of work a job is, which sets its priority.

    TE (trial-and-error, interactive) and BE (best-effort, batch) are both
    *guaranteed* inside their VC's cells; TE goes first and may preempt BE
    (FitGpp). OPPORTUNISTIC runs on any idle cell at low priority and is
    preempted by any guaranteed job that needs the cell.
    """

    TE = "te"
    BE = "be"
    OPPORTUNISTIC = "opportunistic"

    @property
    def guaranteed(self) -> bool:
        return self is not JobClass.OPPORTUNISTIC


class Affinity(str, enum.Enum):
    HARD = "hard"  # the gang waits until it fits inside one cell of the wanted level
    SOFT = "soft"  # wait for the wanted level a while, then relax one level at a time


class JobState(str, enum.Enum):
    QUEUED = "queued"          # waiting in its VC's queue
    PLACED = "placed"          # cells bound, waiting for preemption victims to leave
    RUNNING = "running"        # the launcher started it
    PREEMPTING = "preempting"  # told to stop, inside its grace period
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL

    @property
    def holding(self) -> bool:
        """The job holds cells (bound, running or inside its grace period)."""
        return self in HOLDING


# The one definition of each group of states; every part of hived (engine,
# service, REST handlers, Kubernetes, the client) reads these.
HOLDING: frozenset[JobState] = frozenset({JobState.PLACED, JobState.RUNNING, JobState.PREEMPTING})
TERMINAL: frozenset[JobState] = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
# not started yet (queued, or placed and waiting for victims): a wait reason applies
WAITING: frozenset[JobState] = frozenset({JobState.QUEUED, JobState.PLACED})
# started and not yet ended: its processes may be alive
STARTED: frozenset[JobState] = frozenset({JobState.RUNNING, JobState.PREEMPTING})
# not ended: what a scheduling round can still change
ACTIVE: frozenset[JobState] = frozenset(JobState) - TERMINAL
# ended on its own (not cancelled): an exit code, when it has one, applies
EXITED: frozenset[JobState] = frozenset({JobState.SUCCEEDED, JobState.FAILED})


KERNEL_LABEL = "kernel"   # the label of a job that is a Jupyter kernel (hived.kernels); value: the kernel id


def class_text(job: dict[str, Any]) -> str:
    """A job's class as every door shows it (wire form in): ``te``, ``be``, ``opportunistic``,
    and ``te/kernel`` for a Jupyter kernel."""
    return str(job["job_class"]) + ("/kernel" if KERNEL_LABEL in (job.get("labels") or {}) else "")


def state_values(states: frozenset[JobState]) -> tuple[str, ...]:
    """The states' wire names, in the enum's order (for doors that speak JSON)."""
    return tuple(s.value for s in JobState if s in states)


@dataclass(frozen=True)
class PodGroup:
    """``pods`` identical pods, each wanting ``gpus`` GPUs (or one cell of ``cell_type``)."""

    pods: int = 1
    gpus: int = 1
    cell_type: str | None = None  # e.g. "DGX2-V100.NODE"; when set it decides the GPUs
    cpus: float | None = None     # per pod; None = default from the node's share
    memory_gb: float | None = None


@dataclass
class JobRequest:
    """What a door submits. Validated by the engine (``Engine.validate``)."""

    user: str
    vc: str
    command: list[str] | str = ""
    job_class: JobClass = JobClass.TE
    groups: list[PodGroup] = field(default_factory=lambda: [PodGroup()])
    chain: str | None = None          # GPU pool (cell chain); None = any that fits
    affinity: Affinity = Affinity.HARD
    grace_period: float = 0.0            # seconds between SIGTERM and SIGKILL; 0 = rewindable
    allow_opportunistic: bool = False    # may run as low priority when the VC is full
    name: str = ""
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None
    duration: float | None = None     # simulator only: run time once started
    estimate: float | None = None     # user's hint of run time, seconds
    max_retries: int | None = None    # None = the failure class decides
    labels: dict[str, str] = field(default_factory=dict)
    # Launcher-specific pod settings: the job's overrides of the Kubernetes job template
    # (k8s/template.py). The engine only carries them; the launcher validates them.
    k8s_template: dict[str, Any] | None = None
    time_limit: float | None = None   # seconds each run may take; then stopped, failed as "timeout"
    after: list[str] = field(default_factory=list)   # job ids that must succeed before it starts

    @property
    def total_pods(self) -> int:
        return sum(g.pods for g in self.groups)


@dataclass(frozen=True)
class PodPlacement:
    """Where one pod of a gang runs: a node and GPU indices on that node."""

    rank: int
    node: str
    gpus: tuple[int, ...]
    cells: tuple[str, ...] = ()  # physical cell addresses bound to this pod


@dataclass(frozen=True)
class Placement:
    chain: str
    pods: tuple[PodPlacement, ...]
    opportunistic: bool = False

    @property
    def gpu_count(self) -> int:
        return sum(len(p.gpus) for p in self.pods)


class DecisionKind(str, enum.Enum):
    START = "start"      # launch the gang at ``placement``
    PREEMPT = "preempt"  # send SIGTERM now, kill after ``grace_period``
    KILL = "kill"        # grace period over: kill now
    REQUEUE = "requeue"  # informational: job went back to its queue
    FAIL = "fail"        # informational: job ended without running (e.g. never fits)


@dataclass(frozen=True)
class Decision:
    kind: DecisionKind
    job_id: str
    placement: Placement | None = None
    grace_period: float = 0.0
    reason: str = ""
