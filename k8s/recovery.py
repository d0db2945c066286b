"""Recovery from the cluster: the pods hived owns are the truth about what runs where.

On start, before the service restores its engine from the SQLite journal,
``reconcile`` lists the pods of this hived instance, reads every gang's
binding from their annotations (each pod carries the binding of its whole
gang, HiveD, OSDI '20, §4) and makes the journal say what the cluster says. The
service then restores the corrected journal as usual (``Engine.restore`` ->
``Allocator.restore``) and adopts the gangs, so nothing is launched twice.

The rules (docs/kubernetes.md repeats them for users):

1. Only the latest attempt of a job counts; pods of older attempts are left
   to finish their own deletion.
2. **Cluster wins.** A gang in the cluster whose journal record disagrees
   (another placement, another attempt, queued/placed while its pods exist)
   gets the cluster's binding and state; a live gang the journal lacks
   (journal lost or reset) is rebuilt from the request stored in its
   annotations (an ended one holds nothing and is left alone). A journal-only
   job whose cells the cluster's pods hold ends as lost. Every difference is
   logged (WARNING) and listed in the report.
   Two exceptions: a job the journal already *ended* (failed, cancelled,
   succeeded) whose pods still run is a teardown that the crash interrupted;
   hived finishes it (deletes the pods) rather than resurrecting the job. And
   a job the journal has back in its queue (or placed for its next attempt)
   whose cluster gang is the attempt the journal already counted and is over
   (a member failed, or members are being deleted) is a retry waiting out its
   back-off: its leftovers are deleted and nothing is counted again.
3. **Missing or unbound members.** In binding mode, members created but never
   bound (a crash between the two calls) are bound to their recorded nodes.
   A gang with pods missing is *completed* (the missing
   members are created at their recorded cells, same attempt) when none of its
   members has started yet: nothing ran, so nothing is lost by finishing the
   launch that a crash interrupted. Otherwise the gang is *torn down*: the
   launcher's ``adopt`` reports the missing member as deleted, the gang ends
   with exit code 143 ("missing after restart"), its survivors are deleted
   with the job's grace period, and the engine's retry rules decide whether
   the job runs again, as a whole, at a fresh placement.
4. **Reconfiguration.** Bindings are re-checked against the current spec in
   the order the service restores them. A guaranteed gang whose cells no
   longer fit its VC is downgraded to opportunistic on the same GPUs (its pods
   are relabelled), never dropped. A gang that cannot be held even so (its VC
   or nodes are gone from the spec) is ended as failed, with the reason in
   its history, and its pods are deleted; the GPUs they ran on (those the new
   spec still has) take no new job until the pods are confirmed gone.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from hived.core.engine_records import JobRecord, placement_from_dict, request_from_dict
from hived.core.jobs import HOLDING as HOLDING_STATES
from hived.core.jobs import STARTED, WAITING, JobState, state_values
from hived.core.jobs import TERMINAL as TERMINAL_STATES

from . import pod_builder as pb
from .watch import PENDING, RUNNING, SUCCEEDED, pod_state

log = logging.getLogger("hived.k8s.recovery")

# what an adopted gang whose pods are not all Running is doing (REST: state placed, this reason)
STARTING = "starting: its pods are not all Running yet"
# the records are JSON here: the states' wire names
HOLDING = state_values(HOLDING_STATES)
TERMINAL = state_values(TERMINAL_STATES)


@dataclass
class ClusterGang:
    """The pods of one job's latest attempt, as the cluster holds them."""

    job_id: str
    attempt: int
    namespace: str
    binding: dict                       # the gang-binding annotation
    request: dict                       # the request annotation (request_to_dict form)
    pods: dict = field(default_factory=dict)   # rank -> pod (dict)

    @property
    def size(self) -> int:
        return len(self.binding["pods"])

    @property
    def missing(self) -> list[int]:
        return [q["rank"] for q in self.binding["pods"] if q["rank"] not in self.pods]

    @property
    def states(self) -> dict:
        return {r: pod_state(p) for r, p in self.pods.items()}

    @property
    def live(self) -> bool:
        """Some member is not finished (it may hold GPUs)."""
        return any(not s.terminal for s in self.states.values())

    @property
    def ever_started(self) -> bool:
        """Some member got past Pending (or is being deleted): something may have run."""
        return any(s.state != PENDING or p["metadata"].get("deletionTimestamp")
                   for p, s in ((self.pods[r], st) for r, st in self.states.items()))

    @property
    def running(self) -> bool:
        """Every member exists and is Running (or has succeeded): the gang has started as a whole."""
        states = self.states
        return not self.missing and bool(states) and all(s.state in (RUNNING, SUCCEEDED)
                                                         for s in states.values())

    @property
    def over(self) -> bool:
        """The attempt has ended or is ending: a member failed or was deleted, or every member succeeded."""
        states = self.states
        if any(s.terminal and s.state != SUCCEEDED for s in states.values()):
            return True
        if any(p["metadata"].get("deletionTimestamp") for p in self.pods.values()):
            return True
        return bool(states) and not self.missing and all(s.state == SUCCEEDED for s in states.values())

    @property
    def placement_dict(self) -> dict:
        b = self.binding
        return {"chain": b["chain"], "opportunistic": bool(b.get("opportunistic")),
                "pods": [{"rank": q["rank"], "node": q["node"], "gpus": list(q["gpus"]),
                          "cells": list(q.get("cells", []))} for q in b["pods"]]}


