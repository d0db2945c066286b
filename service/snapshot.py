"""The restart snapshot: the engine as it stood at a clean stop, plus the journal's tail.

A full restart replays the journal: every job's JSON record is parsed, validated
against the spec and restored into a new engine and allocator (about 0.2 ms a job).
``SchedulerService.close`` therefore also stores the engine itself (with the cell
exchange's arbiter and the records the spec could not restore) as one pickled
snapshot, in the same SQLite file and one transaction (``SqliteStore.save_snapshot``).
The next start loads it and then restores, the usual way, only the jobs written
after it: the journal's tail (``SqliteStore`` stamps every job write with a rising
revision, and the snapshot with the revision it holds every write up to).

The snapshot is an accelerator, never the truth: whenever it cannot be trusted the
start replays the whole journal, exactly as without one, and logs one line saying
why. It is refused when

- its key differs: another snapshot format, another hived build (a digest of
  ``hived.core``'s sources), another spec in force, scheme or policies;
- its body does not match its sha256 or does not unpickle (truncated, damaged);
- it is older than the journal in a way the tail cannot mend: a job it holds was
  written again after it, a job it holds that had not ended is gone from the
  journal, a stored job is neither in it nor in the tail, or the cell exchange's
  document changed.

A start that is not clean (``kill -9``, a power cut) finds the snapshot of the
clean stop before it, with jobs written since: the tail mends new submissions and
jobs forgotten by retention; anything else replays in full.

The body is a pickle, loaded only from the service's own database (mode 0600 in
its private data directory): whoever can write there can already change any job.
Its job records are in their lean form (core/engine_records.py ``lean_reducer``:
values in field order, equal names and history entries shared), which only the
code that wrote it reads: the key holds the digest of ``hived.core``. The service
reads the snapshot (``early``) before it builds an engine: a usable one brings its own.
"""
from __future__ import annotations

import copyreg
import dataclasses
import functools
import gc
import hashlib
import io
import json
import logging
import pickle
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hived.core.engine_records import JobRecord, lean_reducer
from hived.core.jobs import HOLDING

if TYPE_CHECKING:
    from hived.core.engine import Engine

# the SchedulerService (scheduler.py), which imports this module: named, not imported
Service = Any

log = logging.getLogger("hived.service")

SNAPSHOT_FORMAT = 3   # 2: the body carries each record's hash; 3: records in their lean form
_CODE_ROOTS = ("core",)
_HIVED = Path(__file__).resolve().parent.parent   # the folder holding core/ and service/


