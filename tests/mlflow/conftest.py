"""Fixtures: real sqlite tracking stores and a real `hived serve`.

Creating an MLflow sqlite store runs all its alembic migrations (seconds on a
loaded 2-core box), so one store is migrated per session and each module gets
its own byte copy of it: isolated stores at the price of a file copy.
"""
import os
import shutil
from pathlib import Path

import mlflow
import pytest
from mlflow.tracking import MlflowClient

from hived.testing.mlflow_server import VC, VC_GPUS, start_server, stop_server  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
PROJECT = REPO / "examples" / "mlflow_project"


@pytest.fixture(scope="session")
def _migrated_store(tmp_path_factory):
    db = tmp_path_factory.mktemp("mlflow-template") / "mlflow.db"
    MlflowClient(f"sqlite:///{db}").search_experiments()  # creates and migrates the schema
    return db


@pytest.fixture(scope="module")
def tracking_uri(tmp_path_factory, _migrated_store):
    db = tmp_path_factory.mktemp("mlflow") / "mlflow.db"
    shutil.copyfile(_migrated_store, db)
    uri = f"sqlite:///{db}"
    old_env = os.environ.get("MLFLOW_TRACKING_URI")
    os.environ["MLFLOW_TRACKING_URI"] = uri
    mlflow.set_tracking_uri(uri)
    yield uri
    mlflow.set_tracking_uri(old_env or "")
    if old_env is None:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    else:
        os.environ["MLFLOW_TRACKING_URI"] = old_env


@pytest.fixture(scope="session")
def hived_server(tmp_path_factory):
    """One real `hived serve` (local launcher, 0.2 s tick) for every end-to-end module.

    Its jobs run as the server's account: they write the tracking store and checkpoints in
    pytest's temporary folders, which only root may enter (/tmp/pytest-of-root is 0700).
    tests/mlflow/test_root_account.py runs the backend against the default account."""
    tmp = tmp_path_factory.mktemp("hived")
    proc, info = start_server(tmp, tick=0.2, job_account="server")
    yield info
    stop_server(proc)


@pytest.fixture(scope="module")
def cfg(hived_server, tmp_path_factory):
    """A backend config for that service, checkpoints in a temp dir, no retries."""
    return {"vc": VC, "gpus": 1, "service_url": hived_server["url"], "token": hived_server["token"],
            "checkpoint_dir": str(tmp_path_factory.mktemp("ckpt")), "max_retries": 0}
