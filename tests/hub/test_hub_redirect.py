"""``hived/login?next=...`` sends a browser back only to a path under the service's own base URL.

A real ``hived serve --hub`` at base URL ``/`` (the Hub's API is not needed: the server's own
token is checked locally, and an unknown caller is sent to the Hub's login page without asking it).
Browsers read ``/\\host`` as ``//host``, so a path that starts like that leaves the site. A browser
not yet logged in is sent to the Hub with the same target checked (kept in hived's own OAuth state,
so it is not visible from outside)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from urllib.parse import unquote, urlsplit

import pytest
import requests

from .conftest import SPEC

HUB_ENV = {"JUPYTERHUB_API_URL": "http://127.0.0.1:9/hub/api", "JUPYTERHUB_API_TOKEN": "t" * 32,
           "JUPYTERHUB_CLIENT_ID": "service-hived"}
HOSTILE = ["/\\evil.example/x", "/\\\\evil.example/x", "//evil.example/x", "/\t/evil.example/x",
           "https://evil.example/x", "/%5Cevil.example/x", "/hived/../../\\evil.example", "\\\\evil.example/x",
           "/ /evil.example", "javascript:alert(1)"]


@pytest.fixture(scope="module")
def hub_served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hubredirect")
    (tmp / "token").write_text("tok-server\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HIVED_", "JUPYTERHUB_"))}
    env.update(HUB_ENV)
    log = open(tmp / "serve.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "hived.cli.main", "serve", "--hub", "--spec", str(SPEC),
                             "--data-dir", str(tmp / "data"), "--allow-root", "--port", "0",
                             "--token-file", str(tmp / "token"), "--launcher",
                             "hived.testing.launcher_noop.NoopLauncher"],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    info = tmp / "data" / "server.json"
    deadline = time.monotonic() + 90
    while not info.exists():
        assert proc.poll() is None and time.monotonic() < deadline, (tmp / "serve.log").read_text()[-2000:]
        time.sleep(0.1)
    url = json.loads(info.read_text())["url"]
    yield url
    proc.terminate()
    proc.wait(15)
    log.close()


def _off_site(location: str) -> bool:
    where = urlsplit(location)
    text = unquote(location)
    return bool(where.scheme or where.netloc) or "\\" in text or text.startswith("//") or "evil" in text


@pytest.mark.parametrize("target", HOSTILE)
def test_a_logged_in_browser_is_never_sent_off_site(hub_served, target):
    r = requests.get(hub_served + "hived/login", params={"next": target}, timeout=30, allow_redirects=False,
                     headers={"Authorization": "token tok-server"})
    assert r.status_code == 302, r.text
    assert r.headers["Location"] == "/hived/api/status", r.headers["Location"]


def test_a_path_under_the_base_url_is_kept(hub_served):
    r = requests.get(hub_served + "hived/login", params={"next": "/hived/api/vcs?x=1"}, timeout=30,
                     allow_redirects=False, headers={"Authorization": "token tok-server"})
    assert r.status_code == 302 and r.headers["Location"] == "/hived/api/vcs?x=1"
    assert not _off_site(r.headers["Location"])
