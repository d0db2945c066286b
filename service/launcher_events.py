"""What the launcher reports, handed to the engine: the events of a running service
(``apply_events``) and, after a restart, the order in which stored jobs are restored, the
cancels answered before the crash, and the adoption of the holding jobs' processes (or pods)."""
from __future__ import annotations

from hived.core.jobs import HOLDING, JobState, state_values

from .launcher import capability

LOST_TAIL = "hived: the job's processes were gone when the service restarted (SIGKILL, node lost)"

Row = tuple[dict, "float | None"]


def restore_order(rows: list[Row]) -> tuple[list[Row], list[Row], list[Row]]:
    """The stored rows as (holding, other, queued): restored in that order, so holding jobs are
    bound first and queued jobs keep their queue order (preempted ones were put at the head)."""
    holding: list[tuple[dict, float | None]] = []
    queued: list[tuple[dict, float | None]] = []
    other: list[tuple[dict, float | None]] = []
    for d, qkey in rows:
        st = d.get("state")
        (holding if st in state_values(HOLDING) else
         queued if st == "queued" else other).append((d, qkey))
    # queued jobs in their queue order (preempted ones were put at the head)
    queued.sort(key=lambda r: (r[1] is None, r[1] if r[1] is not None else 0))
    return holding, other, queued


def replay_cancels(intents, eng, now: float) -> tuple[list[str], set[str]]:
    """The journal's ``intents`` (job id, kind, user, time): the cancels not yet in their job's
    record are done now. Returns (the jobs cancelled, every job with an intent)."""
    done, seen = [], set()
    for jid, kind, user, _t in intents:
        seen.add(jid)
        rec = eng.find(jid)
        if kind != "cancel" or rec is None or rec.state.terminal or rec.cancel_requested:
            continue
        eng.cancel(jid, now, user)
        done.append(jid)
    return done, seen


def adopt_holding(eng, launcher, holding: list[str], now: float) -> tuple[list[str], list[str], list[str]]:
    """Hand the launcher the restored jobs that hold cells: (adopted: alive and taken up again,
    lost: gone, ended with failure class "lost", relaunch: never started, started again)."""
    adopted: list[str] = []
    lost: list[str] = []
    relaunch: list[str] = []
    for jid in holding:
        rec = eng.find(jid)
        if rec is None or rec.state not in HOLDING:
            continue
        if rec.state is JobState.PLACED and rec.waiting_for:
            continue  # never launched: waits for its victims as before
        alive = launcher.adopt(jid, rec.placement)
        if alive:
            adopted.append(jid)
            if rec.state is JobState.PLACED:
                # a launcher that can tell (Kubernetes: pods still Pending) says "started" later
                if (capability(launcher, "gang_started") or (lambda _j: True))(jid):
                    eng.on_started(jid, now)
            elif rec.state is JobState.PREEMPTING:
                left = max(0.0, (rec.grace_deadline or now) - now)
                launcher.terminate(jid, left)
        elif rec.state is JobState.PLACED:
            relaunch.append(jid)   # the engine emits START again at the next step
        else:
            lost.append(jid)
            eng.on_finished(jid, now, -9, LOST_TAIL)
    return adopted, lost, relaunch


def apply_events(eng, events: list, now: float, launched: set[str]) -> list[str]:
    """The launcher's events (started, exited) to the engine; ``launched`` loses the gangs that
    exited. Returns the jobs touched (to be written)."""
    touched = []
    for ev in events:
        rec = eng.find(ev.job_id)
        if rec is None:
            continue
        touched.append(ev.job_id)
        if ev.kind == "started":
            if rec.state is JobState.PLACED and not rec.waiting_for:
                eng.on_started(ev.job_id, now)
        elif ev.kind == "exited":
            launched.discard(ev.job_id)
            if rec.state not in HOLDING:
                continue
            if rec.state is JobState.PLACED and not rec.waiting_for and getattr(ev, "ran", True):
                eng.on_started(ev.job_id, now)     # it ran, however briefly (not a refused launch)
            if rec.state is JobState.PREEMPTING:
                # we asked it to stop: whatever its exit code, it goes back to its queue
                eng.on_preempted(ev.job_id, now)
            elif ev.exit_code is None:
                eng.on_finished(ev.job_id, now, -9, ev.log_tail or LOST_TAIL)
            else:
                eng.on_finished(ev.job_id, now, int(ev.exit_code), ev.log_tail)
    return touched
