"""The estimator's history from an MLflow tracking store.

Runs started by the hived backend carry ``hived.signature`` (project + entry
point, ``hived.core.estimator.signature``) and, once finished,
``hived.run_seconds`` (time spent running, queueing and preempted time left
out). ``MlflowHistory`` implements ``core.estimator.HistorySource`` over
them; ``durations_for`` answers the same question by project and entry point
for runs that only have MLflow's own source tags.
"""
from __future__ import annotations

from collections.abc import Sequence

from mlflow.tracking import MlflowClient

from hived.core.estimator import signature as _signature
from hived.core.jobs import STARTED, state_values

SIGNATURE_TAG = "hived.signature"
KIND_TAG = "hived.kind"
RUN_SECONDS_TAG = "hived.run_seconds"


def project_signature(project: str, entry_point: str) -> str:
    """Same project and entry point = same job for the estimator (parameters ignored)."""
    return _signature(project, entry_point, relevant=())


def run_seconds(run) -> float | None:
    """Seconds a finished run ran: the hived tag when present, else end - start."""
    tag = run.data.tags.get(RUN_SECONDS_TAG)
    if tag is not None:
        try:
            value = float(tag)
            if value > 0:
                return value
        except ValueError:
            pass
    if run.info.end_time and run.info.start_time and run.info.end_time > run.info.start_time:
        return (run.info.end_time - run.info.start_time) / 1000.0
    return None


def running_seconds(history: list) -> float | None:
    """Sum of the intervals a job spent running, from its REST history entries.

    Entries are ``[time, state, reason]`` lists or ``{"time","state"}`` dicts;
    None when the history does not say.
    """
    total, since = 0.0, None
    seen = False
    for entry in history or []:
        if isinstance(entry, dict):
            t, state = entry.get("time"), entry.get("state")
        elif isinstance(entry, (list, tuple)) and len(entry) >= 2:
            t, state = entry[0], entry[1]
        else:
            continue
        if not isinstance(t, (int, float)):
            continue
        if state in state_values(STARTED):
            if since is None:
                since = t
        elif since is not None:
            total += t - since
            since, seen = None, True
    return total if seen and total > 0 else None


class MlflowHistory:
    """``HistorySource`` reading finished runs from a tracking store."""

    def __init__(self, tracking_uri: str | None = None,
                 experiment_ids: Sequence[str] | None = None, max_runs: int = 200):
        self.client = MlflowClient(tracking_uri)
        self.experiment_ids = list(experiment_ids) if experiment_ids else None
        self.max_runs = max_runs

    def _experiments(self) -> list[str]:
        if self.experiment_ids:
            return self.experiment_ids
        return [e.experiment_id for e in self.client.search_experiments()]

    def _finished(self, filter_string: str) -> list[float]:
        runs = self.client.search_runs(self._experiments(), filter_string=filter_string,
                                       max_results=self.max_runs,
                                       order_by=["attributes.start_time DESC"])
        return [s for s in (run_seconds(r) for r in runs) if s is not None]

    def durations(self, signature: str, kind: str) -> Sequence[float]:
        flt = (f"tags.`{SIGNATURE_TAG}` = '{_q(signature)}' and tags.`{KIND_TAG}` = '{_q(kind)}' "
               f"and attributes.status = 'FINISHED'")
        return self._finished(flt)

    def durations_for(self, source_name: str, entry_point: str) -> Sequence[float]:
        """Finished runs of one project source (MLflow's ``mlflow.source.name``) and entry point."""
        flt = (f"tags.`mlflow.source.name` = '{_q(source_name)}' and "
               f"tags.`mlflow.project.entryPoint` = '{_q(entry_point)}' and "
               f"attributes.status = 'FINISHED'")
        return self._finished(flt)


def _q(value: str) -> str:
    return str(value).replace("'", "\\'")
