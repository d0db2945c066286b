"""A member floods ``hived serve`` with submissions over their rate (issue 23): each refusal must be
cheap for the server whose event loop the other teams share, and must stay exactly as strict.

- a request over the rate answers 429 with ``Retry-After`` and the one-line reason, sets no cookie,
  and is not logged line by line (one line per user and interval);
- a token-authenticated request gets no login cookie (an API client sends its token every time);
- the token lookup follows the tokens in force: a revoked, replaced or reassigned token is refused
  or renamed from the next request on, over-rate or not, exactly as a token never known.
"""
from __future__ import annotations

import json
import socket

import pytest
import requests

from hived.jupyter_ext.refusal_log import RefusalLog

from .conftest import SPEC, TOKENS, LiveServer

RATE_KEY = "admission.submitsPerSecondPerUser"
UNKNOWN = "token not accepted: it is unknown, revoked or expired"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("flood")
    spec = tmp / "spec.yaml"   # bob: one submission per 1,000 s, so every one after his first is refused
    spec.write_text(SPEC.read_text().replace("    users: [bob]\n",
                                             "    users: [bob]\n    admission: {submitsPerSecondPerUser: 0.001}\n"))
    srv = LiveServer(tmp, launcher="hived.testing.launcher_noop.NoopLauncher", spec=spec)
    yield srv
    srv.stop()


def post_job(server, token, env_bytes=0):
    body = {"vc": "vcb", "command": "true", **({"env": {"X": "a" * env_bytes}} if env_bytes else {})}
    return requests.post(server.api + "jobs", json=body, headers={"Authorization": f"token {token}"}, timeout=30)


def over_rate(server, token="tok-bob"):
    """Bob has used his one submission (this test's or an earlier one's): the next is refused."""
    r = post_job(server, token)
    assert r.status_code in (201, 429), r.text


def headers_only(server, token, length):
    """POST jobs announcing a ``length``-byte body, and send none of it: the status and headers."""
    host, port = server.url.split("//")[1].rstrip("/").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(f"POST /hived/api/jobs HTTP/1.1\r\nHost: {host}\r\nAuthorization: token {token}\r\n"
                  f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n".encode())
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(4096)
            assert chunk, data
            data += chunk
    head = data.split(b"\r\n\r\n")[0].decode().split("\r\n")
    return int(head[0].split()[1]), {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in head[1:])}


def log_lines(server, *words):
    server.log.flush()
    return [line for line in (server.data_dir / "serve.log").read_text().splitlines() if all(w in line for w in words)]


def test_an_over_rate_flood_is_refused_with_retry_after_no_cookie_and_a_few_log_lines(server):
    over_rate(server)
    before, start = len(log_lines(server, "'bob'")), len(log_lines(server))
    for _ in range(30):
        r = post_job(server, "tok-bob", env_bytes=1000)
        assert r.status_code == 429, r.text
        assert int(r.headers["Retry-After"]) >= 1
        assert "Set-Cookie" not in r.headers
        doc = r.json()
        assert doc["where"] == "vc" and f"({RATE_KEY})" in doc["error"] and "\n" not in doc["error"], doc
        assert doc["error"].startswith("user 'bob' submits more than 0.001 jobs per second"), doc
    for _ in range(10):   # a large body: answered from its headers alone, the body never sent
        status, headers = headers_only(server, "tok-bob", 900_000)
        assert status == 429 and int(headers["retry-after"]) >= 1 and "set-cookie" not in headers
    # one line for a user's first refusal, then one per 10 s while they go on; never one per request.
    # An earlier test of this module may have opened bob's interval: this flood then adds no line.
    new = log_lines(server, "'bob'")[before:]
    assert len(new) < 10, new
    assert any("submits more than 0.001 jobs per second" in line for line in log_lines(server, "'bob'"))
    since = log_lines(server)[start:]           # other tests of the module log their own requests
    assert not [ln for ln in since if "429 POST /hived/api/jobs (bob@" in ln]   # jupyter-server's line per request
    assert not [ln for ln in since if "Malformed HTTP message" in ln]
    # nothing of them was stored; another team submits as before
    jobs = requests.get(server.api + "jobs", params={"vc": "vcb"}, headers={"Authorization": "token tok-root"},
                        timeout=30).json()["jobs"]
    assert len(jobs) == 1, jobs
    ok = requests.post(server.api + "jobs", json={"vc": "vca", "command": "true"},
                       headers={"Authorization": "token tok-alice"}, timeout=30)
    assert ok.status_code == 201, ok.text


def test_token_requests_get_no_login_cookie(server):
    r = requests.get(server.api + "status", headers={"Authorization": "token tok-alice"}, timeout=30)
    assert r.status_code == 200 and r.json()["user"] == "alice"
    assert "Set-Cookie" not in r.headers
    r = post_job(server, "tok-alice")
    assert r.status_code == 403 and "Set-Cookie" not in r.headers   # alice is not in vcb: refused, no cookie


