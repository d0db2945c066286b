"""The MLflow backend against a root-run `hived serve` with the default job account (a uid
per VC), as on most GPU boxes: what the job's account cannot reach (a python under /root,
a tracking store or checkpoints in a root-only folder) is refused at submission, before
anything runs, in one line naming the path and the ways out; the run ends FAILED."""
import os
import shutil
import tempfile
from pathlib import Path

import mlflow
import pytest
from mlflow.tracking import MlflowClient

from hived.mlflow_plugin.backend import job_needs, local_store_dir
from hived.mlflow_plugin.config import HivedBackendError
from hived.service.client import HivedClient

from .conftest import PROJECT, VC, start_server, stop_server

pytestmark = [pytest.mark.timeout(150),
              pytest.mark.skipif(os.geteuid() != 0, reason="switching job accounts needs root")]


@pytest.fixture(scope="module")
def root_server():
    """A `hived serve` as root with the default job account; its data directory others may pass."""
    assert "HIVED_JOB_ACCOUNT" not in os.environ     # the suite shows what users get
    base = Path(tempfile.mkdtemp(prefix="hived-mlroot-"))
    os.chmod(base, 0o711)
    proc, info = start_server(base, tick=0.2)
    yield info
    stop_server(proc)
    shutil.rmtree(base, ignore_errors=True)


def test_needs_name_the_program_checkpoints_and_store():
    assert job_needs("python train.py --steps 5", "/ck/r1", "sqlite:////data/ml/mlflow.db") == {
        "programs": ["python"], "writable": ["/ck/r1", "/data/ml"]}
    assert local_store_dir("http://tracking:5000") is None
    assert local_store_dir("file:///data/mlruns") == "/data/mlruns"


def test_unreachable_paths_are_refused_before_the_job_runs(root_server, tracking_uri, tmp_path):
    cfg = {"vc": VC, "gpus": 1, "service_url": root_server["url"], "token": root_server["token"],
           "checkpoint_dir": str(tmp_path / "ckpt")}
    with pytest.raises(HivedBackendError) as exc:
        mlflow.projects.run(str(PROJECT), entry_point="trivial", backend="hived", backend_config=cfg,
                            env_manager="local", synchronous=False)
    line = str(exc.value)
    assert "\n" not in line
    # this suite's python lives under /root (a pyenv), like a private venv's
    assert "unix account hived-ml (uid " in line and "HIVED_JOB_ACCOUNT=server" in line
    assert "accounts:" in line and "shared place" in line
    assert line.startswith("hived: command: program 'python' is not found") or "needs.writable" in line, line
    client = MlflowClient(tracking_uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    refused = [r for r in runs if r.data.tags.get("hived.state") == "refused"]
    assert refused and refused[0].info.status == "FAILED"
    api = HivedClient(url=root_server["url"], token=root_server["token"])
    assert api.jobs() == []       # nothing was queued, nothing ran
