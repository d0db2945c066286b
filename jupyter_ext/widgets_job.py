"""The live status line of one job, as shown under ``%gpu_submit``.

Rendered as an ipywidgets ``HTML`` in a notebook; ``text()`` gives the same
facts as plain text for terminals and logs.
"""
from __future__ import annotations

import html
import time

import ipywidgets as W

from hived.core.jobs import EXITED, WAITING, state_values
from hived.service.terminal_text import visible

STATE_COLOURS = {
    "queued": "#b58900", "placed": "#268bd2", "running": "#2aa198", "preempting": "#cb4b16",
    "succeeded": "#859900", "failed": "#dc322f", "cancelled": "#6c71c4",
}


def placement_text(job: dict) -> str:
    p = job.get("placement") or {}
    pods = p.get("pods") or []
    if not pods:
        return ""
    where = "; ".join(f"{q.get('node')}:{','.join(map(str, q.get('gpus') or []))}" for q in pods)
    kind = " (opportunistic)" if p.get("opportunistic") else ""
    return f"on {where}{kind}"


def elapsed(job: dict, now: float | None = None) -> float | None:
    """Seconds in the current phase: queued since submit, running since start, total once ended."""
    now = time.time() if now is None else now
    start = job.get("started") or job.get("submitted")
    if not isinstance(start, (int, float)):
        return None
    ended = job.get("ended")
    end = ended if isinstance(ended, (int, float)) else now
    return max(0.0, end - start)


def fmt_seconds(s: float | None) -> str:
    if s is None:
        return ""
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def status_facts(job: dict) -> list[str]:
    state = job.get("state", "?")
    facts = [f"{job.get('id')} {state}"]
    if state == "queued" and job.get("queue_position") is not None:
        facts.append(f"position {job['queue_position']} in {job.get('vc')}'s queue")
    if state in state_values(WAITING) and job.get("wait_reason"):
        facts.append(visible(job["wait_reason"]))  # what it waits for, when the service says
    elif state == "queued" and job.get("attempts") and job.get("reason"):
        facts.append(visible(job["reason"]))  # why it is back in the queue (retry, preemption)
    elif state == "preempting" and str(job.get("reason", "")).startswith("terminating (stuck)"):
        facts.append(visible(job["reason"]))  # a pod outlives its grace period; its GPUs stay held
    where = placement_text(job)
    if where:
        facts.append(where)
    t = elapsed(job)
    if t is not None:
        facts.append(fmt_seconds(t))
    if job.get("preemptions"):
        facts.append(f"preempted {job['preemptions']}x")
    if job.get("exit_code") is not None and state in state_values(EXITED):
        facts.append(f"exit {job['exit_code']}")
    if job.get("failure_class"):
        facts.append(str(job["failure_class"]))
    return facts


class JobStatusWidget(W.HTML):
    """One line: id, state (coloured), queue position or GPUs, elapsed time."""

    def update(self, job: dict) -> None:
        self.job = job
        state = job.get("state", "?")
        colour = STATE_COLOURS.get(state, "#586e75")
        facts = status_facts(job)
        head = html.escape(str(job.get("name") or job.get("id")))
        rest = " &middot; ".join(html.escape(f) for f in facts[1:])
        self.value = (
            f'<div class="hived-job" data-state="{html.escape(state)}" style="font-family:monospace">'
            f"<b>{head}</b> "
            f'<span class="hived-state" style="color:white;background:{colour};padding:0 6px;'
            f'border-radius:3px">{html.escape(state)}</span> {rest}</div>'
        )

    def text(self) -> str:
        return " | ".join(visible(f) for f in status_facts(getattr(self, "job", {}) or {}))

    def __repr__(self) -> str:
        # a frontend that cannot render widgets shows the text/plain part of the display,
        # which ipywidgets makes from repr(): the status line, not the widget's HTML source
        return self.text() or "hived job status"