@pytest.mark.parametrize("token", ["TOK-BOB", "tok-bo", "tok-bobb", "tok-bob\t2", ""])
def test_a_wrong_token_is_refused_as_before_even_for_a_user_over_rate(server, token):
    over_rate(server)
    never = post_job(server, "tok-never-known")
    assert never.status_code == 403
    r = post_job(server, token)
    assert (r.status_code, r.json()) == (403, never.json())
    r = requests.get(server.api + "status", headers={"Authorization": f"token {token}"}, timeout=30)
    assert r.status_code == 403 and r.json()["where"] == "Authorization", r.text
    assert r.json()["error"].startswith(UNKNOWN), r.text
    assert headers_only(server, token, 100_000)[0] == 403


def test_a_revoked_token_is_refused_at_once_though_its_user_is_over_rate(server):
    tokens_file = server.data_dir / "tokens.json"
    tokens_file.write_text(json.dumps({**TOKENS, "tok-bob-2": "bob"}))
    assert requests.post(server.api + "tokens/reload", json={}, headers={"Authorization": "token tok-root"},
                         timeout=30).status_code == 200
    try:
        over_rate(server, "tok-bob-2")
        assert post_job(server, "tok-bob-2").status_code == 429     # the new token is bob's, over his rate
        tokens_file.write_text(json.dumps(TOKENS))
        assert requests.post(server.api + "tokens/reload", json={}, headers={"Authorization": "token tok-root"},
                             timeout=30).status_code == 200
        for _ in range(3):
            r = post_job(server, "tok-bob-2")
            assert r.status_code == 403 and r.json()["error"].startswith(UNKNOWN), r.text
        assert headers_only(server, "tok-bob-2", 100_000)[0] == 403
        assert post_job(server, "tok-bob").status_code == 429       # bob's other token: still bob
    finally:
        tokens_file.write_text(json.dumps(TOKENS))


# -- the token lookup, in process ----------------------------------------------------------------

async def api_call(jp_fetch, token):
    from tornado.httpclient import HTTPClientError
    try:
        r = await jp_fetch("hived", "api", "status", headers={"Authorization": f"token {token}"})
    except HTTPClientError as exc:
        r = exc.response
    return r.code, json.loads(r.body)


async def test_the_token_lookup_follows_every_change_of_the_tokens(jp_fetch, jp_serverapp):
    provider = jp_serverapp.identity_provider
    code, doc = await api_call(jp_fetch, "tok-bob")
    assert (code, doc["user"]) == (200, "bob")
    refused = await api_call(jp_fetch, "tok-never-known")
    assert refused[0] == 403 and refused[1]["error"].startswith(UNKNOWN)
    # removed (assigned anew, as a reload does): refused exactly like a token never known
    provider.user_tokens = {t: u for t, u in TOKENS.items() if t != "tok-bob"}
    assert await api_call(jp_fetch, "tok-bob") == refused
    # given to someone else
    provider.user_tokens = {**TOKENS, "tok-bob": "eve"}
    code, doc = await api_call(jp_fetch, "tok-bob")
    assert (code, doc["user"]) == (200, "eve")
    # changed in place rather than assigned: still followed
    provider.user_tokens["tok-bob"] = "anna"
    assert (await api_call(jp_fetch, "tok-bob"))[1]["user"] == "anna"
    del provider.user_tokens["tok-bob"]
    assert await api_call(jp_fetch, "tok-bob") == refused
    # the server's own token, replaced
    old = provider.token
    assert (await api_call(jp_fetch, old))[0] == 200
    provider.token = "tok-server-new"
    assert await api_call(jp_fetch, old) == refused
    assert (await api_call(jp_fetch, "tok-server-new"))[0] == 200


# -- the refusal log, alone ----------------------------------------------------------------------

class Lines:
    def __init__(self):
        self.lines: list[str] = []

    def warning(self, fmt, *args):
        self.lines.append(fmt % args)


def test_the_refusal_log_writes_one_line_per_user_and_interval_and_loses_no_count():
    log, due = Lines(), []
    refusals = RefusalLog(log, lambda delay, fn, *args: due.append((delay, fn, args)), interval=10)
    for i in range(500):
        refusals.note("alice", "POST /hived/api/jobs", f"reason {i}")
    refusals.note("bob", "POST /hived/api/jobs", "bob's reason")
    assert len(log.lines) == 2 and "reason 0" in log.lines[0] and "bob's reason" in log.lines[1]
    assert [d[0] for d in due] == [10, 10]
    for _, fn, args in due[:2]:                          # the intervals end
        fn(*args)
    assert len(log.lines) == 3
    assert "499 more request(s) of user 'alice' refused (429)" in log.lines[2] and "reason 499" in log.lines[2]
    assert len(due) == 3                                 # alice's refusals went on: a new interval
    refusals.note("alice", "POST /hived/api/jobs", "reason 500")
    refusals.flush()                                     # the server stops
    assert "1 more request(s) of user 'alice'" in log.lines[3] and len(log.lines) == 4
    due[2][1](*due[2][2])                                # an interval ending after the flush writes nothing
    assert len(log.lines) == 4
    refusals.note("alice", "POST /hived/api/jobs", "again")
    assert len(log.lines) == 5 and "again" in log.lines[4]   # a quiet user's next refusal: at once


def test_the_refusal_log_is_quiet_after_a_quiet_interval():
    log, due = Lines(), []
    refusals = RefusalLog(log, lambda delay, fn, *args: due.append((fn, args)), interval=10)
    refusals.note("alice", "POST /hived/api/jobs", "only one")
    fn, args = due.pop()
    fn(*args)
    assert len(log.lines) == 1 and not due
