"""The `mlflow run` command's own code, run in-process (click's CliRunner), against the real service.

The subprocess CLI runs in test_e2e.py; these cover the CLI's failure and
Ctrl-C paths without paying MLflow's import time again for each.
"""
import json

import mlflow
import pytest
from click.testing import CliRunner
from mlflow.cli import cli
from mlflow.tracking import MlflowClient

import hived.mlflow_plugin.backend as backend
from hived.mlflow_plugin.__main__ import main as follow_main
from hived.mlflow_plugin.config import HivedBackendError
from hived.service.client import HivedClient

from .conftest import PROJECT

pytestmark = pytest.mark.timeout(120)


def _mlflow_run(tracking_uri, cfg, run_name, *params):
    args = ["run", str(PROJECT), "--backend", "hived", "--env-manager", "local", "--run-name", run_name,
            "--backend-config", json.dumps(cfg)]
    for p in params:
        args += ["-P", p]
    result = CliRunner().invoke(cli, args, env={"MLFLOW_TRACKING_URI": tracking_uri})
    client = MlflowClient(tracking_uri)
    runs = [r for r in client.search_runs([e.experiment_id for e in client.search_experiments()])
            if r.data.tags.get("mlflow.runName") == run_name]
    return result, runs


def test_cli_failed_job_fails_the_command_and_the_run(tracking_uri, cfg, capsys):
    result, (run,) = _mlflow_run(tracking_uri, cfg, "cli-fail", "steps=10", "fail_at=2",
                                 "step_seconds=0")
    assert result.exit_code == 1          # like --backend local: the command fails
    assert run.info.status == "FAILED"    # set by the backend before the command returned
    assert run.data.tags["hived.exit_code"] == "3" and run.data.tags["hived.state"] == "failed"
    assert "failing on purpose at step 2" in capsys.readouterr().out + result.output  # job output streamed
    steps = sorted(m.step for m in MlflowClient(tracking_uri).get_metric_history(run.info.run_id, "loss"))
    assert steps == [0, 1]


def test_cli_interrupt_cancels_the_job(tracking_uri, cfg, hived_server, monkeypatch):
    seen = []

    def interrupting_sink(text):  # Ctrl-C arrives while the job's output is being followed
        seen.append(text)
        if "start at step" in "".join(seen):
            raise KeyboardInterrupt

    monkeypatch.setattr(backend, "print_sink", interrupting_sink)
    result, (run,) = _mlflow_run(tracking_uri, cfg, "cli-interrupt", "steps=1000", "step_seconds=0.05")
    assert result.exit_code != 0                              # click: "Aborted!"
    assert run.info.status == "KILLED"
    job = HivedClient(hived_server["url"], hived_server["token"]).job(run.data.tags["hived.job_id"])
    assert job["state"] == "cancelled" and run.data.tags["hived.state"] == "cancelled"


def test_cli_detach_returns_at_once_then_follow(tracking_uri, cfg, hived_server, capsys):
    result, (run,) = _mlflow_run(tracking_uri, dict(cfg, detach=True), "bg-run",
                                 "steps=20", "step_seconds=0.1")
    assert result.exit_code == 0, result.output
    assert run.info.status in ("RUNNING", "SCHEDULED")        # returned before the job ended
    assert "done: w=" not in capsys.readouterr().out + result.output
    # `python -m hived.mlflow_plugin follow RUN_ID` finds job and service from the run's tags
    assert follow_main(["follow", run.info.run_id, "--token", hived_server["token"]]) == 0
    captured = capsys.readouterr()
    assert "done: w=" in captured.out and "succeeded" in captured.err
    client = MlflowClient(tracking_uri)
    run = client.get_run(run.info.run_id)
    assert run.info.status == "FINISHED" and run.data.tags["hived.state"] == "succeeded"
    assert sorted(m.step for m in client.get_metric_history(run.info.run_id, "loss")) == list(range(20))


