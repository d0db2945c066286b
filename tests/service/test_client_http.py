"""The REST client's HTTP (service/http_json.py) against real HTTP servers.

The client no longer uses ``requests``; these tests hold it to what the doors
relied on: kept-alive connections, reconnecting after the server dropped one,
threads, redirects, TLS trust through $REQUESTS_CA_BUNDLE, proxies from the
environment, timeouts, and one-line errors.
"""
from __future__ import annotations

import json
import math
import os
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from hived.service.client import HivedClient, HivedError, HivedUnreachable


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True
    closed = 0                      # connections this server has closed
    changed = threading.Condition()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass    # refused TLS handshakes and dropped connections are what some tests make happen

    def shutdown_request(self, request: Any) -> None:
        super().shutdown_request(request)
        with self.changed:
            self.closed += 1
            self.changed.notify_all()

    def wait_closed(self, n: int) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: self.closed >= n, timeout=10)


class Server:
    """A real HTTP server on 127.0.0.1 that answers ``/hived/api/...`` with ``answer(handler)``
    and records every request (method, path, headers, body, client port)."""

    def __init__(self, answer: Callable[[BaseHTTPRequestHandler], Any] | None = None,
                 tls: ssl.SSLContext | None = None):
        self.seen: list[dict] = []
        self.answer = answer or (lambda h: {"path": h.path})
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"      # keep-alive unless told otherwise

            def log_message(self, *args: Any) -> None:
                pass

            def _any(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(size) if size else b""
                owner.seen.append({"method": self.command, "path": self.path, "headers": dict(self.headers),
                                   "body": body, "port": self.client_address[1]})
                out = owner.answer(self)
                if out is None:                # the answer function wrote the response itself
                    return
                data = json.dumps(out).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _any

        self.httpd = _QuietServer(("127.0.0.1", 0), Handler)
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        scheme = "https" if tls is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    made: list[Server] = []

    def make(*args: Any, **kw: Any) -> Server:
        made.append(Server(*args, **kw))
        return made[-1]
    yield make
    for s in made:
        s.close()


@pytest.fixture(autouse=True)
def no_proxies(monkeypatch):
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy",
                "all_proxy", "HIVED_URL", "HIVED_TOKEN", "HIVED_USER", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        monkeypatch.delenv(var, raising=False)


def test_calls_share_one_kept_alive_connection_and_carry_token_and_user(server):
    srv = server()
    c = HivedClient(srv.url, "tok", user="alice")
    for _ in range(5):
        assert c.status() == {"path": "/hived/api/status"}
    c.submit({"vc": "a", "command": "true"})
    assert len({r["port"] for r in srv.seen}) == 1          # one TCP connection for six calls
    assert all(r["headers"]["Authorization"] == "token tok" and r["headers"]["X-Hived-User"] == "alice"
               for r in srv.seen)
    post = srv.seen[-1]
    assert post["method"] == "POST" and json.loads(post["body"]) == {"vc": "a", "command": "true"}
    assert post["headers"]["Content-Type"] == "application/json"


def test_query_and_path_segments_are_escaped(server):
    srv = server(lambda h: {"jobs": []})
    c = HivedClient(srv.url, "tok")
    assert c.jobs(vc="a b", state="running", user="x&y") == []
    c.job("j/1")
    assert srv.seen[0]["path"] == "/hived/api/jobs?vc=a+b&state=running&user=x%26y"
    assert srv.seen[1]["path"] == "/hived/api/jobs/j%2F1"


def _close_after_answer(h: BaseHTTPRequestHandler) -> None:
    """Answer, then drop the connection without saying so (as a restarted server or an idle timeout does)."""
    data = b'{"ok": true}'
    h.send_response(200)
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)
    h.wfile.flush()
    h.close_connection = True


def test_an_idle_connection_the_server_dropped_is_reopened_for_reads_and_writes(server):
    srv = server(_close_after_answer)
    c = HivedClient(srv.url, "tok")
    assert c.status() == {"ok": True}
    srv.httpd.wait_closed(1)
    assert c.status() == {"ok": True}
    srv.httpd.wait_closed(2)
    assert c.submit({"vc": "a"}) == {"ok": True}
    assert [r["method"] for r in srv.seen] == ["GET", "GET", "POST"]     # each sent once
    assert len({r["port"] for r in srv.seen}) == 3


def test_a_request_dropped_unanswered_on_a_kept_connection_is_sent_again_only_if_a_read(server):
    """The server closes a kept-alive connection as the next request arrives: a GET goes again on
    a new connection; a POST may have been acted on, so it is reported, never sent twice."""
    per_port: dict[int, int] = {}

    def answer(h: BaseHTTPRequestHandler) -> Any:
        port = h.client_address[1]
        per_port[port] = per_port.get(port, 0) + 1
        if per_port[port] > 1:
            h.close_connection = True      # read it, answer nothing, hang up
            return None
        return {"n": len(per_port)}
    srv = server(answer)
    c = HivedClient(srv.url, "tok")
    assert c.status() == {"n": 1}
    assert c.status() == {"n": 2}                      # dropped on the first connection, sent on a second
    with pytest.raises(HivedUnreachable, match="RemoteDisconnected"):
        c.submit({"vc": "a"})
    assert [r["method"] for r in srv.seen] == ["GET", "GET", "GET", "POST"]


def test_threads_each_get_their_own_connection(server):
    srv = server(lambda h: {"path": h.path})
    c = HivedClient(srv.url, "tok")
    wrong: list[str] = []

    def work(n: int) -> None:
        for k in range(20):
            got = c.job(f"j{n}-{k}")["path"]
            if got != f"/hived/api/jobs/j{n}-{k}":
                wrong.append(got)
    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == [] and len(srv.seen) == 160
    assert len({r["port"] for r in srv.seen}) == 8


