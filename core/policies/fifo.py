"""FIFO with packing: the YARN-CS policy HiveD's evaluation uses (HiveD, OSDI '20, §5.1).

Order: submission order, with preempted jobs back at the head (the engine
puts them there). TE jobs go before BE and opportunistic jobs when
``te_first`` (the FitGpp paper, OpML '19, queues TE ahead so that a TE job can preempt BE
work); within a class, first come first served. The first job that does not
fit holds a reservation; later jobs pass it only when they cannot delay it
(the engine's backfill, core/engine_backfill.py), so a large job is not starved
by a stream of small ones. ``backfill = True`` here means something blunter:
try every queued job, with no reservation.

Packing is where a job lands, not its order: the quota baseline packs by
best fit (core/quota.py), HiveD's buddy cell allocation packs within cells.

``preserves_order = True`` tells the engine that ``order`` returns the
engine's own queue order, so the engine walks its queue in place and never
builds the full ordered list (what makes a round with thousands of queued
jobs cheap).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..jobs import JobClass

if TYPE_CHECKING:
    from ..engine_records import JobRecord
    from ..engine_view import ClusterView


@dataclass
class FifoPolicy:
    te_first: bool = True
    name: str = "fifo"
    preserves_order: bool = True
    backfill: bool = False

    def order(self, vc: str, queued: Sequence[JobRecord], view: ClusterView, now: float) -> list[JobRecord]:
        if not self.te_first:
            return list(queued)
        te = [r for r in queued if r.request.job_class is JobClass.TE]
        rest = [r for r in queued if r.request.job_class is not JobClass.TE]
        return te + rest
