"""The jobs of a spec reload: a new engine over the reconfigured allocator.

``SchedulerService.reload_spec`` reconfigures its engine's allocator with
``Allocator.reconfigure`` (the one reconfiguration), then builds a new engine
over that allocator and restores every job of the old engine into it: the
allocator already holds each holding job's grant, so the restore only checks
that it holds the GPUs the record names (``core/engine_restore.py``).
"""
from __future__ import annotations

from hived.core.engine import Engine, RequestError
from hived.core.engine_records import JobRecord
from hived.core.jobs import HOLDING


def refusal(eng: Engine, exc: ValueError) -> RequestError:
    """The answer to a reconfiguration the allocator refused: the job to blame, when it names one."""
    rec = eng.find(getattr(exc, "owner", None) or "")
    if rec is None:
        return RequestError("spec", f"{exc}; nothing changed")
    return RequestError("spec", f"job {rec.job_id} ({rec.state.value}) does not fit the new spec: {exc}; "
                        "nothing changed")


def engine_over(old: Engine, eng: Engine, downgraded: set[str], now: float) -> Engine:
    """``eng`` (over the reconfigured allocator) holding every job of ``old``; a downgraded job's
    record now says opportunistic. RequestError (``eng`` is then to be dropped) when one does not fit."""
    holding: set[str] = set()
    for rec in old.restore_order():
        d = rec.to_dict()
        if rec.job_id in downgraded:
            d["placement"]["opportunistic"] = True
        try:
            eng.restore(JobRecord.from_dict(d))
        except Exception as exc:
            raise RequestError("spec", f"job {rec.job_id} ({rec.state.value}) does not fit the new "
                               f"spec: {exc}; nothing changed") from None
        if rec.state in HOLDING:
            holding.add(rec.job_id)
        if rec.job_id in downgraded:
            new = eng.job(rec.job_id)
            new.history.append((now, new.state.value, "downgraded to opportunistic: its cells no "
                                "longer fit the reloaded spec"))
    stray = sorted(set(eng.alloc.grants()) - holding)
    if stray:
        raise RequestError("spec", f"the allocator holds cells for {', '.join(stray)}, which no job holds; "
                           "nothing changed")
    return eng
