"""One real JupyterHub for the module: loopback, SQLite in a temporary folder,
the npm configurable-http-proxy, an authenticator that knows alice (group
team-a), bob (team-b) and hubadmin (hived-admins), and hived as the Hub's
managed service. The three may reach the service (a role with its access
scope); which VCs they use follows from their groups alone. A ``driver`` service (its token known to the tests) makes
users' tokens and changes groups through the Hub's REST API.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

HERE = Path(__file__).parent
REPO = HERE.parent.parent
SPEC = HERE / "spec_hub.yaml"
DRIVER_TOKEN = "driver-" + "0123456789abcdef" * 2
CACHE_SECONDS = 2
USERS = {"alice": "team-a", "bob": "team-b", "hubadmin": "hived-admins"}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proxy_command() -> str:
    """configurable-http-proxy from PATH, else the one `make install` put under .venv/node."""
    found = (shutil.which("configurable-http-proxy")
             or str(REPO / ".venv/node/node_modules/.bin/configurable-http-proxy"))
    assert Path(found).exists(), "configurable-http-proxy is not installed: run `make install` (npm step)"
    return found


CONFIG = """
import sys
c = get_config()
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {public}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {hub}
c.JupyterHub.db_url = "sqlite:///{tmp}/hub.sqlite"
c.JupyterHub.cookie_secret_file = "{tmp}/cookie_secret"
c.JupyterHub.pid_file = "{tmp}/hub.pid"
c.ConfigurableHTTPProxy.command = ["{proxy}"]
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy_api}"
c.ConfigurableHTTPProxy.pid_file = "{tmp}/proxy.pid"
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = "hub-test-password"
c.Authenticator.allowed_users = {users!r}
c.Authenticator.admin_users = {{"hubadmin"}}
c.JupyterHub.load_groups = {groups!r}
c.JupyterHub.spawner_class = "simple"
c.SimpleLocalProcessSpawner.home_dir_template = "{tmp}/home/{{username}}"
c.Spawner.cmd = [sys.executable, "-m", "jupyterhub.singleuser"]
c.Spawner.args = ["--allow-root"]  # the test machine may run everything as root
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120
# what docs/jupyterhub.md asks for: the servers' own tokens may use hived
c.Spawner.server_token_scopes = ["users:activity!user", "access:servers!server",
                                 "access:services!service=hived", "read:services!service=hived"]
