"""Why a job waits, in one line a person can act on.

The engine writes ``JobRecord.wait_reason`` with these functions when a
round tries a job and it does not run (and when a job goes back to its queue),
so the service, the REST API, the CLI, the magics and the dashboards all show
the same text. The line names what the job waits for (GPUs, the cell shape
its affinity asks), its VC's quota and who holds the VC's cells, the
preemption cap when it is what stops a TE job, when soft affinity relaxes and
when a retry is due. Times are on the engine's clock (``t=...``) with the
seconds left beside them.
"""
from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from .jobs import JobClass, JobState
from .timefmt import at

if TYPE_CHECKING:
    from .engine_books import EngineBooks
    from .engine_records import JobRecord

MAX_NAMED = 4   # holders named one by one; the rest are counted



def shape(books: EngineBooks, rec: JobRecord) -> str:
    sizes = list(rec.pod_gpus)
    if len(sizes) == 1:
        text = f"1 pod of {sizes[0]} GPU{'s' if sizes[0] != 1 else ''}"
    elif len(set(sizes)) == 1:
        text = f"{len(sizes)} pods x {sizes[0]} GPUs"
    else:
        text = f"pods of {'+'.join(str(g) for g in sizes)} GPUs"
    lvl = rec.level
    if lvl is not None and rec.chain is not None and len(sizes) > 1:
        levels = books.spec.chains[rec.chain].levels
        name = levels[lvl - 1] if lvl <= len(levels) else f"L{lvl}"
        text += f", all inside one {rec.chain}.{name} cell"
    return text


def holders_text(books: EngineBooks, vc: str) -> str:
    """The VC's biggest guaranteed holders, named; cached until the VC's holders change
    (a blocked head is explained every round that tries it: keep that cheap)."""
    ver = books.held_ver[vc]
    hit = books.holders_text.get(vc)
    if hit is not None and hit[0] == ver:
        return hit[1]
    jobs = books.jobs
    held = [jobs[j] for j in books.held[vc]]
    held = [r for r in held if not r.opportunistic]
    text = _holders(held)
    books.holders_text[vc] = (ver, text)
    return text


def _holders(held: list[JobRecord]) -> str:
    if not held:
        return "no job"
    top = heapq.nsmallest(MAX_NAMED, held, key=lambda r: (-sum(r.pod_gpus), r.job_id))
    named: list[str] = []
    for r in top:
        nodes = sorted({p.node for p in r.placement.pods}) if r.placement is not None else []
        where = f" on {', '.join(nodes[:2])}{'...' if len(nodes) > 2 else ''}" if nodes else ""
        named.append(f"{r.job_id} ({r.gpus} GPUs, {r.request.job_class.value}, {r.state.value}{where})")
    more = len(held) - MAX_NAMED
    return ", ".join(named) + (f" and {more} more" if more > 0 else "")


def _failure(rec: JobRecord) -> str:
    for _, state, why in reversed(rec.history):
        if state == JobState.QUEUED.value and why:
            return why
    return "requeued"


def _vc_text(books: EngineBooks, rec: JobRecord) -> tuple[str, int]:
    vc = rec.request.vc
    chains = [rec.chain] if rec.chain is not None else list(books.spec.chains)
    cap = sum(books.vc_cap[vc][c] for c in chains)
    used = sum(books.vc_used[vc][c] for c in chains)
    free = max(books.vc_cap[vc][c] - books.vc_used[vc][c] for c in chains)
    text = (f"VC {vc}'s quota is {cap} GPUs{'' if rec.chain is None else ' in ' + rec.chain}: "
            f"{used} held by {holders_text(books, vc)}, {max(0, cap - used)} free")
    spec_cap = books.spec_capacity(vc)
    lent = sum(spec_cap[c] for c in chains) - cap
    if lent > 0:
        text += f"; {lent} more GPUs are lent by cell exchange and come back when the window ends"
    return text, free


def _grace_ends(books: EngineBooks, job_ids: list[str]) -> list[float]:
    """When the grace periods of ``job_ids`` end, for those asked to stop."""
    deadlines = (books.jobs[v].grace_deadline for v in job_ids)
    return [d for d in deadlines if d is not None]


def _preemption_text(books: EngineBooks, rec: JobRecord, now: float) -> str:
    if rec.request.job_class is not JobClass.TE or books.preemption_policy is None:
        return ""
    if rec.policy_victims:
        ends = _grace_ends(books, rec.policy_victims)
        until = f" (grace periods end at {at(max(ends), now)})" if ends else ""
        return f"BE jobs {', '.join(rec.policy_victims)} are being preempted for it{until}"
    from .policies.preemption_order import preemption_cap, under_cap
    cap = preemption_cap(books.config, books.spec, rec.request.vc)
    capped = [r for r in books.running_of(rec.request.vc)
              if r.request.job_class is JobClass.BE and not r.opportunistic and not under_cap(r.preemptions, cap)]
    if capped:
        ids = ", ".join(r.job_id for r in capped[:MAX_NAMED]) + (" ..." if len(capped) > MAX_NAMED else "")
        return (f"BE jobs {ids} may not be preempted again: the preemption cap is P={cap:g} "
                f"(VC maxPreemptions or the service's preemption_cap)")
    return rec.policy_note


def explain(books: EngineBooks, rec: JobRecord, now: float) -> str:
    """The line for a QUEUED or PLACED job at ``now``."""
    if rec.state is JobState.PLACED:
        if not rec.waiting_for:
            return ""
        ends = _grace_ends(books, rec.waiting_for)
        until = f" (grace periods end at {at(max(ends), now)})" if ends else ""
        return (f"placed on its cells; waiting for opportunistic jobs {', '.join(rec.waiting_for)} "
                f"to leave them{until}")
    if rec.state is not JobState.QUEUED:
        return ""
    if rec.not_before > now:
        return f"retry at {at(rec.not_before, now)} after {_failure(rec)}"
    parts: list[str] = []
    need = rec.gpus
    if rec.request.job_class.guaranteed:
        vc_text, free = _vc_text(books, rec)
        head = f"waits for {need} GPUs ({shape(books, rec)}) in its VC; {vc_text}"
        if free >= need:
            head += "; the free GPUs do not form the cells it needs (fragmented)"
        parts.append(head)
        pre = _preemption_text(books, rec, now)
        if pre:
            parts.append(pre)
    else:
        parts.append(f"opportunistic: waits for {need} idle GPUs ({shape(books, rec)}) anywhere in the cluster")
    if not rec.request.job_class.guaranteed or rec.request.allow_opportunistic:
        chain = rec.chain
        idle = books.free[chain] if chain is not None else max(books.free.values())
        parts.append(f"{idle} GPUs are idle{' in ' + chain if chain else ''}, not enough in cells that fit it "
                     "to run at low priority")
    if rec.relax_at is not None:
        parts.append(f"its soft affinity relaxes to a larger cell at {at(rec.relax_at, now)}")
    return "; ".join(parts)


def behind(head: JobRecord) -> str:
    return (f"behind {head.job_id}, the head of VC {head.request.vc}'s queue, which waits: "
            f"first in, first out, nothing passes it")
