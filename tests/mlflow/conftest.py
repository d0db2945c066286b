"""Fixtures: a real sqlite tracking store in a temp dir, shared per module (migrations cost ~1 s)."""
import os
from pathlib import Path

import mlflow
import pytest

REPO = Path(__file__).resolve().parents[2]
PROJECT = REPO / "examples" / "mlflow_project"


@pytest.fixture(scope="module")
def tracking_uri(tmp_path_factory):
    db = tmp_path_factory.mktemp("mlflow") / "mlflow.db"
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


# --- a real `hived serve` for the end-to-end tests ---------------------------------
from hived.mlflow_plugin.devserver import VC, VC_GPUS, start_server, stop_server  # noqa: E402,F401


@pytest.fixture(scope="module")
def hived_server(tmp_path_factory):
    # TEMPORARY while the service is being written by others: a visible skip, never a pass
    pytest.importorskip("hived.core.allocator", reason="service not complete yet (no hived.core.allocator)")
    tmp = tmp_path_factory.mktemp("hived")
    proc, info = start_server(tmp, tick=0.2)
    yield info
    stop_server(proc)
