"""The jobs of a spec reload: a new engine over the reconfigured allocator.

``SchedulerService.reload_spec`` reconfigures its engine's allocator with
``Allocator.reconfigure`` (the one reconfiguration), then builds a new engine
over that allocator and restores every job of the old engine into it: the
allocator already holds each holding job's grant, so the restore only checks
that it holds the GPUs the record names (``core/engine_restore.py``).
"""
from __future__ import annotations

import logging
from typing import Any

from hived.core.engine import Engine, RequestError
from hived.core.engine_records import JobRecord
from hived.core.jobs import HOLDING
from hived.core.spec import SpecError

from .data_dir import load_spec, spec_text
from .degraded import ServiceDegraded
from .spec_journal import SOURCE_RELOAD

# the SchedulerService (scheduler.py), which imports this module: named, not imported
Service = Any

log = logging.getLogger("hived.service")


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


def reload(svc: Service, path_or_text) -> dict:
    """Reconfigure: the engine's allocator reconfigured by ``Allocator.reconfigure``
    (the one reconfiguration, HiveD's), then a new engine over it with every job
    restored. Every door reaches this (REST, the extension, ``hived spec reload``,
    SIGHUP, the admin widget, the Kubernetes service); it only journals around it.

    A holding guaranteed job whose cells no longer fit its VC keeps its GPUs
    as opportunistic (HiveD's downgrade on reconfiguration) and is named in
    ``downgraded``. A job that fits not even so (its VC or its cells are
    gone) refuses the spec, changing nothing. The new spec text is journaled
    with the jobs. Answer: ``{"ok", "vcs", "chains", "downgraded"}``."""
    try:
        new_spec = load_spec(path_or_text)
    except SpecError as exc:
        raise RequestError(exc.path, exc.problem) from None
    text = spec_text(path_or_text)   # a file read: before the lock
    with svc.lock:
        now = svc.clock()
        svc.require_journal(now)
        svc.exchange.before_reload()
        alloc = svc.eng.alloc
        try:
            downgraded = alloc.reconfigure(new_spec)
        except ValueError as exc:    # BindingConflict: a job that fits not even downgraded
            raise refusal(svc.eng, exc) from None
        try:
            eng = engine_over(svc.eng, svc.new_engine(alloc), set(downgraded), now)
        except RequestError:
            alloc.undo_reconfigure()
            raise
        before = (svc.eng, svc.spec, svc.exchange.arb, svc.journaled, svc.spec_source)
        svc.eng, svc.spec = eng, new_spec
        svc.exchange.after_reload()
        svc.journaled = {j: None for j in svc.journaled}   # rewrite all: queue keys changed
        try:
            svc.write_live(now, meta=None if text is None else {"spec": text, "spec_source": SOURCE_RELOAD})
        except ServiceDegraded:
            svc.eng, svc.spec, svc.exchange.arb, svc.journaled, svc.spec_source = before   # not stored: not taken
            alloc.undo_reconfigure()
            raise
        svc.spec_source = SOURCE_RELOAD
        for jid in downgraded:
            log.warning("spec reload: job %s downgraded to opportunistic", jid)
        return {"ok": True, "vcs": sorted(new_spec.vcs), "chains": sorted(new_spec.chains),
                "downgraded": downgraded}
