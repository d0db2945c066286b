"""JobRecord: what the engine knows about one job, and its JSON form.

The record is the engine's unit of state. It is a plain dataclass so that the
service can journal it (``to_dict``) and rebuild the engine after a restart
(``JobRecord.from_dict`` then ``Engine.restore``). Everything in ``to_dict``
is JSON-safe: enums become their values, tuples become lists.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from operator import itemgetter
from typing import Any

from .jobs import Affinity, JobClass, JobRequest, JobState, Placement, PodGroup, PodPlacement


def request_to_dict(req: JobRequest) -> dict[str, Any]:
    return {
        "user": req.user, "vc": req.vc, "command": req.command,
        "job_class": req.job_class.value,
        "groups": [{"pods": g.pods, "gpus": g.gpus, "cell_type": g.cell_type,
                    "cpus": g.cpus, "memory_gb": g.memory_gb} for g in req.groups],
        "chain": req.chain, "affinity": req.affinity.value,
        "grace_period": req.grace_period, "allow_opportunistic": req.allow_opportunistic,
        "name": req.name, "env": dict(req.env), "workdir": req.workdir,
        "duration": req.duration, "estimate": req.estimate,
        "max_retries": req.max_retries, "labels": dict(req.labels),
        "k8s_template": req.k8s_template, "time_limit": req.time_limit, "after": list(req.after),
    }


def request_from_dict(d: dict[str, Any]) -> JobRequest:
    d = dict(d)
    d["job_class"] = JobClass(d.get("job_class", "te"))
    d["affinity"] = Affinity(d.get("affinity", "hard"))
    d["groups"] = [PodGroup(**g) for g in d.get("groups", [{}])]
    d["after"] = list(d.get("after") or [])
    return JobRequest(**d)


def placement_to_dict(p: Placement | None) -> dict[str, Any] | None:
    if p is None:
        return None
    return {"chain": p.chain, "opportunistic": p.opportunistic,
            "pods": [{"rank": q.rank, "node": q.node, "gpus": list(q.gpus), "cells": list(q.cells)}
                     for q in p.pods]}


def placement_from_dict(d: dict[str, Any] | None) -> Placement | None:
    if d is None:
        return None
    pods = tuple(PodPlacement(q["rank"], q["node"], tuple(q["gpus"]), tuple(q.get("cells", ())))
                 for q in d["pods"])
    return Placement(d["chain"], pods, bool(d.get("opportunistic", False)))


# fields the engine resolves again at restore, never read from a journal
NOT_JOURNALED = frozenset({"chain", "default_share", "policy_note", "epoch"})


@dataclass(eq=False)
class JobRecord:
    """One job as the engine tracks it.

    Times are on the caller's clock. ``queued_time`` accumulates every stretch
    spent in the queue (a preempted job queues again), ``first_started`` is
    the first start ever: the simulator's queueing delay is
    ``first_started - submitted``.
    """

    job_id: str
    request: JobRequest
    state: JobState = JobState.QUEUED
    submitted: float = 0.0
    started: float | None = None          # start of the current / last run
    first_started: float | None = None
    ended: float | None = None
    placement: Placement | None = None
    history: list[tuple[float, str, str]] = field(default_factory=list)   # [(time, state value, reason)]
    preemptions: int = 0
    attempts: int = 0                        # runs started (a retry or a requeue adds one)
    failures: int = 0                        # failed runs (what the retry cap counts)
    failure_class: str | None = None
    exit_code: int | None = None
    opportunistic: bool = False              # the current run is low priority
    pod_demands: list[tuple[float, float, float]] = field(default_factory=list)  # per pod (cpus, memory_gb, gpus)
    pod_gpus: list[int] = field(default_factory=list)     # [gpus] per pod, resolved
    want_level: int | None = None         # affinity level asked for (None = no gang constraint)
    level: int | None = None              # level currently tried (soft affinity relaxes it)
    relax_at: float | None = None         # when soft affinity relaxes next
    relaxations: int = 0
    not_before: float = 0.0                  # retry back-off: not placed before this time
    queued_since: float | None = None
    queued_time: float = 0.0
    grace_deadline: float | None = None   # PREEMPTING: when the KILL decision is due
    killed: bool = False                     # KILL decision already issued
    started_pending: bool | None = None   # True between the START decision and on_started
    cancel_requested: bool = False           # PREEMPTING because a user cancelled it
    waiting_for: list[str] = field(default_factory=list)  # PLACED: victims still holding our cells
    policy_victims: list[str] = field(default_factory=list)  # QUEUED TE job: BE jobs preempted for it, not gone yet
    run_time: float = 0.0                    # simulator: time run so far (kept across preemptions)
    progress: tuple[float, float] | None = None # (done, total) from report_progress
    reason: str = ""                         # last scheduling reason (why queued, why failed)
    gpus_preempted: int = 0                  # GPUs this job lost to preemption, summed
    last_error: str = ""                     # the last failed run's log tail / launcher message
    # why a QUEUED or PLACED job is not running, in words a person can act on (the cells it
    # waits for and who holds them, its VC's quota, the preemption cap, when affinity relaxes,
    # when a retry is due); recomputed by the engine's rounds, "" once it runs or ends.
    # Every door shows this one text (engine_reasons.py writes it).
    wait_reason: str = ""
    # the job's place in its VC's queue: lower goes first. Submissions take rising
    # keys, a job put back at the head a key below every other; journaled, so a
    # restart rebuilds the same order (``Engine.restore``).
    queue_key: float | None = None
    # job control (core/engine_control.py): the current run's time-limit deadline, stopped by it,
    # and who holds the queued job ("" when not held)
    limit_at: float | None = None
    timed_out: bool = False
    held_by: str = ""
    last_placement: Placement | None = None   # where its last run ran (kept after it ended)
    # Resolved by the engine from the request and the spec at submission and at
    # restore (never journaled: a spec reload may resolve them differently).
    chain: str | None = field(default=None, repr=False)     # the cell chain it may use; None = any
    default_share: bool = field(default=True, repr=False)      # its pods ask for no CPUs/RAM of their own
    policy_note: str = field(default="", repr=False)           # why the preemption policy found no victims
    # Bumped by every change of state (the ``mark_*`` methods below). A timer the engine sets
    # (grace, soft-affinity relaxation, retry back-off) carries the epoch it was set in and
    # acts only while the job is still in it: a timer of an earlier preemption, placement or
    # queueing never acts on a later one. Not journaled: a restore re-arms every timer.
    epoch: int = field(default=0, repr=False)

    @property
    def bound_chain(self) -> str | None:
        """The chain of the cells it holds now (None when it holds none)."""
        return self.placement.chain if self.placement is not None else None

    @property
    def id(self) -> str:
        return self.job_id

    @property
    def vc(self) -> str:
        return self.request.vc

    @property
    def gpus(self) -> int:
        return sum(self.pod_gpus)

    @property
    def remaining(self) -> float | None:
        """Simulator: run time left (``duration`` minus what already ran)."""
        d = self.request.duration
        return None if d is None else max(0.0, d - self.run_time)

    # ---------------------------------------------------------------- state changes
    # The only code that writes ``state`` and ``wait_reason`` (tests/layout/test_job_state_writes.py
    # forbids it elsewhere): each change names its reason in the history and starts a new epoch.

    def _enter(self, now: float, state: JobState, reason: str) -> None:
        self.state = state
        self.epoch += 1
        self.history.append((now, state.value, reason))

    def note(self, now: float, reason: str) -> None:
        """Add a line to the history without changing the state."""
        self.history.append((now, self.state.value, reason))

    def mark_queued(self, now: float, reason: str, wait_reason: str) -> None:
        """Back in (or first into) its VC's queue."""
        self._enter(now, JobState.QUEUED, reason)
        self.wait_reason = wait_reason

    def mark_placed(self, now: float, reason: str) -> None:
        """Cells bound; it starts once the victims named in ``waiting_for`` have left."""
        self._enter(now, JobState.PLACED, reason)
        self.wait_reason = ""

    def mark_running(self, now: float) -> None:
        """The launcher started it."""
        self._enter(now, JobState.RUNNING, "started")
        self.wait_reason = ""

    def mark_preempting(self, now: float, reason: str, deadline: float) -> None:
        """Told to stop: the KILL is due at ``deadline`` (a new epoch: earlier grace timers are void)."""
        self._enter(now, JobState.PREEMPTING, reason)
        self.grace_deadline = deadline
        self.killed = False
        self.wait_reason = ""

    def shorten_grace(self, now: float, deadline: float, reason: str) -> bool:
        """Bring the KILL of a PREEMPTING job forward to ``deadline``; False when it is not later."""
        if self.state is not JobState.PREEMPTING or self.killed:
            return False
        if self.grace_deadline is not None and self.grace_deadline <= deadline:
            return False
        self.grace_deadline = deadline
        self.note(now, reason)
        return True

    def mark_killed(self) -> None:
        """The KILL decision of the current preemption went out."""
        self.killed = True

    def mark_ended(self, now: float, state: JobState, reason: str, failure_class: str | None = None) -> None:
        if not state.terminal:
            raise ValueError(f"mark_ended: {state.value} is not an end state")
        self.ended = now
        if failure_class is not None:
            self.failure_class = failure_class
        self._enter(now, state, reason)
        self.wait_reason = ""

    def explain_wait(self, text: str) -> None:
        """Why a QUEUED or PLACED job does not run (engine_reasons.py writes the text)."""
        self.wait_reason = text

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id, "request": request_to_dict(self.request),
            "state": self.state.value, "submitted": self.submitted, "started": self.started,
            "first_started": self.first_started, "ended": self.ended,
            "placement": placement_to_dict(self.placement),
            "history": [list(h) for h in self.history],
            "preemptions": self.preemptions, "attempts": self.attempts, "failures": self.failures,
            "failure_class": self.failure_class, "exit_code": self.exit_code,
            "opportunistic": self.opportunistic,
            "pod_demands": [list(p) for p in self.pod_demands], "pod_gpus": list(self.pod_gpus),
            "want_level": self.want_level, "level": self.level, "relax_at": self.relax_at,
            "relaxations": self.relaxations, "not_before": self.not_before,
            "queued_since": self.queued_since, "queued_time": self.queued_time,
            "grace_deadline": self.grace_deadline, "killed": self.killed, "cancel_requested": self.cancel_requested,
            "started_pending": self.started_pending,
            "waiting_for": list(self.waiting_for), "policy_victims": list(self.policy_victims),
            "run_time": self.run_time,
            "progress": list(self.progress) if self.progress else None,
            "reason": self.reason, "gpus_preempted": self.gpus_preempted, "last_error": self.last_error,
            "wait_reason": self.wait_reason, "queue_key": self.queue_key,
            "limit_at": self.limit_at, "timed_out": self.timed_out, "held_by": self.held_by,
            "last_placement": placement_to_dict(self.last_placement),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> JobRecord:
        d = dict(d)
        d["request"] = request_from_dict(d["request"])
        d["state"] = JobState(d.get("state", "queued"))
        d["placement"] = placement_from_dict(d.get("placement"))
        d["last_placement"] = placement_from_dict(d.get("last_placement"))
        d["history"] = [tuple(h) for h in d.get("history", [])]
        d["pod_demands"] = [tuple(p) for p in d.get("pod_demands", [])]
        if d.get("progress") is not None:
            d["progress"] = tuple(d["progress"])
        known = set(cls.__dataclass_fields__) - NOT_JOURNALED
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"JobRecord.from_dict: unknown fields {unknown}")
        return cls(**d)


