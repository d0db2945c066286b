"""A scheduling round's commit, made durable outside the service's lock.

A round decides and commits under the lock, then lets go of it and waits for the fsync
that covers its commit (the store's group commit: submissions committed meanwhile share
it). Only then are its decisions carried out (launches, kills): nothing starts that a
crash could forget. Requests are answered meanwhile; a request that changes a job the
round decided about is safe, because carrying out a decision looks at the job's state
then (a START of a job cancelled in between is skipped).

When the fsync fails, whether the commit is on disk is unknown: the service turns
degraded, the round's jobs are written again in full, and the decisions wait in the
service's pending list for the first flush that succeeds (as when a commit itself fails).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .store import JournalWriteError


@dataclass
class Unsynced:
    """A round's commit not yet known to be on disk, and what it decided."""
    ticket: int
    ids: list[str]                                   # the jobs the commit covered
    decisions: list = field(default_factory=list)    # carried out once it is durable


def act_once_durable(svc, batch: list[Unsynced]) -> None:
    """Outside the lock: fsync through the batch's commits, then carry out their decisions."""
    if not batch:
        return
    try:
        svc.store.sync_through(max(b.ticket for b in batch))
    except JournalWriteError as exc:
        with svc._lock:
            for b in batch:
                for jid in b.ids:
                    if jid in svc._seen:
                        svc._seen[jid] = None    # no fingerprint matches: the next flush writes it in full
                    if svc.eng.find(jid) is not None:
                        svc._live.add(jid)      # also a job that ended in this commit
            svc._pending = [d for b in batch for d in b.decisions] + svc._pending
            svc._degrade(exc)
        return
    with svc._lock:
        now = svc.clock()
        for b in batch:
            svc._execute(b.decisions, now)
