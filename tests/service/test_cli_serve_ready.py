"""`hived serve` writes server.json only once it listens: a command that finds the file
can connect at once (the CLI is quick enough to lose a race against the server's start)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

SPEC = str(Path(__file__).with_name("spec_small.yaml"))


def test_the_url_in_server_json_accepts_connections_as_soon_as_the_file_exists(tmp_path):
    d = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if k not in ("HIVED_URL", "HIVED_TOKEN", "HIVED_DATA_DIR")}
    srv = subprocess.Popen([sys.executable, "-m", "hived.cli.main", "serve", "--spec", SPEC, "--data-dir", str(d),
                            "--port", "0", "--allow-root"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        info = None
        while info is None:
            assert srv.poll() is None and time.monotonic() < deadline, srv.stdout.read().decode()[-2000:]
            try:
                info = json.loads((d / "server.json").read_text())
            except (OSError, ValueError):    # not there yet, or caught half-written
                time.sleep(0.001)
        where = urlsplit(info["url"])
        with socket.create_connection((where.hostname, where.port), timeout=5):
            pass                              # refused when the file came before the listening socket
    finally:
        srv.terminate()
        srv.wait(timeout=30)