# ---------------------------------------------------------------- the lean pickled form
# The restart snapshot (service/snapshot.py) pickles every record. As a plain dataclass a
# record pickles as the dicts of its fields, names and values, about 40 objects to build again
# per record. ``lean_reducer`` pickles it instead as one call of ``lean_record`` with the values
# in field order (RECORD_FIELDS, REQUEST_FIELDS), and within one dump (one ``pool``) equal
# names (user, VC, chain, command words), equal history entries and pod demands, and equal pod
# groups are one object, which the pickle writes once and builds once. The snapshot is keyed by a digest of this source
# (service/snapshot.py ``code_digest``): a body is only read by the code that wrote it.

RECORD_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(JobRecord))
REQUEST_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(JobRequest))
_R_REQUEST, _R_HISTORY, _R_DEMANDS, _R_CHAIN = (RECORD_FIELDS.index(k) for k in ("request", "history", "pod_demands",
                                                                                  "chain"))
_Q_USER, _Q_VC, _Q_COMMAND, _Q_GROUPS = (REQUEST_FIELDS.index(k) for k in ("user", "vc", "command", "groups"))
_record_values, _request_values = itemgetter(*RECORD_FIELDS), itemgetter(*REQUEST_FIELDS)
_ENTRY, _DEMAND = (float, str, str), (float, float, float)   # a history entry, a pod's demand
_new = object.__new__


