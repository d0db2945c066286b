"""``hived serve``: refuses a bad spec before starting, and clients find a
running one through DATA_DIR/server.json."""
from __future__ import annotations

import getpass
import json
import subprocess
import sys

from .conftest import SPEC


def serve(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "hived.cli.main", "serve", "--allow-root", *args],
                          capture_output=True, text=True, timeout=timeout)


def test_bad_spec_is_refused_before_starting(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("physicalCluster: {cellTypes: {}}\nvirtualClusters: {}\n")
    r = serve("--spec", str(bad), "--data-dir", str(tmp_path / "d"), "--port", "0")
    assert r.returncode == 2 and r.stderr.startswith("hived serve: ") and "Traceback" not in r.stderr
    assert not (tmp_path / "d" / "server.json").exists()
    r = serve("--spec", str(tmp_path / "missing.yaml"), "--data-dir", str(tmp_path / "d"))
    assert r.returncode == 2 and "no spec file at" in r.stderr
    tokens = tmp_path / "tokens.json"
    tokens.write_text("[1, 2]")
    r = serve("--spec", str(SPEC), "--data-dir", str(tmp_path / "d"), "--user-tokens", str(tokens))
    assert r.returncode == 2 and "want a JSON object" in r.stderr


def test_client_finds_the_server_through_its_data_dir(live_server, monkeypatch, tmp_path):
    from hived.service.client import HivedClient, HivedUnreachable
    data = live_server.data_dir
    info = json.loads((data / "server.json").read_text())
    assert info["token"] == "tok-server" and info["pid"] == live_server.proc.pid
    assert (data / "server.json").stat().st_mode & 0o777 == 0o600     # it holds the token
    for k in ("HIVED_URL", "HIVED_TOKEN"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HIVED_DATA_DIR", str(data))
    status = HivedClient().status()          # no url, no token: found through server.json
    assert status["ok"] is True and status["user"] == getpass.getuser()   # the server token's user
    # a second server on the same data directory is refused, clearly, and leaves server.json alone
    r = serve("--spec", str(SPEC), "--data-dir", str(data), "--port", "0")
    assert r.returncode == 1 and "another hived service" in r.stderr, r.stderr[-500:]
    assert json.loads((data / "server.json").read_text()) == info
    # no server.json: a clear error naming where it looked
    try:
        HivedClient(data_dir=str(tmp_path))
        raise AssertionError("found a server that is not there")
    except HivedUnreachable as exc:
        assert "no hived service found" in str(exc) and str(tmp_path / "server.json") in str(exc)
