"""``hived serve`` as a new user starts it: per-user tokens, a member trying
Jupyter's own routes, revocation, file modes, request limits, TLS."""
from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from .conftest import SPEC, TOKENS

PY = [sys.executable, "-m", "hived.cli.main", "serve"]


class Served:
    def __init__(self, data: Path, *extra: str, env: dict | None = None, scheme: str = "http"):
        data.mkdir(parents=True, exist_ok=True)
        self.data, self.tokens = data, data.parent / f"{data.name}-tokens.json"
        self.tokens.write_text(json.dumps(TOKENS))
        token_file = data.parent / f"{data.name}-server-token"
        token_file.write_text("tok-server\n")
        run_env = {k: v for k, v in os.environ.items() if not k.startswith("HIVED_")}
        run_env.update(env or {})
        self.log = open(data.parent / f"{data.name}.log", "w")
        args = [*PY, "--spec", str(SPEC), "--data-dir", str(data), "--port", "0", "--allow-root",
                "--user-tokens", str(self.tokens), "--tick", "0.05", *extra]
        if "HIVED_TOKEN" not in run_env:
            args += ["--token-file", str(token_file)]
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=run_env)
        deadline = time.monotonic() + 60
        while not (data / "server.json").exists():
            assert self.proc.poll() is None and time.monotonic() < deadline, self.output()
            time.sleep(0.1)
        self.url = json.loads((data / "server.json").read_text())["url"]
        assert self.url.startswith(scheme + "://"), self.url
        # passed per request: $REQUESTS_CA_BUNDLE would override a session's setting
        self.verify = str(data.parent / "cert.pem") if scheme == "https" else True
        while True:
            try:
                requests.get(self.url + "hived/api/healthz", timeout=2, verify=self.verify)
                break
            except requests.ConnectionError:
                assert time.monotonic() < deadline, self.output()
                time.sleep(0.05)

    def output(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text()[-3000:]

    def call(self, method, path, token=None, session=None, **kw):
        headers = {"Authorization": f"token {token}"} if token else {}
        return (session or requests).request(method, self.url + path, headers=headers, timeout=20,
                                             allow_redirects=False, verify=self.verify, **kw)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@pytest.fixture
def served(tmp_path):
    servers = []

    def start(*extra, **kw):
        servers.append(Served(tmp_path / f"data{len(servers)}", *extra, **kw))
        return servers[-1]
    yield start
    for s in servers:
        s.stop()


def test_a_member_reaches_no_jupyter_route_and_no_secret(served):
    srv = served()
    attempts = [("GET", "files/server.json"), ("GET", "files/hived.db"),
                ("GET", "api/contents/server.json?content=1"), ("GET", "api/contents/tokens.json"),
                ("GET", "api/contents"), ("POST", "api/terminals"), ("GET", "api/terminals"),
                ("POST", "api/kernels"), ("GET", "api/kernelspecs"), ("GET", "lab"),
                ("GET", "lsp/status"), ("GET", "api/me"), ("POST", "api/shutdown")]
    for token in ("tok-alice", "tok-root", "tok-server"):   # member, cluster admin, server account
        for method, path in attempts:
            r = srv.call(method, path, token)
            assert r.status_code in (403, 404), (token, method, path, r.status_code, r.text[:200])
            assert "tok-" not in r.text
    # still serving: the shutdown above was refused
    assert srv.call("GET", "hived/api/status", "tok-alice").json()["user"] == "alice"
    assert srv.call("GET", "hived/api/healthz").json() == {"ok": True}       # no token needed
    assert srv.call("GET", "hived/api/readyz").json() == {"ready": True}
    assert srv.call("GET", "hived/api/status").status_code == 403


def test_data_dir_is_private_and_jobs_do_not_get_the_server_token(served):
    # jobs as the server's own account: every folder stays 0700 (with a uid per VC, as by default
    # under root, the folders jobs must traverse are 0711: tests/service/test_local_isolation.py)
    srv = served(env={"HIVED_TOKEN": "tok-from-env-secret", "HIVED_JOB_ACCOUNT": "server"})
    r = srv.call("POST", "hived/api/jobs", "tok-alice", json={"vc": "vca", "command": "env; echo done"})
    assert r.status_code == 201, r.text
    job = r.json()["id"]
    deadline = time.monotonic() + 30
    while srv.call("GET", f"hived/api/jobs/{job}", "tok-alice").json()["state"] not in ("succeeded", "failed"):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    text = srv.call("GET", f"hived/api/jobs/{job}/logs", "tok-alice").json()["text"]
    assert "done" in text, json.dumps(srv.call("GET", f"hived/api/jobs/{job}", "tok-alice").json())
    assert "tok-from-env-secret" not in text
    assert srv.call("GET", "hived/api/status", "tok-from-env-secret").json()["user"]  # the env token is the server's
    assert stat.S_IMODE(srv.data.stat().st_mode) == 0o700
    for path in srv.data.rglob("*"):
        mode = stat.S_IMODE(path.stat().st_mode)
        # folders may let others pass through (search, never list or write): jobs under their own
        # uids must reach their own folder; files are for hived alone
        hidden = 0o066 if path.is_dir() else 0o077
        assert mode & hidden == 0, f"{path} is mode {oct(mode)}"


def login(srv, token: str) -> requests.Session:
    """A browser logged in on the login page with ``token`` (the only way to a login cookie:
    a request with a token in its header gets none)."""
    browser = requests.Session()
    browser.get(srv.url + "login", timeout=20)
    r = browser.post(srv.url + "login", data={"password": token, "_xsrf": browser.cookies.get("_xsrf", "")},
                     allow_redirects=False, timeout=20)
    assert r.status_code == 302, r.text[:300]
    return browser


def test_removed_token_is_refused_at_once_cookie_or_not(served):
    srv = served("--jupyter")   # the login page is served with Jupyter's routes
    assert "Set-Cookie" not in srv.call("GET", "hived/api/status", "tok-bob").headers
    browser = login(srv, "tok-bob")
    assert srv.call("GET", "hived/api/status", session=browser).json()["user"] == "bob"   # cookie alone
    tokens = dict(TOKENS)
    del tokens["tok-bob"]
    srv.tokens.write_text(json.dumps(tokens))
    srv.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while srv.call("GET", "hived/api/status", "tok-bob").status_code == 200:
        assert time.monotonic() < deadline, "SIGHUP did not reload the tokens"
        time.sleep(0.05)
    assert srv.call("GET", "hived/api/status", session=browser).status_code == 403
    # the admin route: only cluster admins (and the server account) may reload
    tokens["tok-bob2"] = "bob"
    srv.tokens.write_text(json.dumps(tokens))
    r = srv.call("POST", "hived/api/tokens/reload", "tok-eve", json={})
    assert r.status_code == 403 and "cluster admins only" in r.json()["error"]
    r = srv.call("POST", "hived/api/tokens/reload", "tok-root", json={})
    assert r.status_code == 200 and r.json() == {"tokens": len(tokens)}
    assert srv.call("GET", "hived/api/status", "tok-bob2").json()["user"] == "bob"
    # a broken file changes nothing
    srv.tokens.write_text("{not json")
    r = srv.call("POST", "hived/api/tokens/reload", "tok-server", json={})
    assert r.status_code == 400 and "not JSON" in r.json()["error"] and "\n" not in r.json()["error"]
    assert srv.call("GET", "hived/api/status", "tok-bob2").status_code == 200
    # tokens in URLs are refused, with the reason
    r = srv.call("GET", "hived/api/status?token=tok-alice")
    assert r.status_code == 403 and r.json()["where"] == "query.token", r.text


def test_bodies_are_refused_before_they_are_read(served):
    srv = served()
    host, port = srv.url.split("//")[1].rstrip("/").split(":")

    def raw(headers: str) -> str:
        # the body never comes: a server that waited for it would let recv time out (a failure)
        with socket.create_connection((host, int(port)), timeout=30) as s:
            s.sendall(f"POST /hived/api/jobs HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                      f"Content-Length: 500000000\r\n{headers}\r\n".encode())
            return s.recv(4096).decode(errors="replace")   # answered without a byte of body sent
    assert raw("").startswith("HTTP/1.1 403")
    assert raw("Authorization: token tok-alice\r\n").startswith("HTTP/1.1 413")
    assert "the limit is 1048576" in raw("Authorization: token tok-alice\r\n")
    assert srv.call("GET", "hived/api/healthz").status_code == 200


def test_serve_refuses_argv_tokens_and_root_without_allow_root(tmp_path):
    def serve(*args, env=None):
        return subprocess.run([*PY, "--spec", str(SPEC), "--data-dir", str(tmp_path / "d"), "--port", "0", *args],
                              capture_output=True, text=True, timeout=60, env=env)
    r = serve("--allow-root", "--token", "visible-in-ps")
    assert r.returncode == 2 and "--token is refused" in r.stderr and "--token-file" in r.stderr
    if os.geteuid() == 0:
        r = serve()
        assert r.returncode == 2 and "refusing to run as root" in r.stderr and "--allow-root" in r.stderr
    empty = tmp_path / "empty"
    empty.write_text("\n")
    r = serve("--allow-root", "--token-file", str(empty))
    assert r.returncode == 2 and "is empty" in r.stderr
    r = serve("--allow-root", "--certfile", str(empty))
    assert r.returncode == 2 and "go together" in r.stderr
    assert not (tmp_path / "d" / "server.json").exists()


def test_tls(served, tmp_path):
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    (tmp_path / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                         serialization.PrivateFormat.PKCS8,
                                                         serialization.NoEncryption()))
    srv = served("--certfile", str(tmp_path / "cert.pem"), "--keyfile", str(tmp_path / "key.pem"), scheme="https")
    r = srv.call("GET", "hived/api/status", "tok-alice")
    assert r.status_code == 200 and r.json()["user"] == "alice"
    with pytest.raises(requests.exceptions.SSLError):   # not trusted without the cert
        requests.get(srv.url + "hived/api/healthz", timeout=10)
