"""Copying a job's life onto its MLflow run (real sqlite store; job dicts as the REST API gives them)."""
from mlflow.tracking import MlflowClient

from hived.mlflow_plugin.submitted_run import HivedSubmittedRun

PLACED = {"chain": "ML-RACK", "pods": [{"rank": 0, "node": "mlnode0", "gpus": [0, 1]}]}


def _job(state, **kw):
    return {"id": "j1", "state": state, "preemptions": 0, "attempts": 0, "placement": None, **kw}


def test_preempted_run_stays_running_then_finishes(tracking_uri):
    client = MlflowClient(tracking_uri)
    exp = client.create_experiment("sync-preempt")
    run_id = client.create_run(exp).info.run_id
    sub = HivedSubmittedRun(run_id, "j1", client=None, tracking_uri=tracking_uri)
    sub._sync(_job("queued"))
    sub._sync(_job("running", attempts=1, placement=PLACED))
    tags = client.get_run(run_id).data.tags
    assert (tags["hived.state"], tags["hived.nodes"], tags["hived.gpus"]) == ("running", "mlnode0", "2")
    # SIGTERM: the user's code closed its run as FAILED on the way out
    client.set_terminated(run_id, "FAILED")
    sub._sync(_job("preempting", attempts=1, preemptions=1, placement=PLACED))
    sub._sync(_job("queued", attempts=1, preemptions=1))
    run = client.get_run(run_id)
    assert run.info.status == "RUNNING"
    assert run.data.tags["hived.preempted"] == "true" and run.data.tags["hived.preemptions"] == "1"
    note = run.data.tags["mlflow.note.content"]
    assert note.count("hived: preempted (1)") == 1 and "on mlnode0" in note
    (event,) = client.get_metric_history(run_id, "hived.preemptions")
    assert (event.value, event.step) == (1, 1)
    sub._sync(_job("running", attempts=2, preemptions=1, placement=PLACED))
    history = [[0.0, "queued", ""], [1.0, "running", ""], [4.0, "preempting", ""], [5.0, "queued", ""],
               [9.0, "running", ""], [11.5, "succeeded", ""]]
    sub._sync(_job("succeeded", attempts=2, preemptions=1, placement=PLACED, exit_code=0,
                   ended=1_700_000_000.5, history=history))
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.info.end_time == 1_700_000_000_500
    assert run.data.tags["hived.exit_code"] == "0" and run.data.tags["hived.run_seconds"] == "6.500"
    # seeing the end again repeats nothing
    sub._sync(_job("succeeded", attempts=2, preemptions=1))
    assert client.get_run(run_id).data.tags["mlflow.note.content"] == note


def test_failed_and_cancelled_jobs(tracking_uri):
    client = MlflowClient(tracking_uri)
    exp = client.create_experiment("sync-end")
    for state, status in (("failed", "FAILED"), ("cancelled", "KILLED")):
        run_id = client.create_run(exp).info.run_id
        sub = HivedSubmittedRun(run_id, "j", client=None, tracking_uri=tracking_uri)
        sub._sync(_job(state, exit_code=3 if state == "failed" else None, failure_class="user"))
        run = client.get_run(run_id)
        assert run.info.status == status and run.data.tags["hived.failure_class"] == "user"


def test_a_later_follower_does_not_repeat_noted_preemptions(tracking_uri):
    client = MlflowClient(tracking_uri)
    exp = client.create_experiment("sync-refollow")
    run_id = client.create_run(exp, tags={"hived.job_id": "j9", "hived.service_url": "http://127.0.0.1:9/"}
                               ).info.run_id
    first = HivedSubmittedRun(run_id, "j9", client=None, tracking_uri=tracking_uri)
    first._sync(_job("queued", attempts=1, preemptions=1))
    later = HivedSubmittedRun.from_run(run_id, tracking_uri)   # e.g. `follow` after the CLI was stopped
    later._sync(_job("queued", attempts=1, preemptions=1))
    later._sync(_job("queued", attempts=2, preemptions=2))
    run = client.get_run(run_id)
    note = run.data.tags["mlflow.note.content"]
    assert note.count("preempted (1)") == 1 and note.count("preempted (2)") == 1
    assert [m.step for m in client.get_metric_history(run_id, "hived.preemptions")] == [1, 2]


def test_a_continued_run_counts_preemptions_across_its_jobs(tracking_uri):
    """`mlflow run --run-id` of a run preempted once: its new job's first preemption is the run's second."""
    client = MlflowClient(tracking_uri)
    exp = client.create_experiment("sync-continued")
    run_id = client.create_run(exp, tags={"hived.job_id": "j2", "hived.service_url": "http://127.0.0.1:9/",
                                          "hived.preempted": "true", "hived.preemptions": "1",
                                          "hived.earlier_preemptions": "1"}).info.run_id
    client.log_metric(run_id, "hived.preemptions", 1, step=1)
    sub = HivedSubmittedRun.from_run(run_id, tracking_uri)
    sub._sync(_job("running", attempts=1, placement=PLACED))
    assert client.get_run(run_id).data.tags["hived.preemptions"] == "1"   # never 0 beside preempted=true
    history = [{"time": 1_700_000_000.0, "state": "preempting", "reason": "preempted by j5"}]
    sub._sync(_job("queued", attempts=1, preemptions=1, history=history))
    run = client.get_run(run_id)
    assert run.data.tags["hived.preemptions"] == "2" and run.data.tags["hived.preempted"] == "true"
    assert "hived: preempted (2) at 2023-11-14 22:13:20 UTC" in run.data.tags["mlflow.note.content"]
    assert sorted((m.step, m.value) for m in client.get_metric_history(run_id, "hived.preemptions")) == [(1, 1), (2, 2)]


def test_a_count_tag_that_is_not_a_count_reads_as_zero():
    from hived.mlflow_plugin.submitted_run import count_tag
    assert [count_tag(v) for v in (None, "", "3", "-2", "many")] == [0, 0, 3, 0, 0]
