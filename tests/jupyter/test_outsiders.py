"""No oracle for outsiders, against a real ``hived serve``: a user in no VC gets ``status`` and
``openapi.json`` only; a member of another team sees only its own VCs' retention, quotas and
jobs; refusals name no other team's admins or members and list no VC the caller cannot see;
and a job the caller may not see answers exactly like a job that does not exist.

Roles (spec_jupyter.yaml): alice and anna in vca (ada its admin), bob in vcb, root a cluster
admin, eve in no VC."""
from __future__ import annotations

import json

import pytest
import requests

from .conftest import LiveServer

FOREIGN = ("vca", "alice", "anna", "ada", "root")   # what bob and eve must never be told


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = LiveServer(tmp_path_factory.mktemp("outsiders"), launcher="hived.testing.launcher_noop.NoopLauncher")
    yield srv
    srv.stop()


def call(server, user, method, path, body=None):
    r = requests.request(method, server.api + path, json=body, timeout=30,
                         headers={"Authorization": f"token tok-{user}"})
    return r.status_code, r.text, (r.json() if r.text else None)


def assert_tells_nothing(text, *names, asked=None):
    """None of ``names`` is in ``text``, but for those the caller named in its own request."""
    for name in names:
        assert name not in text or name in json.dumps(asked), (name, text)


def test_a_user_in_no_vc_reaches_status_and_openapi_only(server):
    assert call(server, "eve", "GET", "status")[0] == 200
    assert call(server, "eve", "GET", "openapi.json")[0] == 200
    for method, path, body in (("GET", "summary", None), ("GET", "gc", None), ("GET", "cluster", None),
                               ("GET", "vcs", None), ("GET", "exchange/board", None),
                               ("POST", "gc", {}), ("POST", "gc", {"vc": "vca", "dry_run": True}),
                               ("POST", "jobs", {"vc": "nope", "command": "true"}),
                               ("POST", "jobs", {"vc": "vca", "command": "true"})):
        code, text, doc = call(server, "eve", method, path, body)
        assert code in (403, 404), (path, text)
        assert_tells_nothing(doc["error"], *FOREIGN, "vcb", "bob", asked=body)


def test_another_team_sees_only_its_own_retention_and_quota(server):
    assert call(server, "ada", "POST", "gc", {"vc": "vca", "policy": {"keep": 5}})[0] == 200
    code, text, doc = call(server, "bob", "GET", "gc")
    assert code == 200, text
    assert set(doc["policies"]) == {"vcb"} and set(doc["quotas"]) == {"vcb"}, doc
    code, _, doc = call(server, "ada", "GET", "gc")
    assert set(doc["policies"]) == {"vca"} and doc["policies"]["vca"]["keep"] == 5
    code, _, doc = call(server, "root", "GET", "gc")
    assert set(doc["policies"]) == {"vca", "vcb"}


def test_refusals_name_no_other_team(server):
    for method, path, body, status in (
            ("POST", "gc", {"vc": "vca", "dry_run": True}, 403),
            ("POST", "gc", {"vc": "vca", "disk_quota": 1}, 403),
            ("POST", "gc", {"vc": "nope", "dry_run": True}, 404),
            ("POST", "jobs", {"vc": "nope", "command": "true"}, 404),
            ("POST", "jobs", {"vc": "vca", "command": "true"}, 403),
            ("POST", "exchange/requests", {"vc": "vca", "cell_type": "T-SOCKET", "count": 1,
                                           "duration": 60}, 403)):
        code, text, doc = call(server, "bob", method, path, body)
        assert code == status, (path, body, text)
        assert_tells_nothing(doc["error"], *FOREIGN, asked=body)
    # a member is told whom to ask about their own VC
    code, _, doc = call(server, "alice", "POST", "gc", {"vc": "vca", "dry_run": True})
    assert code == 403 and "ada" in doc["error"], doc


def test_a_hidden_job_answers_like_a_missing_one(server):
    code, text, job = call(server, "alice", "POST", "jobs", {"vc": "vca", "command": "sleep 30", "name": "p"})
    assert code == 201, text
    jid, missing = job["id"], "j987654"
    for user in ("bob", "eve"):
        for method, suffix in (("GET", ""), ("GET", "/logs"), ("POST", "/cancel")):
            seen = call(server, user, method, f"jobs/{jid}{suffix}")
            none = call(server, user, method, f"jobs/{missing}{suffix}")
            assert seen[0] == none[0] == 404, (seen, none)
            assert seen[1].replace(jid, "ID") == none[1].replace(missing, "ID"), (seen, none)
    code, _, doc = call(server, "bob", "GET", "jobs?user=alice")
    assert code == 200 and doc["jobs"] == []
    assert call(server, "anna", "GET", f"jobs/{jid}")[0] == 200          # her VC's job: she sees it
    assert call(server, "anna", "POST", f"jobs/{jid}/cancel")[0] == 403   # ... and may not cancel it