@dataclass
class RecoveryReport:
    gangs: int = 0
    agreed: list = field(default_factory=list)       # journal and cluster say the same
    rebuilt: list = field(default_factory=list)      # not in the journal: rebuilt from annotations
    corrected: list = field(default_factory=list)    # "job: what differed" (cluster won)
    completed: list = field(default_factory=list)    # "job: ranks created"
    downgraded: list = field(default_factory=list)   # guaranteed -> opportunistic (spec changed)
    ended: list = field(default_factory=list)        # "job: why" (could not be held; pods deleted)
    finished_teardown: list = field(default_factory=list)   # journal ended it; leftover pods deleted
    lost: list = field(default_factory=list)         # journal holds it, the cluster has no pod
    old_attempts: list = field(default_factory=list)  # pod names of superseded attempts
    ignored: list = field(default_factory=list)      # ended gangs the journal does not know
    # gangs ended here whose pods are still being deleted: their GPUs take no new job until the
    # pods are gone ({"job", "namespace", "pods", "gpus": [[node, gpu], ...], "grace"})
    draining: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, list) else v) for k, v in self.__dict__.items()}


def gangs_in_cluster(pods: list[dict]) -> tuple[dict[str, ClusterGang], list[str]]:
    """Group owned pods by job, keeping the latest attempt: (gangs by job id, older pod names)."""
    by_job: dict[str, dict[int, list[dict]]] = {}
    for p in pods:
        ann = (p.get("metadata") or {}).get("annotations") or {}
        jid = ann.get(pb.A_JOB)
        if jid is None or pb.A_BINDING not in ann:
            continue
        by_job.setdefault(jid, {}).setdefault(int(ann.get(pb.A_ATTEMPT, 0)), []).append(p)
    gangs, old = {}, []
    for jid, attempts in by_job.items():
        latest = max(attempts)
        for a, ps in attempts.items():
            if a != latest:
                old += [q["metadata"]["name"] for q in ps]
        ps = attempts[latest]
        ann = ps[0]["metadata"]["annotations"]
        g = ClusterGang(jid, latest, ps[0]["metadata"]["namespace"], json.loads(ann[pb.A_BINDING]),
                        json.loads(ann.get(pb.A_REQUEST, "{}")))
        for q in ps:
            g.pods[int(q["metadata"]["annotations"].get(pb.A_RANK, 0))] = q
        gangs[jid] = g
    return gangs, sorted(old)


