"""``HivedSubmittedRun``: an MLflow SubmittedRun that follows one hived job.

Each time the job is looked at (``get_status``, ``wait``, ``cancel``) its
state is copied onto the MLflow run: tags for the job id, VC, GPUs, nodes
and preemption count, per preemption a line in the run's note and a point of
the ``hived.preemptions`` metric (the event, timestamped), and, once the
job is over, the run's terminal status. A preempted job is not over: the run
stays RUNNING (even if the user's code ended it when SIGTERM arrived) and the
same run continues when the scheduler restarts the job.

A run continued with ``mlflow run --run-id`` runs a new job; the preemption
count, note lines and metric points stay the run's, counted across its jobs
(``hived.earlier_preemptions`` holds the earlier jobs' share).
"""
from __future__ import annotations

import datetime as _dt
import logging
import sys
import time
from collections.abc import Callable

from mlflow.entities import RunStatus, RunTag
from mlflow.projects.submitted_run import SubmittedRun
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_RUN_NOTE

from hived.core.jobs import STARTED, WAITING, state_values
from hived.mlflow_plugin.history import RUN_SECONDS_TAG, running_seconds
from hived.service.client import TERMINAL_STATES, HivedClient, HivedError, HivedUnreachable
from hived.service.terminal_text import visible

# under "mlflow." so that `mlflow run` shows our lines the way it shows the local backend's
_logger = logging.getLogger("mlflow.projects.hived")

# job state (core.jobs.JobState values) -> MLflow run status
_STATUS = {
    "queued": "SCHEDULED",
    "placed": "SCHEDULED",
    "running": "RUNNING",
    "preempting": "RUNNING",
    "succeeded": "FINISHED",
    "failed": "FAILED",
    "cancelled": "KILLED",
}
TERMINAL = TERMINAL_STATES
TAG = "hived."
PREEMPTION_METRIC = "hived.preemptions"
EARLIER_TAG = "hived.earlier_preemptions"   # preemptions of the run's jobs before this one
FIRST_POLL = 0.05  # seconds; see wait()


def mlflow_status(job: dict) -> str:
    """The MLflow status string of a job dict; a preempted job waiting again is RUNNING."""
    state = job.get("state")
    if state not in _STATUS:
        raise ValueError(f"unknown hived job state {state!r} (job {job.get('id')})")
    if state in state_values(WAITING) and (job.get("preemptions") or job.get("attempts") or 0) > 0:
        return "RUNNING"  # it ran before; the MLflow run continues when it is rescheduled
    return _STATUS[state]


def count_tag(text: str | None) -> int:
    """A count tag's value; 0 when absent or not a count (tags are free text to MLflow)."""
    try:
        return max(0, int(text or 0))
    except ValueError:
        return 0


def placement_tags(job: dict) -> dict:
    """Tags describing where the job runs now (empty when it has no placement)."""
    placement = job.get("placement") or {}
    pods = placement.get("pods") or []
    if not pods:
        return {}
    nodes = []
    for pod in pods:
        if pod.get("node") not in nodes:
            nodes.append(pod.get("node"))
    return {
        TAG + "nodes": ",".join(str(n) for n in nodes),
        TAG + "gpus": str(sum(len(p.get("gpus") or []) for p in pods)),
        TAG + "placement": ";".join(f"{p.get('node')}:{','.join(map(str, p.get('gpus') or []))}"
                                    for p in pods),
        TAG + "chain": str(placement.get("chain", "")),
    }


