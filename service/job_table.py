"""The job table every door prints (``hived jobs``, ``%gpu_jobs``): one set of columns, one
spelling of each cell; and what a cancel or a hold/release/requeue did, in the words every door uses."""
from __future__ import annotations

import time

from hived.core.jobs import WAITING, class_text, state_values

from .terminal_text import table, visible

HEADERS = ["ID", "NAME", "USER", "VC", "CLASS", "STATE", "GPUS", "PLACEMENT", "PREEMPTED", "AGE"]
SHRINK = ("NAME", "STATE", "PLACEMENT")


def ago(t: float | None, now: float | None = None) -> str:
    if not t:
        return "-"
    s = max(0.0, (time.time() if now is None else now) - t)
    return f"{s:.0f}s" if s < 120 else f"{s / 60:.0f}m" if s < 7200 else f"{s / 3600:.0f}h"


def state_text(j: dict, short: bool = False) -> str:
    """The state in words: queue position and the reason it waits when queued
    (``short``: ``queued #2: reason`` for tables)."""
    text = j["state"]
    if j.get("queue_position") is not None:
        text += f" #{j['queue_position']}" if short else f", position {j['queue_position']} in the queue"
    if j.get("wait_reason") and j["state"] in state_values(WAITING):
        text += f": {visible(j['wait_reason'])}" if short else f" ({visible(j['wait_reason'])})"
    return text


def placement_text(p: dict | None) -> str:
    if not p:
        return "-"
    return " ".join(f"{q['node']}:{','.join(map(str, q['gpus']))}" for q in p["pods"])


def job_rows(jobs: list[dict]) -> list[list]:
    return [[j["id"], j["name"] or "-", j["user"], j["vc"], class_text(j).upper(), state_text(j, short=True),
             j["gpus"], placement_text(j["placement"] or j.get("last_placement")), j["preemptions"],
             ago(j["submitted"])] for j in jobs]


def jobs_table(jobs: list[dict], width: int | None = None) -> str:
    return table(job_rows(jobs), HEADERS, width, SHRINK)


def control_said(j: dict, action: str) -> str:
    """What ``hold``, ``release`` or ``requeue`` did to job ``j`` (its view after the action)."""
    if action == "hold":
        return f"held (by {visible(j.get('held_by') or '?')}); hived release {j['id']} lets it start"
    if action == "release":
        return f"released; {j['state']}" + (f", queue position {j['queue_position'] + 1}"
                                            if j.get("queue_position") is not None else "")
    grace = j.get("grace_period") or 0
    if j["state"] == "preempting":
        return (f"stopping: SIGTERM sent, SIGKILL in {grace:g} s if still running; then queued again"
                if grace else "stopping: its processes are being killed; then queued again")
    return f"{j['state']} (queued again at the head of its VC's queue)"


def cancel_said(j: dict) -> str:
    """What the cancel did, in words."""
    if j["state"] == "cancelled":
        return "cancelled" + (" before it started" if not j.get("started") else "")
    if j["state"] == "preempting":
        grace = j.get("grace_period") or 0
        kill_at, hist = j.get("kill_at"), j.get("history") or []
        if kill_at is not None and hist:   # the grace left when the cancel was booked (0: a second cancel)
            grace = max(0.0, kill_at - hist[-1]["time"])
        return (f"stopping: SIGTERM sent, SIGKILL in {grace:g} s if still running; it ends as cancelled"
                if grace else "stopping: its processes are being killed; it ends as cancelled")
    return f"{j['state']} (the cancel takes effect at the next scheduling round)"
