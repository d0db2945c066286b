"""Refusals that need no service: bad configs and an unreachable service leave no run behind."""
import os
import shutil
import subprocess
import sys

import mlflow
import pytest
from mlflow.tracking import MlflowClient

from hived.mlflow_plugin.backend import called_from_mlflow_cli
from hived.mlflow_plugin.config import BackendConfigError, HivedBackendError

from .conftest import PROJECT

MLFLOW = os.path.join(os.path.dirname(sys.executable), "mlflow")


def _runs(uri):
    client = MlflowClient(uri)
    exps = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(exps) if exps else []


def test_entry_point_is_registered():
    from mlflow.projects.backend import loader
    backend = loader.load_backend("hived")
    assert type(backend).__name__ == "HivedProjectBackend"
    assert not called_from_mlflow_cli()  # plain python, not the `mlflow run` command


def test_bad_config_refused_before_anything(tracking_uri):
    with pytest.raises(BackendConfigError, match="'pods': must be >= 1"):
        mlflow.projects.run(str(PROJECT), backend="hived", env_manager="local",
                            backend_config={"vc": "a", "pods": 0}, synchronous=False)
    assert _runs(tracking_uri) == []


def test_unreachable_service_one_line(tracking_uri):
    with pytest.raises(HivedBackendError) as info:
        mlflow.projects.run(str(PROJECT), backend="hived", env_manager="local",
                            backend_config={"vc": "a", "service_url": "http://127.0.0.1:9/"})
    msg = str(info.value)
    assert "no hived service at http://127.0.0.1:9/" in msg and "\n" not in msg
    assert _runs(tracking_uri) == []


def test_no_service_configured_at_all(tracking_uri, tmp_path, monkeypatch):
    monkeypatch.delenv("HIVED_URL", raising=False)
    monkeypatch.setenv("HIVED_DATA_DIR", str(tmp_path))  # no server.json there
    with pytest.raises(HivedBackendError, match="no hived service found"):
        mlflow.projects.run(str(PROJECT), backend="hived", env_manager="local",
                            backend_config={"vc": "a"})
    assert _runs(tracking_uri) == []


@pytest.mark.parametrize("config,expected", [
    ('{"vc": "a", "gpus": "two"}', "=== hived backend config: 'gpus': must be an integer, got \"two\" ==="),
    ('{"vc": "a", "service_url": "http://127.0.0.1:9/"}', "no hived service at http://127.0.0.1:9/"),
])
def test_cli_prints_one_error_line(tmp_path, config, expected, _migrated_store):
    shutil.copyfile(_migrated_store, tmp_path / "m.db")  # a fresh, already migrated store
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/m.db"}
    proc = subprocess.run([MLFLOW, "run", str(PROJECT), "--backend", "hived", "--env-manager", "local",
                           "--backend-config", config], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    assert expected in lines[0]
    assert _runs(env["MLFLOW_TRACKING_URI"]) == []   # refused before any run was created