class HivedSubmittedRun(SubmittedRun):
    def __init__(self, run_id: str, job_id: str, client: HivedClient, *,
                 tracking_uri: str | None = None, poll: float = 2.0,
                 unreachable_grace: float = 60.0,
                 log_sink: Callable[[str], None] | None = None, earlier_preemptions: int = 0):
        super().__init__()
        self._run_id = run_id
        self.job_id = job_id
        self.client = client
        self.poll = poll
        self.unreachable_grace = unreachable_grace
        self.log_sink = log_sink  # where job output goes while waiting (the CLI prints it)
        self._log_offset = 0
        self._mlflow = MlflowClient(tracking_uri)
        self._tags: dict = {}
        self._earlier = earlier_preemptions   # the run's preemptions under its earlier jobs
        self._preemptions = earlier_preemptions  # the run's preemptions noted so far
        self._finalized = False
        self._tags_seen_running = False     # saw the job running (so its node tags are its own)
        self._status: str | None = None   # the run status this follower last wrote
        self._waiting: tuple | None = None  # (position, reason) last said while queued
        self.job: dict = {}

    @classmethod
    def from_run(cls, run_id: str, tracking_uri: str | None = None,
                 token: str | None = None, **kw) -> HivedSubmittedRun:
        """Follow a run started earlier (e.g. detached): job id and service come from its tags."""
        tags = MlflowClient(tracking_uri).get_run(run_id).data.tags
        if TAG + "job_id" not in tags:
            raise ValueError(f"MLflow run {run_id} was not started by the hived backend "
                             f"(no {TAG}job_id tag)")
        client = HivedClient(url=tags.get(TAG + "service_url"), token=token)
        run = cls(run_id, tags[TAG + "job_id"], client, tracking_uri=tracking_uri,
                  earlier_preemptions=count_tag(tags.get(EARLIER_TAG)), **kw)
        # preemptions an earlier follower already noted are not noted twice
        run._preemptions = max(run._preemptions, count_tag(tags.get(TAG + "preemptions")))
        return run

    @property
    def run_id(self) -> str:
        return self._run_id

    def __repr__(self) -> str:
        return f"HivedSubmittedRun(run_id={self._run_id!r}, job_id={self.job_id!r})"

    # -- following --------------------------------------------------------
    def refresh(self) -> dict:
        """Fetch the job, copy its state onto the run; the job dict."""
        self.job = self.client.job(self.job_id)
        self._sync(self.job)
        return self.job

    def _sync(self, job: dict) -> None:
        tags = {TAG + "state": str(job.get("state")),
                TAG + "preemptions": str(self._earlier + int(job.get("preemptions") or 0)),
                TAG + "attempts": str(job.get("attempts") or 0)}
        tags.update(placement_tags(job))
        if job.get("state") in state_values(STARTED):
            self._tags_seen_running = True
        changed = {k: v for k, v in tags.items() if self._tags.get(k) != v}
        if changed:  # one store transaction, not one per tag: this runs on every poll
            self._mlflow.log_batch(self._run_id, tags=[RunTag(k, v) for k, v in changed.items()])
        self._tags.update(changed)
        count = int(job.get("preemptions") or 0)
        if self._earlier + count > self._preemptions:
            self._note_preemption(job, self._earlier + count)
        state = job.get("state")
        if state in TERMINAL:
            self._finalize(job)
        elif count > 0:
            # the user's code may have closed the run on SIGTERM; the run goes on
            run = self._mlflow.get_run(self._run_id)
            if RunStatus.is_terminated(RunStatus.from_string(run.info.status)):
                self._mlflow.update_run(self._run_id, status="RUNNING")
        else:
            self.sync_status(job)

    def sync_status(self, job: dict) -> None:
        """Before its first start the run is SCHEDULED (MLflow creates it RUNNING); once
        the job runs, RUNNING. Written only when it changes."""
        if job.get("state") in TERMINAL or (job.get("preemptions") or 0) > 0:
            return
        want = mlflow_status(job)
        if want != self._status:
            self._mlflow.update_run(self._run_id, status=want)
            self._status = want

    def _note_preemption(self, job: dict, count: int) -> None:
        """One note line and one metric point per preemption not noted yet, stamped with the
        time the service recorded it (a late follower must not stamp its own time)."""
        stamps = [h.get("time") for h in job.get("history") or []
                  if isinstance(h, dict) and h.get("state") == "preempting"
                  and not str(h.get("reason", "")).startswith("cancelled by")]
        nodes = self._tags.get(TAG + "nodes")
        note = self._mlflow.get_run(self._run_id).data.tags.get(MLFLOW_RUN_NOTE, "")
        lines = []
        for k in range(self._preemptions + 1, count + 1):
            i = k - 1 - self._earlier   # this job's own history holds only its own preemptions
            t = stamps[i] if 0 <= i < len(stamps) and isinstance(stamps[i], (int, float)) else None
            when = _dt.datetime.fromtimestamp(t if t is not None else time.time(), _dt.timezone.utc)
            # the node is known when this follower saw the preempted attempt's placement
            where = f" on {nodes}" if nodes and self._tags_seen_running and k == count else ""
            lines.append(f"hived: preempted ({k}) at {when.strftime('%Y-%m-%d %H:%M:%S UTC')}{where}; "
                         f"the run stays RUNNING and resumes when the job is rescheduled")
            # the event on the run's timeline: one point per preemption, when it happened
            self._mlflow.log_metric(self._run_id, PREEMPTION_METRIC, k,
                                    timestamp=int(when.timestamp() * 1000), step=k)
        self._mlflow.set_tag(self._run_id, MLFLOW_RUN_NOTE, "\n".join(([note] if note else []) + lines))
        self._mlflow.set_tag(self._run_id, TAG + "preempted", "true")
        self._preemptions = count
        self._tags_seen_running = False
        for line in lines:
            _logger.info("=== %s ===", line)

    def _say_waiting(self, job: dict) -> None:
        """While queued, tell whoever follows (the blocking CLI) where the job stands and why."""
        if job.get("state") != "queued":
            self._waiting = None
            return
        why = job.get("wait_reason") or job.get("reason") or ""
        now = (job.get("queue_position"), why)
        if now == self._waiting or self.log_sink is None:
            return
        self._waiting = now
        pos = f", position {now[0]} in VC {job.get('vc')}'s queue" if now[0] is not None else ""
        self.log_sink(f"[hived] job {self.job_id} queued{pos}" + (f": {visible(why)}" if why else "") + "\n")

    def _finalize(self, job: dict) -> None:
        if self._finalized:
            return
        status = _STATUS[job["state"]]
        ended = job.get("ended")
        end_ms = int(ended * 1000) if isinstance(ended, (int, float)) else None
        tags = {}
        if job.get("exit_code") is not None:
            tags[TAG + "exit_code"] = str(job["exit_code"])
        seconds = running_seconds(job.get("history") or [])
        if seconds is not None:
            tags[RUN_SECONDS_TAG] = f"{seconds:.3f}"
        if job.get("failure_class"):
            tags[TAG + "failure_class"] = str(job["failure_class"])
        if tags:
            self._mlflow.log_batch(self._run_id, tags=[RunTag(k, v) for k, v in tags.items()])
        # last: whoever sees a terminal status may rely on the tags above being there
        self._mlflow.set_terminated(self._run_id, status, end_time=end_ms)
        self._finalized = True

    def _pump_logs(self) -> None:
        if self.log_sink is None:
            return
        try:
            answer = self.client.logs(self.job_id, offset=self._log_offset)
        except HivedError:
            return  # logs are a courtesy; following the job is what matters
        text = answer.get("text") or ""
        if text:
            self.log_sink(text)
        self._log_offset = int(answer.get("offset", self._log_offset))

    def _poll_once(self, since_ok: list) -> dict | None:
        """refresh(), riding out a service restart for ``unreachable_grace`` seconds."""
        try:
            job = self.refresh()
            since_ok[0] = time.monotonic()
            return job
        except HivedUnreachable:
            if time.monotonic() - since_ok[0] > self.unreachable_grace:
                raise
            return None

    # -- SubmittedRun -----------------------------------------------------
    def wait(self, timeout: float | None = None) -> bool:
        """Block until the job ends; True if it succeeded. Sets the run's terminal status."""
        deadline = None if timeout is None else time.monotonic() + timeout
        since_ok = [time.monotonic()]
        # short jobs end soon after they start: poll fast at first and after every change,
        # then back off to ``self.poll`` so a day-long run costs few requests
        interval, last_state = FIRST_POLL, None
        while True:
            job = self._poll_once(since_ok)
            if job is not None:
                self._say_waiting(job)
            self._pump_logs()
            if job is not None and job.get("state") in TERMINAL:
                self._pump_logs()
                return job["state"] == "succeeded"
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"hived job {self.job_id} still {self.job.get('state')} "
                                   f"after {timeout:g} s")
            state = job.get("state") if job else last_state
            interval = FIRST_POLL if state != last_state else min(interval * 1.5, self.poll)
            last_state = state
            time.sleep(min(interval, self.poll))

    def get_status(self) -> str:
        return mlflow_status(self.refresh())

    def cancel(self) -> None:
        """Cancel the job, wait until it is gone and mark the run KILLED."""
        try:
            self.client.cancel(self.job_id)
        except HivedUnreachable:
            raise
        except HivedError as exc:
            # already over (409) is fine: the terminal state below says what happened
            _logger.info("cancel of %s: %s", self.job_id, exc)
        self.wait(timeout=120)


def print_sink(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()
