"""Fixtures for the Jupyter tests: a jupyter-server with hived's extension
(in-process, pytest-jupyter) and per-user tokens, so that requests can be
made as users of different VCs, a VC admin, a cluster admin and a stranger."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

SPEC = Path(__file__).with_name("spec_jupyter.yaml")
USERS = ("alice", "anna", "ada", "bob", "root", "eve")
TOKENS = {f"tok-{u}": u for u in USERS}


@pytest.fixture(autouse=True)
def server_job_account(request, monkeypatch):
    """The extension's data directory is in pytest's root-only temporary folder and the
    jobs run this suite's python: as the server's account (hived.testing.job_account says
    why); tests marked ``default_job_account`` run as users get it."""
    from hived.testing.job_account import server_account_unless_marked
    server_account_unless_marked(request, monkeypatch)


@pytest.fixture
def hived_data(tmp_path):
    d = tmp_path / "hived-data"
    d.mkdir()
    return d


@pytest.fixture
def jp_server_config(hived_data):
    return {
        "ServerApp": {
            "jpserver_extensions": {"hived.jupyter_ext": True},
            "identity_provider_class": "hived.jupyter_ext.auth.HivedIdentityProvider",
        },
        "HivedIdentityProvider": {"user_tokens": TOKENS},
        "HivedExtension": {"spec_path": str(SPEC), "data_dir": str(hived_data), "tick_seconds": 0.05,
                           "follow_timeout": 3.0},
    }


@pytest.fixture
def api(jp_fetch, jp_serverapp):
    """``await api(user, method, *path, body=..., params=...)`` -> (status, JSON doc).

    Never raises on 4xx/5xx: tests assert on the status and the error body."""
    from tornado.httpclient import HTTPClientError

    async def call(user, method, *path, body=None, params=None, raw=None):
        kw = {"method": method, "headers": {"Authorization": f"token tok-{user}"} if user else
              {"Authorization": "token nope"}}
        if method == "POST":
            kw["body"] = raw if raw is not None else json.dumps(body if body is not None else {})
            kw["headers"]["Content-Type"] = "application/json"
        try:
            r = await jp_fetch("hived", "api", *path, params=params, **kw)
        except HTTPClientError as exc:
            r = exc.response
        text = r.body.decode() if r.body else ""
        try:
            doc = json.loads(text) if text else None
        except ValueError:
            doc = text
        return r.code, doc

    return call


@pytest.fixture
def service(jp_serverapp):
    state = jp_serverapp.web_app.settings["hived"]
    assert state.service is not None, state.error
    yield state.service
    # jobs started in a test must not outlive it
    state.service.stop(cancel_jobs=True, timeout=5)


class LiveServer:
    """A ``hived serve`` process: a real Jupyter server on a free port."""

    def __init__(self, data_dir: Path, launcher: str = "local", spec: Path = SPEC):
        import os
        import subprocess
        import sys
        import time
        self.data_dir = data_dir
        tokens = data_dir / "tokens.json"
        tokens.write_text(json.dumps(TOKENS))
        token_file = data_dir / "server-token"
        token_file.write_text("tok-server\n")
        # data dir in pytest's root-only temp folder, jobs run this suite's python: as the
        # server's account (hived.testing.job_account says why)
        env = dict(os.environ, HIVED_JOB_ACCOUNT="server")
        for k in ("HIVED_URL", "HIVED_TOKEN", "HIVED_USER", "HIVED_VC"):
            env.pop(k, None)
        self.log = open(data_dir / "serve.log", "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "hived.cli.main", "serve", "--spec", str(spec),
             "--data-dir", str(data_dir), "--port", "0", "--token-file", str(token_file),
             "--allow-root", "--user-tokens", str(tokens), "--tick", "0.05", "--launcher", launcher],
            stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 60
        info = data_dir / "server.json"
        while not info.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"hived serve did not start: {(data_dir / 'serve.log').read_text()[-2000:]}")
            time.sleep(0.1)
        self.url = json.loads(info.read_text())["url"]
        self.api = self.url.rstrip("/") + "/hived/api/"
        import requests
        while True:  # server.json is written just before the loop starts listening
            try:
                requests.get(self.api + "status", timeout=1)
                break
            except (requests.ConnectionError, requests.Timeout):   # a loaded box may answer late
                assert time.monotonic() < deadline, "hived serve does not answer"
                time.sleep(0.05)

    def client(self, user: str):
        from hived.service.client import HivedClient
        return HivedClient(self.url, token=f"tok-{user}")

    def stop(self):
        import signal
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except Exception:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@pytest.fixture(scope="session")
def live_server(tmp_path_factory):
    """One real ``hived serve`` (local launcher) shared by the magics and widget tests."""
    server = LiveServer(tmp_path_factory.mktemp("live"))
    yield server
    try:
        root = server.client("root")
        for job in root.jobs():
            if job["state"] not in ("succeeded", "failed", "cancelled"):
                root.cancel(job["id"])
    finally:
        server.stop()


@pytest.fixture(scope="session")
def null_server(tmp_path_factory):
    """A ``hived serve`` whose launcher runs nothing (for fuzzing)."""
    server = LiveServer(tmp_path_factory.mktemp("null"), launcher="hived.testing.launcher_noop.NoopLauncher")
    yield server
    server.stop()
