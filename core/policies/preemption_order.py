"""The one place that writes down who may preempt whom, and in which order.

When a guaranteed job of VC v does not fit, hived preempts in two stages:

1. **HiveD strict priority** (HiveD, OSDI '20). Opportunistic (low-priority) jobs,
   of any VC, on the cells the allocator binds to v's guaranteed job are
   preempted first, always, before any policy is asked; the allocator names
   them (``Grant.victims``) and the job waits, PLACED, until they leave.
   Opportunistic jobs never preempt anything.
2. **FitGpp inside the VC** (FitGpp, OpML '19). Only if the job is TE and got no
   cells at all (v's own cells are held by v's guaranteed jobs), the
   preemption policy (FitGpp by default; LRTP or RAND as baselines) picks
   among v's *running BE jobs, not running opportunistically, whose
   preemption count is below the cap P*. TE jobs are never preempted by the
   policy, and a BE job never preempts another BE job.

Each victim gets a PREEMPT decision carrying its own grace period (from its
request; 0 = rewindable), bounded by the VC that wants the cells (stage 1: the
lender's ``opportunisticGrace``, ``lender_grace``; stage 2: the VC's
``maxGrace``, ``max_grace``), then a KILL when that grace period is over; once it
is gone it goes back to the head of its VC's queue (after the queued TE jobs,
which still go first: ``requeue_position``) and keeps its preemption count.
The preemptor asks again only once its victims have left.

Where the engine (core/engine.py) does each step: stage 1 in ``_bind``
(``grant.victims``), stage 2 in ``_ask_policy``, the grace period in
``_preempt`` and ``step``, the requeue in ``on_preempted``. The engine takes
stage 2's candidates from ``policy_candidates`` (which asks ``may_preempt`` and
``under_cap``): the rule is written here once.
tests/fitgpp/test_engine_integration.py checks that stage 1 comes first.
docs/fitgpp.md says the same for users.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, overload

from hived.core.jobs import JobClass, JobState

if TYPE_CHECKING:   # the engine imports this module; these are only read
    import numpy as np
    import numpy.typing as npt

    from ..engine_config import EngineConfig
    from ..engine_records import JobRecord
    from ..engine_view import ClusterView
    from ..spec import ClusterSpec


class PreemptionPolicy(Protocol):
    """Stage 2: which running BE jobs of the VC give way to a TE job that does not fit."""

    @property
    def name(self) -> str: ...   # shown in the wait reasons ("fitgpp chose ...")

    def choose(self, job: JobRecord, candidates: Sequence[JobRecord], view: ClusterView,
               now: float) -> tuple[list[str], str]: ...

# higher preempts lower: TE > BE > opportunistic, but see may_preempt
RANK = {JobClass.TE: 2, JobClass.BE: 1, JobClass.OPPORTUNISTIC: 0}

STAGE_STRICT = "hived-strict-priority"
STAGE_POLICY = "intra-vc-policy"


def may_preempt(preemptor: JobClass, victim: JobClass, same_vc: bool) -> bool:
    """Whether a job of class ``preemptor`` may ever preempt one of class ``victim``."""
    if victim is JobClass.OPPORTUNISTIC:
        return preemptor.guaranteed          # stage 1, any VC
    if preemptor is JobClass.TE and victim is JobClass.BE:
        return same_vc                       # stage 2, only inside the VC
    return False


def preemption_cap(config: EngineConfig, spec: ClusterSpec, vc: str) -> int:
    """P, the most times the policy may preempt one BE job of ``vc``: the VC's
    ``maxPreemptions`` in the spec when it sets one, else the service's
    ``EngineConfig.preemption_cap`` (default 1, the paper's P). The one
    definition: the engine filters the candidates with it and the policies
    (called by the engine) apply no cap of their own."""
    vcspec = spec.vcs.get(vc) if hasattr(spec.vcs, "get") else None
    own: int | None = getattr(vcspec, "max_preemptions", None)
    return own if own is not None else config.preemption_cap


@overload
def under_cap(preemptions: float, cap: float) -> bool: ...
@overload
def under_cap(preemptions: npt.NDArray[np.int64], cap: float) -> npt.NDArray[np.bool_]: ...
def under_cap(preemptions: float | npt.NDArray[np.int64], cap: float) -> bool | npt.NDArray[np.bool_]:
    """The one test of "below the preemption cap P": a BE job preempted ``preemptions``
    times may be chosen by the policy again. The engine (``policy_candidates``), the
    policies' own ``choose`` functions (standalone use) and the wait reasons all ask this
    (elementwise for FitGpp's numpy columns)."""
    return preemptions < cap


def policy_candidates(job: JobRecord, running: Iterable[JobRecord], cap: float) -> list[JobRecord]:
    """Stage 2's candidates for ``job``: running BE jobs of its VC under the cap, on its chain.

    The engine asks the policy with exactly these (``Engine._ask_policy``). Returns []
    unless ``job`` is a TE job. ``running`` are JobRecords; those in their grace period
    already (PREEMPTING) are not candidates twice, nor jobs running on lent cells (stage 1's
    business) or on another chain than the one ``job`` must use.
    """
    cls = job.request.job_class
    if cls is not JobClass.TE:
        return []
    vc = job.request.vc
    chain = getattr(job, "chain", None)   # resolved by the engine; None = any chain
    out = []
    for rec in running:
        req = rec.request
        if req.job_class is JobClass.OPPORTUNISTIC or not may_preempt(cls, req.job_class, req.vc == vc):
            continue   # opportunistic victims are stage 1's, never the policy's
        if getattr(rec, "state", JobState.RUNNING) is not JobState.RUNNING:
            continue
        if getattr(rec, "opportunistic", False):
            continue  # a BE job running on lent cells is stage 1's business, not the policy's
        if not under_cap(int(getattr(rec, "preemptions", 0) or 0), cap):
            continue
        if chain is not None and getattr(rec, "bound_chain", chain) != chain:
            continue
        out.append(rec)
    return out


def lender_grace(spec: ClusterSpec, lender: str) -> float:
    """Stage 1's grace bound: an opportunistic job on cells that ``lender`` takes back for a
    guaranteed job stops within the lender's ``opportunisticGrace`` (spec, per VC), whatever
    grace it asked. The borrower never decides how long the owner waits."""
    return float(spec.vcs[lender].opportunistic_grace)


def max_grace(spec: ClusterSpec, vc: str) -> float:
    """Stage 2's grace bound: a BE job the policy preempts for a TE job of ``vc`` stops within
    the VC's ``maxGrace`` (spec, per VC)."""
    return float(spec.vcs[vc].max_grace)


@dataclass
class Stage:
    name: str
    victims: list[str]
    reason: str


@dataclass
class PreemptionPlan:
    stages: list[Stage] = field(default_factory=list)

    @property
    def victims(self) -> list[str]:
        return [v for st in self.stages for v in st.victims]

    @property
    def reason(self) -> str:
        return "; ".join(f"[{st.name}] {st.reason}" for st in self.stages if st.victims or st.reason)


def plan(job: JobRecord, *, opportunistic_victims: Iterable[str] = (), fits_without_policy: bool,
         running: Iterable[JobRecord] = (), view: ClusterView | None = None, now: float = 0.0,
         policy: PreemptionPolicy | None = None, cap: int = 1) -> PreemptionPlan:
    """Both stages for one job, in order.

    ``opportunistic_victims`` are what the allocator named for the job's grant
    (stage 1). ``fits_without_policy`` says whether the job has cells once
    those leave; if not, and the job is TE, ``policy.choose`` is asked
    (stage 2) with the candidates of ``policy_candidates``.
    """
    out = PreemptionPlan()
    opp = sorted(set(opportunistic_victims))
    if opp:
        out.stages.append(Stage(STAGE_STRICT, opp,
                                f"opportunistic jobs on this VC's cells give way first: {', '.join(opp)}"))
    if fits_without_policy or policy is None:
        return out
    cands = policy_candidates(job, running, cap)
    if not cands:
        if job.request.job_class is JobClass.TE:
            out.stages.append(Stage(STAGE_POLICY, [],
                                    f"no running BE job of VC {job.request.vc} below the cap P={cap}"))
        return out
    if view is None:   # every policy weighs the candidates against the nodes' free resources
        raise ValueError("view: the preemption policy needs the cluster view to choose victims")
    victims, reason = policy.choose(job, cands, view, now)
    out.stages.append(Stage(STAGE_POLICY, list(victims), reason))
    return out


def requeue_position(queue_classes: list[JobClass]) -> int:
    """Where a preempted BE job re-enters its VC's queue: after the queued TE
    jobs (TE goes first), before every other BE job (the paper's "top of the queue")."""
    i = 0
    while i < len(queue_classes) and queue_classes[i] is JobClass.TE:
        i += 1
    return i