def test_follow_refuses_a_run_not_started_by_hived(tracking_uri, capsys):
    client = MlflowClient(tracking_uri)
    run_id = client.create_run(client.create_experiment("plain")).info.run_id
    assert follow_main(["follow", run_id]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"hived follow: MLflow run {run_id} was not started by the hived backend (no hived.job_id tag)"


def test_cli_run_id_continues_an_existing_run(tracking_uri, cfg):
    client = MlflowClient(tracking_uri)
    run_id = client.create_run("0", tags={"mlflow.runName": "mine"}).info.run_id
    client.set_terminated(run_id, "FAILED")
    args = ["run", str(PROJECT), "--backend", "hived", "--env-manager", "local", "--run-id", run_id,
            "-P", "steps=3", "-P", "step_seconds=0", "--backend-config", json.dumps(cfg)]
    result = CliRunner().invoke(cli, args, env={"MLFLOW_TRACKING_URI": tracking_uri})
    assert result.exit_code == 0, result.output
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.tags["hived.job_id"]
    assert sorted(m.step for m in client.get_metric_history(run_id, "loss")) == [0, 1, 2]
    with pytest.raises(HivedBackendError, match="--run-id 0123abc: .*0123abc") as info:
        mlflow.projects.run(str(PROJECT), backend="hived", env_manager="local",
                            backend_config={**cfg, "_mlflow_local_backend_run_id": "0123abc"})
    assert "\n" not in str(info.value)


def test_cli_run_id_of_a_preempted_run_keeps_its_preemption_count(tracking_uri, cfg):
    """A finished run that was preempted once, continued with --run-id: the tags still agree."""
    client = MlflowClient(tracking_uri)
    run_id = client.create_run("0", tags={"hived.preempted": "true", "hived.preemptions": "1",
                                          "hived.job_id": "j-earlier"}).info.run_id
    client.set_terminated(run_id, "FINISHED")
    args = ["run", str(PROJECT), "--backend", "hived", "--env-manager", "local", "--run-id", run_id,
            "-P", "steps=2", "-P", "step_seconds=0", "--backend-config", json.dumps(cfg)]
    result = CliRunner().invoke(cli, args, env={"MLFLOW_TRACKING_URI": tracking_uri})
    assert result.exit_code == 0, result.output
    tags = client.get_run(run_id).data.tags
    assert tags["hived.job_id"] != "j-earlier" and tags["hived.state"] == "succeeded"
    assert (tags["hived.preempted"], tags["hived.preemptions"], tags["hived.earlier_preemptions"]) == \
        ("true", "1", "1")


def test_refused_runs_end_failed_never_running(tracking_uri, cfg, tmp_path):
    """Too many GPUs, a gang larger than the cluster, a bad workdir: the service refuses, the run is FAILED."""
    client = MlflowClient(tracking_uri)
    for n, (extra, says) in enumerate(((dict(gpus=64), "gpus"), (dict(pods=3, gpus=4), "groups"),
                                       (dict(workdir=str(tmp_path / "none")), "workdir"))):
        name = f"refused-{n}"
        result, runs = _mlflow_run(tracking_uri, dict(cfg, **extra), name)
        assert result.exit_code == 1, result.output
        (run,) = runs
        assert run.info.status == "FAILED" and run.info.lifecycle_stage == "active", (extra, run.info)
        assert says in run.data.tags["hived.refused"] and run.data.tags["hived.state"] == "refused"
    with pytest.raises(HivedBackendError) as info:                     # the API says it in one line
        mlflow.projects.run(str(PROJECT), backend="hived", env_manager="local", backend_config=dict(cfg, gpus=64))
    msg = str(info.value)
    assert "gpus" in msg and "is FAILED" in msg and "\n" not in msg, msg
    mine = client.create_run("0").info.run_id                          # a run named with --run-id too
    args = ["run", str(PROJECT), "--backend", "hived", "--env-manager", "local", "--run-id", mine,
            "--backend-config", json.dumps(dict(cfg, gpus=64))]
    result = CliRunner().invoke(cli, args, env={"MLFLOW_TRACKING_URI": tracking_uri})
    assert result.exit_code == 1 and client.get_run(mine).info.status == "FAILED"