def _same_placement(a: dict | None, b: dict) -> bool:
    if a is None:
        return False
    key = lambda p: (p["chain"], bool(p.get("opportunistic")),  # noqa: E731
                     [(q["rank"], q["node"], list(q["gpus"]), list(q.get("cells", []))) for q in p["pods"]])
    return key(a) == key(b)


def reconcile(store, launcher, new_engine: Callable[[], object], now: float) -> RecoveryReport:
    """Make ``store`` (the SQLite journal) agree with the cluster; see the module's rules.

    ``launcher`` is the KubernetesLauncher (its pod cache is listed), ``new_engine()``
    returns an empty engine on the current spec, used to check each binding against it.
    """
    rep = RecoveryReport()
    rows = store.load_jobs_with_keys()
    journal = {d["job_id"]: (d, q) for d, q in rows}
    gangs, rep.old_attempts = gangs_in_cluster(launcher.owned_pods(fresh=True))
    rep.gangs = len(gangs)
    writes: dict[str, tuple[dict, float | None, list]] = {}   # job -> (record, qkey, new history)
    added: set = set()
    for jid, g in sorted(gangs.items()):
        entry = journal.get(jid)
        if entry is None and not g.live:
            # finished while hived had no journal: it holds no GPU; nothing to rebuild
            _note(rep.ignored, jid, "not in the journal and every pod has ended; not rebuilt")
            continue
        if entry is None:
            writes[jid] = (_rebuilt(jid, g, now), None, [])
            added.add(jid)
            _note(rep.rebuilt, jid, f"not in the journal; rebuilt from {len(g.pods)} pod(s) of attempt {g.attempt}")
        elif not _agree(jid, g, entry, launcher, now, rep, writes):
            continue   # the journal ended it: its pods are being deleted
        _complete(jid, g, launcher, rep)
    for jid, (d, _) in journal.items():
        if d["state"] in state_values(STARTED) and jid not in gangs:
            _note(rep.lost, jid, f"the journal says {d['state']}, the cluster has no pod of it (lost)")

    _check_spec(journal, writes, gangs, launcher, new_engine, now, rep)
    with store.transaction():
        for jid, (d, _, _) in writes.items():
            if jid in added:
                store.add_job(d, now)
            else:
                store.update_job(d, now)
    if gangs or rep.lost:
        log.info("recovery from the cluster: %d gangs, %d agreed, %d rebuilt, %d corrected, %d completed, "
                 "%d downgraded, %d ended, %d lost", rep.gangs, len(rep.agreed), len(rep.rebuilt),
                 len(rep.corrected), len(rep.completed), len(rep.downgraded), len(rep.ended), len(rep.lost))
    return rep


def _note(kind: list, jid: str, text: str) -> None:
    kind.append(f"{jid}: {text}" if text else jid)
    log.warning("recovery: job %s: %s", jid, text or "see report")


def _rebuilt(jid: str, g, now: float) -> dict:
    """The record of a gang the journal does not know, rebuilt from its pods."""
    pl = g.placement_dict
    req = request_from_dict(g.request)
    if g.running:
        rec = JobRecord(job_id=jid, request=req, state=JobState.RUNNING, submitted=now, started=now,
                        first_started=now, placement=placement_from_dict(pl), attempts=g.attempt,
                        opportunistic=pl["opportunistic"])
        rec.note(now, f"rebuilt from its pods (attempt {g.attempt}); the journal had no record")
    else:   # launched, not all Running: starting; the launcher's "started" makes it running
        rec = JobRecord(job_id=jid, request=req, state=JobState.PLACED, submitted=now,
                        placement=placement_from_dict(pl), attempts=g.attempt - 1,
                        opportunistic=pl["opportunistic"])
        rec.note(now, f"rebuilt from its pods (attempt {g.attempt}); the journal had no record; {STARTING}")
    return rec.to_dict()


