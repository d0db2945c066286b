"""Through the REST API: while the journal cannot commit, a submission answers 503 with
the reason (not a bare 500) and changes nothing; once commits succeed it is accepted.
The gc route: admins only, trial policies, policies set and applied."""
import json
from pathlib import Path

import pytest
from service_helpers import FailingCommits
from tornado.httpclient import HTTPClientError

SPEC = Path(__file__).with_name("spec_small.yaml")


@pytest.fixture
def jp_server_config(tmp_path):
    return {
        "ServerApp": {"jpserver_extensions": {"hived.jupyter_ext": True},
                      "identity_provider_class": "hived.jupyter_ext.auth.HivedIdentityProvider"},
        "HivedIdentityProvider": {"user_tokens": {"tok-alice": "alice", "tok-ada": "ada"}},
        "HivedExtension": {"spec_path": str(SPEC), "data_dir": str(tmp_path / "data"), "tick_seconds": 0.05},
    }


async def post_job(jp_fetch):
    try:
        r = await jp_fetch("hived", "api", "jobs", method="POST",
                           body=json.dumps({"vc": "vca", "command": "true", "gpus": 1}),
                           headers={"Authorization": "token tok-alice", "Content-Type": "application/json"})
    except HTTPClientError as exc:
        r = exc.response
    return r.code, json.loads(r.body.decode())


async def test_submit_answers_503_with_the_reason_while_degraded(jp_fetch, jp_serverapp):
    svc = jp_serverapp.web_app.settings["hived"].service
    disk = FailingCommits(svc.store).fail()
    code, doc = await post_job(jp_fetch)
    assert code == 503, doc
    assert "the journal cannot be written" in doc["error"] and "disk is full" in doc["error"]
    assert svc.list_jobs() == [] and svc.readiness()[0] is False
    disk.heal()
    code, doc = await post_job(jp_fetch)
    assert code in (200, 201) and doc["state"] == "queued"
    assert svc.readiness() == (True, "")


async def call(jp_fetch, user, method, body=None):
    kw = {"method": method, "headers": {"Authorization": f"token tok-{user}"}}
    if method == "POST":
        kw["body"] = json.dumps(body or {})
        kw["headers"]["Content-Type"] = "application/json"
    try:
        r = await jp_fetch("hived", "api", "gc", **kw)
    except HTTPClientError as exc:
        r = exc.response
    return r.code, json.loads(r.body.decode())


async def test_gc_route_is_for_admins_and_removes_finished_jobs(jp_fetch, jp_serverapp):
    import asyncio
    svc = jp_serverapp.web_app.settings["hived"].service
    ids = [svc.submit("alice", {"vc": "vca", "command": "true", "gpus": 1})["id"] for _ in range(3)]
    for _ in range(300):
        if all(svc.get_job(j)["state"] == "succeeded" for j in ids):
            break
        await asyncio.sleep(0.05)
    code, doc = await call(jp_fetch, "alice", "POST", {"vc": "vca", "policy": {"keep": 1}})
    assert code == 403 and "VC admins only" in doc["error"]
    code, doc = await call(jp_fetch, "ada", "POST", {"vc": "vca", "dry_run": True, "policy": {"keep": 0}})
    assert code == 200 and doc["removed"] == ids and doc["dry_run"]
    code, doc = await call(jp_fetch, "ada", "GET")
    assert code == 200 and doc["policies"]["vca"] is None          # a trial sets nothing
    # the three run at once and end in any order: keep 1 keeps the one that ended last
    newest = max(ids, key=lambda j: (svc.get_job(j)["ended"], int(j[1:])))
    code, doc = await call(jp_fetch, "ada", "POST", {"vc": "vca", "policy": {"keep": 1}})
    assert code == 200 and doc["removed"] == [j for j in ids if j != newest]
    assert doc["policy"] == {"max_age": None, "keep": 1}
    assert [j["id"] for j in svc.list_jobs()] == [newest]
    code, doc = await call(jp_fetch, "ada", "POST", {"vc": "vca", "policy": {"keep": -1}})
    assert code == 400 and doc["where"] == "body.policy.keep"
    code, doc = await call(jp_fetch, "ada", "POST", {"policy": {"keep": 1}})
    assert code == 400 and doc["where"] == "body.vc"


async def test_gc_route_sets_and_shows_disk_quotas(jp_fetch, jp_serverapp):
    code, doc = await call(jp_fetch, "alice", "POST", {"vc": "vca", "disk_quota": 1 << 20})
    assert code == 403
    code, doc = await call(jp_fetch, "ada", "POST", {"vc": "vca", "disk_quota": 1 << 20})
    assert code == 200 and doc["quota"] == {"vc": "vca", "max_bytes": 1 << 20, "used_bytes": 0}
    code, doc = await call(jp_fetch, "alice", "GET")
    assert code == 200 and doc["quotas"]["vca"]["max_bytes"] == 1 << 20 and "vcb" not in doc["quotas"]   # not hers
    code, doc = await call(jp_fetch, "ada", "POST", {"vc": "vca", "disk_quota": 5, "clear_disk_quota": True})
    assert code == 400 and doc["where"] == "body.clear_disk_quota"
    code, doc = await call(jp_fetch, "ada", "POST", {"vc": "vca", "clear_disk_quota": True})
    assert code == 200 and doc["quota"]["max_bytes"] is None