@functools.lru_cache(maxsize=2)
def code_digest(here: Path = _HIVED) -> str:
    """sha256 over the sources of ``hived.core`` (under ``here``): the classes the body pickles,
    and the lean form of the job records (core/engine_records.py)."""
    h = hashlib.sha256()
    for root in _CODE_ROOTS:
        for f in sorted((here / root).rglob("*.py")):
            h.update(str(f.relative_to(here)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def snapshot_key(svc: Service) -> str | None:
    """What a snapshot must have been taken with to be used; None: no snapshot (no spec text journaled)."""
    spec = svc.store.get_meta("spec")
    if spec is None:
        return None
    qp, pp, cfg = svc.policies
    what = {"format": SNAPSHOT_FORMAT, "code": code_digest(), "scheme": svc.scheme,
            "spec": hashlib.sha256(spec.encode()).hexdigest(), "queue_policy": repr(qp),
            "preemption_policy": repr(pp), "config": repr(cfg)}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


def dumps(state: Any) -> bytes:
    """The snapshot body: a pickle with the job records in their lean form (core/engine_records.py)."""
    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = {**copyreg.dispatch_table, JobRecord: lean_reducer({})}
    pickler.dump(state)
    return out.getvalue()


def save(svc: Service, now: float) -> bool:
    """Store the snapshot of ``svc`` (under its lock, every change written). False when there
    is nothing to trust (degraded, decisions or exchange moves not written, no journaled spec)
    or it failed."""
    if svc.degraded is not None or svc.pending or svc.exchange.unsaved:
        return False
    if not svc.at_rest():   # a round's decisions not yet acted on, or a standby's stale engine
        return False
    key = snapshot_key(svc)
    if key is None:
        return False
    try:
        body = dumps((svc.eng, svc.exchange.arb, svc.extra, svc.store.record_hashes()))
        return svc.store.save_snapshot(key, svc.store.exchange_digest(), body, now)
    except Exception as exc:   # optional: the next start replays the journal in full
        log.warning("restart snapshot not written (%s: %s); the next start replays the journal",
                    type(exc).__name__, exc)
        return False


@dataclasses.dataclass
class Loaded:
    """A snapshot found usable: its engine, arbiter and unrestorable records, and the tail
    (records written after it, or stored and in neither), in submission order."""
    eng: Engine
    arb: Any
    extra: dict[str, dict]
    tail: list[tuple[dict, float | None]]
    jobs: int   # stored jobs


def load(svc: Service) -> Loaded | str | None:
    """The usable snapshot, the reason it is not (str), or None when there is none."""
    snap = svc.store.load_snapshot()
    if snap is None:
        return None
    if snap.key != snapshot_key(svc):
        return "taken with another spec, hived build or scheduling policy"
    if hashlib.sha256(snap.body).hexdigest() != snap.sha256:
        return "damaged or truncated (its checksum does not match)"
    try:
        eng, arb, extra, hashes = pickle.loads(snap.body)
    except Exception as exc:
        return f"unreadable ({type(exc).__name__})"
    if svc.store.exchange_digest() != snap.exchange:
        return "older than the journal (the cell exchange changed since)"
    changed = [j for j, h in svc.store.record_hashes(snap.rev).items() if hashes.get(j) != h]
    if changed:   # rows removed since (retention) are simply absent; a row unlike its write is not
        return f"not the journal's picture (the stored record of job {changed[0]} changed behind hived)"
    stored = svc.store.job_ids()
    for jid in svc.store.written_after(snap.rev):
        if jid in eng or jid in extra:
            return f"older than the journal (job {jid} changed since)"
    for rec in list(eng.jobs()):
        if rec.job_id not in stored:
            if not rec.state.terminal:
                return f"older than the journal (job {rec.job_id} is gone from it)"
            eng.forget(rec.job_id)   # removed by retention after the snapshot
    for jid in [j for j in extra if j not in stored]:
        del extra[jid]
    tail = [j for j in stored if j not in eng and j not in extra]   # submitted after the snapshot
    eng.forget_attempts()   # as a fresh engine: every queued job is tried at the next round
    return Loaded(eng, arb, extra, svc.store.load_jobs_by_id(tail), len(stored))


def adopt(svc: Service, loaded: Loaded) -> list[str]:
    """Make the snapshot's engine the service's; the ids of the jobs holding cells in it."""
    svc.eng, svc.exchange.arb = loaded.eng, loaded.arb
    svc.extra.update(loaded.extra)
    svc.journaled.update({j: ("extra",) for j in loaded.extra})
    holding = []
    for rec in loaded.eng.jobs():
        svc.journaled[rec.job_id] = svc.fingerprint(rec)
        if not rec.state.terminal:
            svc.live.add(rec.job_id)
        if rec.state in HOLDING:
            holding.append(rec.job_id)
    return holding


def early(svc: Service) -> Loaded | str | None:
    """``load``, before the service builds an engine: a usable snapshot brings its own, and the
    spec's fresh one is not built at all."""
    was = gc.isenabled()
    gc.disable()   # a million objects at once: the collector would walk them again and again
    try:
        loaded = load(svc)
        if isinstance(loaded, Loaded):
            # they live as long as the service: keep the collector's passes off them
            gc.freeze()
        return loaded
    finally:
        if was:
            gc.enable()


def start(svc: Service, loaded: Loaded | str | None) -> tuple[list[str], list[tuple[dict, float | None]], int, bool]:
    """Begin a restart from what ``early`` found: (ids of the snapshot's jobs holding cells, the rows
    still to restore, stored jobs, whether the snapshot was used). Without a usable snapshot: the
    service's fresh engine with the exchange restored, and every stored row."""
    if isinstance(loaded, Loaded):
        return adopt(svc, loaded), loaded.tail, loaded.jobs, True
    if loaded is not None:
        log.warning("restart snapshot not used, replaying the whole journal: it is %s", loaded)
    svc.exchange.restore()   # before the jobs: cells still lent move to their borrowers again
    rows = svc.store.load_jobs_with_keys()
    return [], rows, len(rows), False
