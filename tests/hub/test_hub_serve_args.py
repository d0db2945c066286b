"""``hived serve --hub`` refuses what cannot work, naming it, before starting anything."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from .conftest import SPEC

HUB_ENV = {"JUPYTERHUB_API_URL": "http://127.0.0.1:9/hub/api", "JUPYTERHUB_API_TOKEN": "t" * 32}


def serve(tmp_path, *args, env=None):
    run_env = {k: v for k, v in os.environ.items() if not k.startswith(("HIVED_", "JUPYTERHUB_"))}
    run_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "hived.cli.main", "serve", "--spec", str(SPEC),
                           "--data-dir", str(tmp_path / "data"), "--allow-root", "--port", "0", *args],
                          env=run_env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args, env, says", [
    (["--hub"], {}, "--hub needs JUPYTERHUB_API_URL and JUPYTERHUB_API_TOKEN"),
    (["--hub"], {"JUPYTERHUB_API_URL": "http://127.0.0.1:9/hub/api"}, "--hub needs JUPYTERHUB_API_TOKEN"),
    (["--hub", "--jupyter"], HUB_ENV, "--jupyter is refused with --hub"),
    (["--hub", "--hub-cache", "-1"], HUB_ENV, "--hub-cache must be 0 or more seconds, got -1"),
    (["--jupyter"], {**HUB_ENV, "JUPYTERHUB_SERVICE_NAME": "hived"}, "--jupyter is refused with --hub"),
])
def test_refusals(tmp_path, args, env, says):
    out = serve(tmp_path, *args, env=env)
    assert out.returncode == 2, out.stderr
    assert says in out.stderr, out.stderr
    assert not (tmp_path / "data").exists()  # nothing made