def _agree(jid: str, g, entry: tuple, launcher, now: float, rep: RecoveryReport, writes: dict) -> bool:
    """Make the journal's record of a gang found in the cluster agree with its pods (the cluster
    wins). False when the journal had ended it already: its leftover pods are deleted."""
    pl = g.placement_dict
    d, qkey = dict(entry[0]), entry[1]
    state = d["state"]
    if state in TERMINAL:
        if g.live:
            launcher.delete_gang(jid, g.namespace, [p["metadata"]["name"] for p in g.pods.values()],
                                 float(g.request.get("grace_period", 0.0)))
            _note(rep.finished_teardown, jid,
                  f"the journal says {state} but pods still run; deleting them (an interrupted teardown)")
        return False
    if state in state_values(WAITING) and g.attempt <= int(d.get("attempts") or 0) and g.over:
        # the journal counted this attempt's end already (a retry in its back-off)
        left = [p["metadata"]["name"] for p in g.pods.values()
                if not pod_state(p).terminal and not p["metadata"].get("deletionTimestamp")]
        if left:
            launcher.delete_gang(jid, g.namespace, left, float(g.request.get("grace_period", 0.0)))
        _note(rep.finished_teardown, jid, f"attempt {g.attempt} ended before the restart and was counted; "
              f"its leftovers are deleted ({len(left)} pod(s) still running)")
        return False
    diffs = []
    want_attempt = g.attempt - (1 if state == "placed" else 0)
    if state == "queued" and g.running:
        diffs.append("journal: queued, cluster: running pods")
        d["state"] = "running"
        d["started"] = d["first_started"] = d.get("first_started") or now
        d["queued_since"] = None
        want_attempt = g.attempt
    elif state == "queued":
        diffs.append(f"journal: queued, cluster: pods not all Running ({STARTING})")
        d["state"], d["queued_since"], d["waiting_for"] = "placed", None, []
        want_attempt = g.attempt - 1
    if not _same_placement(d.get("placement"), pl):
        diffs.append(f"placement differs (journal {_brief(d.get('placement'))}, cluster {_brief(pl)})")
        d["placement"] = pl
        d["opportunistic"] = pl["opportunistic"]
    if d.get("attempts") != want_attempt:
        diffs.append(f"attempt differs (journal {d.get('attempts')}, cluster {want_attempt})")
        d["attempts"] = want_attempt
    if state == "placed" and d.get("waiting_for"):
        diffs.append(f"journal waits for {d['waiting_for']}, but the gang was launched")
        d["waiting_for"] = []
    if diffs:
        hist = [now, d["state"], "recovered from the cluster: " + "; ".join(diffs)]
        d["history"] = list(d.get("history", [])) + [hist]
        writes[jid] = (d, qkey, [hist])
        _note(rep.corrected, jid, "; ".join(diffs) + " -> the cluster wins")
    else:
        rep.agreed.append(jid)
    return True


def _complete(jid: str, g, launcher, rep: RecoveryReport) -> None:
    """Finish what a crash interrupted in a launch: bind members left unbound, create missing ones."""
    # binding mode: a crash between create and bind leaves members unbound for ever
    bound = launcher.bind_unbound(list(g.pods.values()))
    if bound:
        _note(rep.completed, jid, f"members {bound} were created but not bound; bound them to their nodes")
    # rule 3: members missing
    miss = g.missing
    if miss:
        if not g.ever_started:
            req = request_from_dict(g.request)
            launcher.create_members(jid, req, placement_from_dict(g.placement_dict), g.attempt, miss)
            _note(rep.completed, jid, f"members {miss} were missing and none had started; created them")
        else:
            log.warning("recovery: job %s: members %s missing after members ran; the gang is torn down "
                        "and its retry rules decide", jid, miss)