def _redirect_to(target: str) -> Callable[[BaseHTTPRequestHandler], Any]:
    def answer(h: BaseHTTPRequestHandler) -> Any:
        if h.path.startswith("/hived/api/moved"):
            h.send_response(302)
            h.send_header("Location", target)
            h.send_header("Content-Length", "0")
            h.end_headers()
            return None
        return {"path": h.path, "method": h.command}
    return answer


def test_a_redirect_on_the_same_server_is_followed_with_the_token(server):
    srv = server(_redirect_to("/hived/api/status"))
    c = HivedClient(srv.url, "tok")
    # a 302 after a POST is fetched with GET, as browsers and requests do
    assert c._call("POST", "moved", body={"x": 1}) == {"path": "/hived/api/status", "method": "GET"}
    assert srv.seen[-1]["headers"]["Authorization"] == "token tok"


def test_a_redirect_elsewhere_is_not_followed_and_the_token_stays(server):
    elsewhere = server()
    srv = server(_redirect_to(elsewhere.url + "login"))
    c = HivedClient(srv.url, "tok")
    with pytest.raises(HivedError) as err:
        c._call("GET", "moved")
    assert err.value.status == 302 and f"sent on to {elsewhere.url}login" in err.value.line()
    assert "\n" not in str(err.value)
    assert elsewhere.seen == []


def test_non_json_and_error_pages_are_one_line(server):
    def answer(h: BaseHTTPRequestHandler) -> Any:
        data = b"<html><body>\n<h1>Bad   gateway</h1></body></html>"
        h.send_response(502 if h.path.endswith("summary") else 200)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)
        return None
    srv = server(answer)
    c = HivedClient(srv.url, "tok")
    with pytest.raises(HivedError) as err:
        c.summary()
    assert err.value.status == 502
    assert err.value.line() == "Bad Gateway: <html><body> <h1>Bad gateway</h1></body></html>"
    with pytest.raises(HivedError, match="answer is not JSON"):
        c.status()


def test_a_refusal_names_its_field(server):
    def answer(h: BaseHTTPRequestHandler) -> Any:
        data = json.dumps({"error": "must be between 1 and 8", "where": "body.gpus"}).encode()
        h.send_response(400)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)
        return None
    c = HivedClient(server(answer).url, "tok")
    with pytest.raises(HivedError) as err:
        c.submit({"gpus": 99})
    assert (err.value.status, err.value.line()) == (400, "gpus: must be between 1 and 8")


def test_a_number_json_cannot_carry_is_refused_before_sending(server):
    srv = server()
    c = HivedClient(srv.url, "tok")
    for bad, field in (({"vc": "a", "grace_period": math.nan}, "grace_period"),
                       ({"vc": "a", "env": {"X": "1"}, "estimate": math.inf}, "estimate"),
                       ({"labels": [1.0, -math.inf]}, "labels.1")):
        with pytest.raises(HivedError) as err:
            c.submit(bad)
        assert (err.value.status, err.value.line()) == (400, f"{field}: must be a finite number")
    assert srv.seen == []


def test_no_server_and_a_silent_server_are_unreachable(server):
    with pytest.raises(HivedUnreachable, match=r"no hived service at http://127.0.0.1:9/ \(ConnectionRefusedError\)"):
        HivedClient("http://127.0.0.1:9/", "tok").status()
    hold = threading.Event()
    srv = server(lambda h: hold.wait(5) and {})
    try:
        with pytest.raises(HivedUnreachable, match=r"did not answer in 0.3 s"):
            HivedClient(srv.url, "tok", timeout=0.3).status()
    finally:
        hold.set()


def test_a_plain_http_proxy_from_the_environment_is_used_unless_no_proxy(server, monkeypatch):
    proxy = server(lambda h: {"request_line": h.requestline})
    monkeypatch.setenv("http_proxy", proxy.url)
    c = HivedClient("http://hived.invalid:8890/", "tok")
    assert c.status() == {"request_line": "GET http://hived.invalid:8890/hived/api/status HTTP/1.1"}
    monkeypatch.setenv("no_proxy", "hived.invalid")
    with pytest.raises(HivedUnreachable):
        HivedClient("http://hived.invalid:8890/", "tok", timeout=5).status()


@pytest.fixture
def tls_files(tmp_path) -> tuple[Path, Path]:
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
    return tmp_path / "cert.pem", tmp_path / "key.pem"


def test_https_trusts_the_bundle_named_like_requests_does_and_nothing_else(server, tls_files, monkeypatch):
    cert, key = tls_files
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    srv = server(tls=ctx)
    assert srv.url.startswith("https://")
    with pytest.raises(HivedUnreachable, match=r"SSLCertVerificationError"):
        HivedClient(srv.url, "tok", timeout=5).status()
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cert))
    assert HivedClient(srv.url, "tok", timeout=5).status() == {"path": "/hived/api/status"}


def test_keep_alive_holds_in_a_process_with_many_open_files(server):
    """A kernel or server may hold over a thousand descriptors; the idle check must still see
    a live connection as live (select() cannot watch descriptors above 1023)."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"this system allows {hard} open files per process, fewer than the test needs")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held = []
    try:
        while not held or held[-1] < 1030:
            held.append(os.open(os.devnull, os.O_RDONLY))
        srv = server()
        c = HivedClient(srv.url, "tok")
        for _ in range(3):
            c.status()
        assert len({r["port"] for r in srv.seen}) == 1
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
