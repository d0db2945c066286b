"""A real ``hived serve`` in a subprocess, for tests that drive it as users do (CLI, REST)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

EXE = [sys.executable, "-m", "hived.cli.main"]


@contextmanager
def served_hived(spec: dict, folder: Path, start_timeout: float = 60) -> Iterator[dict[str, str]]:
    """Serve ``spec`` from ``folder`` (spec file and data dir), trusting X-Hived-User, as root
    if run as root; yields the environment under which ``hived`` commands find it."""
    path = folder / "cluster.yaml"
    path.write_text(yaml.safe_dump(spec))
    data = folder / "data"
    env = {k: v for k, v in os.environ.items() if k not in ("HIVED_URL", "HIVED_TOKEN", "HIVED_USER")}
    env.update(HIVED_SCHEME="hived", HIVED_DATA_DIR=str(data))
    srv = subprocess.Popen(EXE + ["serve", "--spec", str(path), "--data-dir", str(data), "--port", "0",
                                  "--trust-user-header", "--tick", "0.1", "--allow-root"],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + start_timeout
        while not (data / "server.json").exists():
            if srv.poll() is not None or time.monotonic() > deadline:
                srv.kill()
                out = srv.stdout.read().decode() if srv.stdout else ""
                raise RuntimeError("hived serve did not start: " + out[-2000:])
            time.sleep(0.1)
        yield env
    finally:
        srv.terminate()
        srv.wait(timeout=30)