def _brief(p: dict | None) -> str:
    if not p:
        return "none"
    pods = ",".join(f"{q['node']}:{'+'.join(map(str, q['gpus']))}" for q in p["pods"])
    return f"{p['chain']}[{pods}]" + (" opportunistic" if p.get("opportunistic") else "")


def _check_spec(journal, writes, gangs, launcher, new_engine, now, rep) -> None:
    """Rule 4: restore every holding binding into a scratch engine, in the service's order."""
    eng = new_engine()
    records = {jid: (writes[jid][0] if jid in writes else d) for jid, (d, _) in journal.items()}
    records.update({jid: w[0] for jid, w in writes.items() if jid not in journal})
    # Gangs that hold cells in the cluster go first (journal order, rebuilt ones last, as the
    # service restores them); journal-only holders (lost, or placed and not launched) after: if
    # the cluster's pods hold their cells, the pods win.
    order = [j for j in records if j in gangs] + [j for j in records if j not in gangs]
    for jid in order:
        d = records[jid]
        if d["state"] not in HOLDING or not d.get("placement"):
            continue
        problem = _try_restore(eng, d)
        if problem is None:
            continue
        held_by_pods = jid not in gangs and _try_restore(new_engine(), d) is None
        if held_by_pods:     # fits the spec, but the cluster's pods hold its cells: they win
            problem = f"the journal holds cells for it that pods of other jobs hold in the cluster ({problem})"
        elif not d["placement"].get("opportunistic"):
            d2 = json.loads(json.dumps(d))
            d2["placement"]["opportunistic"] = True
            d2["opportunistic"] = True
            if _try_restore(eng, d2) is None:
                hist = [now, d2["state"], f"downgraded to opportunistic: its cells no longer fit the spec ({problem})"]
                d2["history"] = list(d2.get("history", [])) + [hist]
                _queue_write(writes, journal, jid, d2, hist)
                g = gangs.get(jid)
                if g is not None:
                    launcher.mark_opportunistic(g.namespace, [p["metadata"]["name"] for p in g.pods.values()],
                                                d2["placement"])
                rep.downgraded.append(jid)
                log.warning("recovery: job %s: %s", jid, hist[2])
                continue
        # cannot be held: end it, delete its pods (if it has any)
        d3 = dict(d)
        d3["state"], d3["ended"], d3["failure_class"] = "failed", now, "lost" if held_by_pods else "spec"
        d3["reason"] = problem if held_by_pods else f"its binding does not fit the current spec: {problem}"
        hist = [now, "failed", d3["reason"]]
        d3["history"] = list(d.get("history", [])) + [hist]
        d3["placement"] = None
        _queue_write(writes, journal, jid, d3, hist)
        g = gangs.get(jid)
        if g is not None:
            names = [p["metadata"]["name"] for p in g.pods.values()]
            grace = float(g.request.get("grace_period", 0.0))
            launcher.delete_gang(jid, g.namespace, names, grace)
            rep.draining.append({"job": jid, "namespace": g.namespace, "pods": names, "grace": grace,
                                 "gpus": [[q["node"], gpu] for q in g.binding["pods"] for gpu in q["gpus"]]})
        rep.ended.append(f"{jid}: {d3['reason']}")
        log.error("recovery: job %s: %s; its pods are deleted", jid, d3["reason"])


def _queue_write(writes, journal, jid, d, hist) -> None:
    if jid in writes:
        _, qkey, old = writes[jid]
        writes[jid] = (d, qkey, old + [hist])
    else:
        writes[jid] = (d, journal[jid][1] if jid in journal else None, [hist])


def _try_restore(eng, d: dict) -> str | None:
    """None when ``d`` restores into ``eng`` (which then holds it), else why not."""
    try:
        eng.restore(JobRecord.from_dict(d))
        return None
    except Exception as exc:    # BindingConflict, RequestError (unknown VC/user), KeyError (unknown node)
        return str(exc)

