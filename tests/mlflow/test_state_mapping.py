"""Job state -> MLflow status, placement tags, and the resume prologue run by a real shell."""
import os
import subprocess

import pytest

from hived.mlflow_plugin.history import running_seconds
from hived.mlflow_plugin.resume import checkpoint_dir_for, wrap_command
from hived.mlflow_plugin.submitted_run import mlflow_status, placement_tags


@pytest.mark.parametrize("job,status", [
    ({"state": "queued"}, "SCHEDULED"),
    ({"state": "placed", "preemptions": 0, "attempts": 0}, "SCHEDULED"),
    ({"state": "running"}, "RUNNING"),
    ({"state": "preempting", "preemptions": 1}, "RUNNING"),
    ({"state": "queued", "preemptions": 1, "attempts": 1}, "RUNNING"),  # preempted, waiting again
    ({"state": "succeeded"}, "FINISHED"),
    ({"state": "failed"}, "FAILED"),
    ({"state": "cancelled", "preemptions": 2}, "KILLED"),
])
def test_status_mapping(job, status):
    assert mlflow_status(job) == status


def test_unknown_state_is_an_error():
    with pytest.raises(ValueError, match="unknown hived job state 'lost'"):
        mlflow_status({"id": "j1", "state": "lost"})


def test_placement_tags():
    job = {"placement": {"chain": "DGX", "pods": [{"rank": 0, "node": "n1", "gpus": [0, 1]},
                                                  {"rank": 1, "node": "n2", "gpus": [2, 3]},
                                                  {"rank": 2, "node": "n1", "gpus": [4]}]}}
    tags = placement_tags(job)
    assert tags == {"hived.nodes": "n1,n2", "hived.gpus": "5", "hived.chain": "DGX",
                    "hived.placement": "n1:0,1;n2:2,3;n1:4"}
    assert placement_tags({"placement": None}) == {}


def test_running_seconds_from_history():
    hist = [[0, "queued", ""], [2, "running", ""], [5, "preempting", ""], [6, "queued", ""],
            [10, "running", ""], {"time": 13, "state": "succeeded"}]
    assert running_seconds(hist) == pytest.approx(7.0)
    assert running_seconds([]) is None
    assert running_seconds([[0, "queued"]]) is None


def _run(script, extra_env=None):
    env = {"PATH": os.environ["PATH"], **(extra_env or {})}
    return subprocess.run(["/bin/sh", "-c", script], env=env, capture_output=True, text=True, check=True)


def test_resume_prologue_marks_later_attempts(tmp_path):
    ckpt = checkpoint_dir_for("run123", str(tmp_path / "ck dir"))
    assert ckpt.endswith(os.path.join("ck dir", "run123"))
    cmd = wrap_command("echo \"$HIVED_RESUMED|$HIVED_CHECKPOINT_DIR|$1\" && exit 0", ckpt)
    first = _run(cmd)
    second = _run(cmd)
    assert first.stdout.strip() == f"0|{ckpt}|"
    assert second.stdout.strip() == f"1|{ckpt}|"
    assert os.path.isdir(ckpt)


def test_prologue_keeps_exit_code_and_quotes(tmp_path):
    ckpt = checkpoint_dir_for("r", str(tmp_path))
    proc = subprocess.run(["/bin/sh", "-c", wrap_command("echo 'it''s'; exit 7", ckpt)],
                          capture_output=True, text=True)
    assert proc.returncode == 7 and proc.stdout.strip() == "its"