def lean_reducer(pool: dict[Any, Any]) -> Callable[[JobRecord], Any]:
    """The pickle reducer of the lean form (for a ``Pickler.dispatch_table``), sharing through ``pool``."""

    one = pool.setdefault

    def reduce(rec: JobRecord) -> Any:
        d, req = rec.__dict__, rec.request
        q = req.__dict__
        try:
            if len(d) != len(RECORD_FIELDS) or type(req) is not JobRequest or len(q) != len(REQUEST_FIELDS):
                raise KeyError
            rv, qv = list(_record_values(d)), list(_request_values(q))
        except KeyError:   # an attribute beyond the fields: the plain form keeps it
            return object.__reduce_ex__(rec, 2)
        rv[_R_REQUEST] = None   # rebuilt from ``qv``
        # a tuple is shared only when its item types match exactly and it holds no zero, so that
        # 1 and 1.0 (equal), and 0.0 and -0.0 (equal), are never made one
        rv[_R_HISTORY] = [one(h, h) if tuple(map(type, h)) == _ENTRY and h[0] else h for h in rec.history]
        rv[_R_DEMANDS] = [one(p, p) if tuple(map(type, p)) == _DEMAND and 0.0 not in p else p
                          for p in rec.pod_demands]
        if type(rec.chain) is str:
            rv[_R_CHAIN] = one(rec.chain, rec.chain)
        if type(req.user) is str and type(req.vc) is str:
            qv[_Q_USER], qv[_Q_VC] = one(req.user, req.user), one(req.vc, req.vc)
        if type(req.command) is list:
            qv[_Q_COMMAND] = [one(c, c) if type(c) is str else c for c in req.command]
        groups = []
        for g in req.groups:   # frozen: equal groups can be one
            gv = tuple(g.__dict__.values()) if type(g) is PodGroup else ()
            key = (PodGroup, gv, tuple(map(type, gv)))
            groups.append(one(key, g) if gv and 0.0 not in gv else g)
        qv[_Q_GROUPS] = groups
        return lean_record, (tuple(rv), tuple(qv))

    return reduce


def lean_record(rv: tuple[Any, ...], qv: tuple[Any, ...]) -> JobRecord:
    """A record from its lean pickled form (``lean_reducer``)."""
    req = _new(JobRequest)
    req.__dict__ = dict(zip(REQUEST_FIELDS, qv))
    rec = _new(JobRecord)
    rec.__dict__ = d = dict(zip(RECORD_FIELDS, rv))
    d["request"] = req
    return rec

