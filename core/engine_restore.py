"""Engine.restore: rebuild one job from its stored record after a restart.

Queued jobs go back to their place in their VC's queue, the journaled
``queue_key`` (``Engine.restore_order`` lists records in the order to
restore them); jobs that held cells re-bind exactly the placement they had through
``Allocator.restore`` (HiveD keeps bindings with the pods: HiveD, OSDI '20, §4), so the
allocator and the engine's view agree with what is really running. An allocator that
already holds the job's grant (one reconfigured by ``Allocator.reconfigure`` for a spec
reload) is trusted when it holds the same GPUs, and the restore is refused otherwise.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .engine_records import JobRecord
from .engine_validate import RequestError, check
from .grant import Grant
from .jobs import HOLDING, JobState

if TYPE_CHECKING:
    from .engine_books import EngineBooks
    from .engine_control import JobControl


class Binding(Grant):
    """A grant as stored: what ``Allocator.restore`` takes back."""

    @property
    def cells(self) -> list[str]:
        return [c for p in self.pods for c in p.cells]

    def to_dict(self) -> dict[str, Any]:
        """The plain form ``Allocator.restore`` accepts (its public input, no internals).

        Pods that recorded their cell address re-bind that exact cell; otherwise
        the allocator finds the smallest cell holding each pod's GPUs.
        """
        d: dict[str, Any] = {"owner": self.owner, "vc": self.vc, "chain": self.chain,
             "opportunistic": self.opportunistic, "priority": self.priority,
             "pods": [{"rank": p.rank, "node": p.node, "gpus": list(p.gpus)} for p in self.pods]}
        if self.pods and all(len(p.cells) == 1 for p in self.pods):
            d["cells"] = [p.cells[0] for p in self.pods]
            d["gpus"] = [len(p.gpus) for p in self.pods]
        return d


def _gpus(g: Any) -> list[tuple[str, tuple[int, ...]]]:
    return sorted((p.node, tuple(sorted(p.gpus))) for p in g.pods)


def _same_gpus(held: Any, b: Binding) -> bool:
    return bool(held.opportunistic) == b.opportunistic and held.chain == b.chain and _gpus(held) == _gpus(b)


def restore_record(books: EngineBooks, control: JobControl, rec: JobRecord) -> None:
    """Rebuild one job in ``books`` (``Engine.restore``)."""
    if not isinstance(rec, JobRecord):
        raise RequestError("record", f"must be a JobRecord, got {type(rec).__name__}")
    if rec.job_id in books.jobs:
        raise RequestError("job_id", f"{rec.job_id!r} already exists")
    res = check(rec.request, books.spec)
    if not rec.pod_gpus:
        rec.pod_gpus, rec.pod_demands = res.pod_gpus, res.pod_demands
        rec.want_level = rec.level = res.want_level
    rec.default_share = res.default_share
    rec.chain = res.chain
    if rec.state in HOLDING:
        if rec.placement is None:
            raise RequestError("placement", f"{rec.job_id} is {rec.state.value} but has no placement")
        p = rec.placement
        b = Binding(rec.job_id, rec.request.vc, p.chain, p.opportunistic,
                    0 if p.opportunistic else 1, list(p.pods))
        held = books.alloc.grant_of(rec.job_id)
        if held is None:
            books.alloc.restore(b.to_dict())
        elif not _same_gpus(held, b):   # a reconfigured allocator already holds it: it must agree
            raise RequestError("placement", f"{rec.job_id}: the allocator holds {_gpus(held)} "
                                            f"({'opportunistic' if held.opportunistic else 'guaranteed'}), "
                                            f"the record says {_gpus(b)}")
        books.jobs[rec.job_id] = rec
        rec.placement = None
        books.charge(rec, b)   # books the placement again; the state stays as journaled
        if rec.state is JobState.PREEMPTING and rec.grace_deadline is not None and not rec.killed:
            books.timer(rec.grace_deadline, "grace", rec)
        if rec.limit_at is not None and not rec.timed_out:
            books.timer(rec.limit_at, "limit", rec)
        if rec.state is JobState.PLACED and not rec.waiting_for:
            books.ready.append(rec.job_id)
        for v in rec.waiting_for:
            books.waiters.setdefault(v, set()).add(rec.job_id)
        return
    books.jobs[rec.job_id] = rec
    if rec.state is JobState.QUEUED:
        books.arm_relax(rec, rec.queued_since if rec.queued_since is not None else rec.submitted)
        books.enqueue_restored(rec)
        control.note_deps(rec)
        if rec.not_before:
            books.timer(rec.not_before, "backoff", rec)