c.JupyterHub.services = [
    {{"name": "hived", "url": "http://127.0.0.1:{hived}",
     "command": [sys.executable, "-m", "hived.cli.main", "serve", "--spec", "{spec}",
                 "--data-dir", "{tmp}/hived-data", "--allow-root", "--tick", "0.05",
                 "--hub-cache", "{cache}", *{extra!r}],
     # pytest's folders are 0700, which a per-VC uid cannot pass: jobs run as the server's
     # account here (per-VC accounts are tested in tests/service/test_local_isolation.py)
     "environment": {{"HIVED_JOB_ACCOUNT": "server"}}}},
    {{"name": "driver", "api_token": "{driver}"}},
]
c.JupyterHub.load_roles = [
    {{"name": "hived-users", "scopes": ["access:services!service=hived", "read:services!service=hived"],
     "users": {user_names!r}}},
    {{"name": "driver", "scopes": ["admin:users", "admin:groups", "admin:servers", "access:servers", "tokens",
                                   "access:services", "read:services"],
     "services": ["driver"]}},
]
"""


class Hub:
    def __init__(self, tmp: Path, extra: tuple = (), cache: int = CACHE_SECONDS, spec: Path = SPEC):
        """``extra``: more ``hived serve`` arguments; ``cache``: its --hub-cache."""
        self.tmp = tmp
        self.public, hub, proxy_api, hived = (_port() for _ in range(4))
        self.url = f"http://127.0.0.1:{self.public}/"
        self.api = self.url + "hub/api/"
        self.hived = self.url + "services/hived/"
        self.hived_direct = f"http://127.0.0.1:{hived}/services/hived/"  # past the proxy
        config = tmp / "jupyterhub_config.py"
        config.write_text(CONFIG.format(
            public=self.public, hub=hub, proxy_api=proxy_api, hived=hived, tmp=tmp, proxy=proxy_command(),
            users=set(USERS), groups={g: {"users": [u]} for u, g in USERS.items()},
            user_names=sorted(USERS), spec=spec, cache=cache, driver=DRIVER_TOKEN, extra=list(extra)))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HIVED_", "JUPYTERHUB_"))}
        self.log = open(tmp / "hub.log", "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(config)], cwd=tmp,
                                     stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.wait_for(self.hived + "hived/api/readyz")

    def wait_for(self, url: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, self.output()
            try:
                if requests.get(url, timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, f"{url} not ready:\n{self.output()}"
            time.sleep(0.2)

    def output(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return (self.tmp / "hub.log").read_text()[-4000:]

    def as_driver(self, method: str, path: str, **kw) -> requests.Response:
        r = requests.request(method, self.api + path, headers={"Authorization": f"token {DRIVER_TOKEN}"},
                             timeout=20, **kw)
        assert r.status_code < 300, (r.status_code, r.text)
        return r

    def token_for(self, user: str) -> str:
        """A token the user has on the Hub (as if made on the Hub's token page)."""
        return self.as_driver("POST", f"users/{user}/tokens", json={"note": "hived test"}).json()["token"]

    def start_server(self, user: str, timeout: float = 120) -> str:
        """Start the user's single-user server through the Hub; its URL through the proxy."""
        self.as_driver("POST", f"users/{user}/server")
        deadline = time.monotonic() + timeout
        while not (self.as_driver("GET", f"users/{user}").json().get("servers", {}).get("", {}).get("ready")):
            assert time.monotonic() < deadline, f"{user}'s server did not start:\n{self.output()}"
            time.sleep(0.3)
        return self.url + f"user/{user}/"

    def execute(self, server: str, cells: list[str], timeout: float = 120) -> list[str]:
        """Run cells in a new kernel of a user's server (Jupyter's kernel
        websocket protocol); each cell's stream output and error text."""
        import json
        import uuid

        import websocket
        auth = {"Authorization": f"token {DRIVER_TOKEN}"}
        kernel = requests.post(server + "api/kernels", json={"name": "python3"}, headers=auth, timeout=60)
        assert kernel.status_code == 201, kernel.text
        channels = server.replace("http", "ws", 1) + f"api/kernels/{kernel.json()['id']}/channels"
        ws = websocket.create_connection(channels,
                                         header=[f"Authorization: token {DRIVER_TOKEN}"], timeout=timeout)
        session, outputs = uuid.uuid4().hex, []
        try:
            for code in cells:
                msg_id = uuid.uuid4().hex
                ws.send(json.dumps({
                    "header": {"msg_id": msg_id, "session": session, "username": "test", "date": "",
                               "msg_type": "execute_request", "version": "5.3"},
                    "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
                    "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                                "allow_stdin": False, "stop_on_error": True}}))
                text = ""
                while True:
                    msg = json.loads(ws.recv())
                    if msg.get("parent_header", {}).get("msg_id") != msg_id:
                        continue
                    kind, content = msg["msg_type"], msg["content"]
                    if kind == "stream":
                        text += content["text"]
                    elif kind == "error":
                        text += "\n".join(content["traceback"])
                    elif kind == "status" and content["execution_state"] == "idle":
                        break
                outputs.append(text)
        finally:
            ws.close()
            requests.delete(server + f"api/kernels/{kernel.json()['id']}", headers=auth, timeout=30)
        return outputs

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # the Hub stops its services and the proxy
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    h = Hub(tmp_path_factory.mktemp("hub"))
    yield h
    h.stop()
