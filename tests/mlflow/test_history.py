"""The estimator's history source over a real sqlite tracking store."""
import inspect
import time

import pytest
from mlflow.tracking import MlflowClient

from hived.core.estimator import Estimator, HistorySource
from hived.mlflow_plugin.history import KIND_TAG, RUN_SECONDS_TAG, SIGNATURE_TAG, MlflowHistory, project_signature


def _run(client, exp, tags, status, start, end):
    run = client.create_run(exp, start_time=start, tags=tags)
    client.set_terminated(run.info.run_id, status, end_time=end)
    return run.info.run_id


def test_durations_by_signature_and_by_project(tracking_uri):
    client = MlflowClient(tracking_uri)
    exp = client.create_experiment("hist")
    sig = project_signature("demo", "main")
    other = project_signature("demo", "other")
    assert sig != other and sig == project_signature("demo", "main")
    base = {SIGNATURE_TAG: sig, KIND_TAG: "gpu", "mlflow.source.name": "file:///p",
            "mlflow.project.entryPoint": "main"}
    t0 = int(time.time() * 1000)
    _run(client, exp, base, "FINISHED", t0, t0 + 10_000)                           # 10 s wall
    _run(client, exp, {**base, RUN_SECONDS_TAG: "4.5"}, "FINISHED", t0, t0 + 60_000)  # preempted: ran 4.5 s
    _run(client, exp, base, "FAILED", t0, t0 + 99_000)                             # failures do not count
    _run(client, exp, {**base, SIGNATURE_TAG: other, "mlflow.project.entryPoint": "other"},
         "FINISHED", t0, t0 + 7_000)
    # same entry point name in another project: a different job for the estimator
    _run(client, exp, {**base, SIGNATURE_TAG: project_signature("other-project", "main"),
                       "mlflow.source.name": "file:///q"}, "FINISHED", t0, t0 + 3_000)
    running = client.create_run(exp, start_time=t0, tags=base)  # not finished: not history
    assert running.info.status == "RUNNING"
    hist = MlflowHistory(tracking_uri, experiment_ids=[exp])
    # same method shape as core.estimator.HistorySource (a Protocol, not runtime-checkable)
    assert list(inspect.signature(hist.durations).parameters) == \
        list(inspect.signature(HistorySource.durations).parameters)[1:]
    assert sorted(hist.durations(sig, "gpu")) == [4.5, 10.0]
    assert hist.durations(sig, "cpu") == []
    assert sorted(hist.durations_for("file:///p", "main")) == [4.5, 10.0]
    assert hist.durations_for("file:///p", "other") == [7.0]
    # plugs into the estimator: median of the finished runs
    est = Estimator(history=MlflowHistory(tracking_uri)).estimate("gpu", signature=sig)
    assert est.source == "history" and est.value == pytest.approx(7.25)


def test_quotes_in_names_do_not_break_the_filter(tracking_uri):
    hist = MlflowHistory(tracking_uri)
    assert hist.durations_for("it's", "main") == []
