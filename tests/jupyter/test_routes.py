"""Every REST route, as users of different VCs, a VC admin, a cluster admin
and a stranger; refusals are 4xx with a JSON {error, where} and change nothing.

alice, anna: vca users; ada: vca admin; bob: vcb user; root: cluster admin;
eve: authenticated but in no VC.
"""
from __future__ import annotations

import json

import pytest

from .conftest import SPEC
from .helpers import assert_error, wait_state


async def submit(api, user, vc, command="echo hi", **extra):
    code, job = await api(user, "POST", "jobs", body={"vc": vc, "command": command, **extra})
    assert code == 201, job
    return job


async def job_ids(api):
    code, doc = await api("root", "GET", "jobs")
    assert code == 200
    return sorted(j["id"] for j in doc["jobs"])


# -- status, openapi, authentication ----------------------------------------

async def test_status_names_user_and_vcs(api, service):
    for user, admin, vcs in (("alice", False, ["vca"]), ("ada", False, ["vca"]), ("bob", False, ["vcb"]),
                             ("root", True, ["vca", "vcb"]), ("eve", False, [])):
        code, doc = await api(user, "GET", "status")
        assert code == 200
        assert doc["ok"] is True and doc["user"] == user and doc["admin"] is admin and doc["vcs"] == vcs


async def test_a_wrong_token_is_403_json_and_told_so(api, service):
    for path in (("status",), ("jobs",), ("cluster",), ("vcs", "vca")):
        code, doc = await api(None, "GET", *path)    # the fixture sends "Authorization: token nope"
        assert_error(code, doc, 403, says="token not accepted: it is unknown, revoked or expired")
    code, doc = await api(None, "POST", "jobs", body={"vc": "vca", "command": "true"})
    assert_error(code, doc, 403)
    assert await job_ids(api) == []


async def test_openapi_is_served(api, service):
    from hived.jupyter_ext.handlers.schema import openapi
    code, doc = await api("eve", "GET", "openapi.json")
    assert code == 200 and doc == openapi() and doc["openapi"].startswith("3.")


# -- cluster and VCs ---------------------------------------------------------

async def test_cluster_shows_holders_by_vc_and_hides_other_vcs_jobs(api, service):
    a = await submit(api, "alice", "vca", "sleep 30")
    b = await submit(api, "bob", "vcb", "sleep 30")
    await wait_state(api, "alice", a["id"], ("running",))
    await wait_state(api, "bob", b["id"], ("running",))

    def held(doc):
        return [g for n in doc["chains"]["T-NODE"]["nodes"].values() for g in n["gpus"] if g.get("vc")]

    code, doc = await api("root", "GET", "cluster")
    assert code == 200
    assert sorted((g["vc"], g["holder"], g["user"], g["job_class"]) for g in held(doc)) == [
        ("vca", a["id"], "alice", "te"), ("vcb", b["id"], "bob", "te")]
    assert len(doc["chains"]["T-NODE"]["nodes"]) == 2
    assert all(len(n["gpus"]) == 8 for n in doc["chains"]["T-NODE"]["nodes"].values())
    # alice sees bob's GPU coloured as vcb, but not whose job it is
    code, doc = await api("alice", "GET", "cluster")
    assert code == 200
    by_vc = {g["vc"]: g for g in held(doc)}
    assert by_vc["vca"]["holder"] == a["id"] and by_vc["vca"]["user"] == "alice"
    assert by_vc["vcb"]["holder"] is None and by_vc["vcb"]["user"] is None
    code, doc = await api("eve", "GET", "cluster")
    assert_error(code, doc, 403, where="cluster", says="'eve'")


async def test_vcs_lists_only_own_vcs(api, service):
    code, doc = await api("alice", "GET", "vcs")
    assert code == 200 and sorted(doc["vcs"]) == ["vca"]
    code, doc = await api("root", "GET", "vcs")
    assert code == 200 and sorted(doc["vcs"]) == ["vca", "vcb"]
    view = doc["vcs"]["vcb"]
    assert view["gpus_total"] == 8 and view["queue"] == [] and view["users"] == ["bob"]
    code, doc = await api("eve", "GET", "vcs")
    assert_error(code, doc, 403, where="vcs")


async def test_one_vc(api, service):
    code, doc = await api("ada", "GET", "vcs", "vca")
    assert code == 200 and doc["name"] == "vca" and doc["admins"] == ["ada"]
    levels = doc["view"]["levels"]
    assert {k: (v["total"], v["used"], v["free"]) for k, v in levels.items()} == {"T-NODE/2": (2, 0, 2)}
    code, doc = await api("alice", "GET", "vcs", "vcb")
    assert_error(code, doc, 403, where="vcs/vcb", says="not a member")
    code, doc = await api("root", "GET", "vcs", "vcb")
    assert code == 200 and doc["name"] == "vcb"
    code, doc = await api("alice", "GET", "vcs", "nope")
    assert_error(code, doc, 404, where="vcs/nope", says="no VC named 'nope'")


# -- submit ------------------------------------------------------------------

async def test_submit_by_member_queues_a_te_job(api, service):
    job = await submit(api, "alice", "vca", "sleep 0.5", name="first", gpus=2)
    assert job["user"] == "alice" and job["vc"] == "vca" and job["job_class"] == "te"
    assert job["name"] == "first" and job["state"] in ("queued", "placed", "running")
    running = await wait_state(api, "alice", job["id"], ("running",))
    assert len(running["placement"]["pods"][0]["gpus"]) == 2
    done = await wait_state(api, "alice", job["id"])
    assert done["state"] == "succeeded" and done["exit_code"] == 0


@pytest.mark.parametrize("user,vc,status,where", [
    ("bob", "vca", 403, "body.vc"),      # member of another VC
    ("eve", "vca", 403, "body.vc"),      # in no VC
    ("anna", "vcz", 404, "body.vc"),     # no such VC
])
async def test_submit_refused_by_membership(api, service, user, vc, status, where):
    code, doc = await api(user, "POST", "jobs", body={"vc": vc, "command": "true"})
    assert_error(code, doc, status, where=where)
    assert await job_ids(api) == []


BAD_BODIES = [
    ({"vc": "vca"}, "body", "'command' is a required property"),
    ({"vc": "vca", "command": "true", "colour": "red"}, "body", "unknown field(s) 'colour'"),
    ({"vc": "vca", "command": 42}, "body.command", "non-empty string"),
    ({"vc": "vca", "command": "true", "gpus": "two"}, "body.gpus", "type integer"),
    ({"vc": "vca", "command": "true", "gpus": 10 ** 30}, "body.gpus", "must be between 1 and 1024, got 1e+30"),
    ({"vc": "vca", "command": "true", "pods": 0}, "body.pods", "must be between 1 and 1024, got 0"),
    ({"vc": "vca", "command": "true", "gpus": 2, "cell_type": "T-NODE"}, "body", "either gpus or cell_type"),
    ({"vc": "vca", "command": "true", "job_class": "urgent"}, "body.job_class", "te, be, opportunistic"),
    ({"vc": "vca", "command": "true", "grace_period": -1}, "body.grace_period", "must be between 0 and 86400, got -1"),
    ({"vc": "vca", "command": "true", "env": {"A": 1}}, "body.env.A", "type string"),
    ({"vc": "vca", "command": [""]}, "command", "non-empty list"),                    # service's check
    ({"vc": "vca", "command": "true", "gpus": 9}, None, None),                        # never fits the VC
    ({"vc": "vca", "command": "true", "workdir": "/no/such/dir"}, "workdir",
     "is not a folder hived's own account can enter"),
    ({"vc": "vca", "command": "true", "env": {"CUDA_VISIBLE_DEVICES": "0"}}, "env.CUDA_VISIBLE_DEVICES", None),
    ({"vc": "vca", "command": "true", "k8s_template": ["image"]}, "body.k8s_template", "type object"),
    # reaches the service, whose local launcher has no use for Kubernetes template fields
    ({"vc": "vca", "command": "true", "k8s_template": {"image": "x"}}, "k8s_template", "Kubernetes only"),
    ([1, 2], "body", "type object"),
]


@pytest.mark.parametrize("body,where,says", BAD_BODIES)
async def test_bad_submit_body_is_400_and_changes_nothing(api, service, body, where, says):
    code, doc = await api("alice", "POST", "jobs", body=body)
    assert_error(code, doc, 400, where=where, says=says)
    assert await job_ids(api) == []


@pytest.mark.parametrize("raw,says", [
    ("{not json", "not valid JSON"),
    ('{"vc": "vca", "command": "true", "gpus": NaN}', "not valid JSON"),
    ("", "JSON object body is required"),
    ('"just a string"', "type object"),
    ("[" * 100_000 + "]" * 100_000, None),                       # nesting that breaks naive parsers
])
async def test_malformed_json_is_400(api, service, raw, says):
    code, doc = await api("alice", "POST", "jobs", raw=raw)
    assert_error(code, doc, 400, says=says)
    assert await job_ids(api) == []


async def test_huge_body_is_413(api, service):
    raw = json.dumps({"vc": "vca", "command": "x" * (2 << 20)})
    code, doc = await api("alice", "POST", "jobs", raw=raw)
    assert_error(code, doc, 413, where="body", says="the limit is")
    assert await job_ids(api) == []


# -- list and get ------------------------------------------------------------

async def test_list_jobs_filters_and_visibility(api, service):
    a = await submit(api, "alice", "vca")
    n = await submit(api, "anna", "vca")
    b = await submit(api, "bob", "vcb")
    for j in (a, n, b):
        await wait_state(api, "root", j["id"])

    async def listed(who, **params):
        code, doc = await api(who, "GET", "jobs", params=params)
        assert code == 200, doc
        return sorted(j["id"] for j in doc["jobs"])

    assert await listed("alice") == sorted([a["id"], n["id"]])
    assert await listed("bob") == [b["id"]]
    assert await listed("root") == sorted([a["id"], n["id"], b["id"]])
    assert await listed("root", vc="vcb") == [b["id"]]
    assert await listed("alice", user="anna") == [n["id"]]
    assert await listed("alice", state="succeeded") == sorted([a["id"], n["id"]])
    assert await listed("alice", state="queued") == []
    # another team's VC answers exactly as one that does not exist (no oracle of VC names)
    code, doc = await api("alice", "GET", "jobs", params={"vc": "vcb"})
    assert_error(code, doc, 404, where="query.vc")
    assert doc["error"] == "no VC named 'vcb'"
    code, doc = await api("alice", "GET", "jobs", params={"vc": "nope"})
    assert_error(code, doc, 404, where="query.vc")
    assert doc["error"] == "no VC named 'nope'"
    code, doc = await api("eve", "GET", "jobs")             # in no VC: status and openapi.json only
    assert_error(code, doc, 403, where="jobs")
    code, doc = await api("alice", "GET", "jobs", params={"state": "sleeping"})
    assert_error(code, doc, 400, where="query.state", says="queued")


async def test_get_job_visibility(api, service):
    a = await submit(api, "alice", "vca")
    for user in ("alice", "anna", "ada", "root"):
        code, doc = await api(user, "GET", "jobs", a["id"])
        assert code == 200 and doc["id"] == a["id"], (user, doc)
    for user in ("bob", "eve"):   # answered as if it did not exist (test_outsiders.py)
        code, doc = await api(user, "GET", "jobs", a["id"])
        assert_error(code, doc, 404, where=f"jobs/{a['id']}", says=f"unknown job {a['id']!r}")
    code, doc = await api("alice", "GET", "jobs", "j999")
    assert_error(code, doc, 404, says="unknown job 'j999'")
    code, doc = await api("alice", "GET", "jobs", "x" * 5000)
    assert code in (400, 404, 414) and code < 500


# -- cancel ------------------------------------------------------------------

async def test_cancel_permissions(api, service):
    mine = await submit(api, "alice", "vca", "sleep 30")
    theirs = await submit(api, "alice", "vca", "sleep 30")
    await wait_state(api, "alice", mine["id"], ("running",))
    for user, status in (("anna", 403), ("bob", 404), ("eve", 404)):  # same VC, not owner/admin; other VC; no VC
        code, doc = await api(user, "POST", "jobs", mine["id"], "cancel")
        assert_error(code, doc, status, where=f"jobs/{mine['id']}")
    code, doc = await api("root", "GET", "jobs", mine["id"])
    assert doc["state"] == "running"
    code, doc = await api("alice", "POST", "jobs", mine["id"], "cancel")
    assert code == 200 and doc["state"] in ("cancelled", "preempting"), doc
    code, doc = await api("ada", "POST", "jobs", theirs["id"], "cancel")   # VC admin
    assert code == 200, doc
    for j in (mine, theirs):
        assert (await wait_state(api, "alice", j["id"]))["state"] == "cancelled"
    code, doc = await api("alice", "POST", "jobs", mine["id"], "cancel")
    assert_error(code, doc, 409, says="already cancelled")
    code, doc = await api("root", "POST", "jobs", "j999", "cancel")
    assert_error(code, doc, 404)


async def test_cluster_admin_cancels_anything_and_bad_cancel_body(api, service):
    b = await submit(api, "bob", "vcb", "sleep 30")
    code, doc = await api("bob", "POST", "jobs", b["id"], "cancel", body={"why": "x"})
    assert_error(code, doc, 400, says="unknown field(s) 'why'")
    assert (await api("bob", "GET", "jobs", b["id"]))[1]["state"] != "cancelled"
    code, doc = await api("root", "POST", "jobs", b["id"], "cancel", body={"reason": "maintenance"})
    assert code == 200, doc
    assert (await wait_state(api, "bob", b["id"]))["state"] == "cancelled"


# -- logs --------------------------------------------------------------------

async def test_logs_read_and_follow(api, service):
    j = await submit(api, "alice", "vca", "echo one; sleep 0.5; echo two")
    code, doc = await api("alice", "GET", "jobs", j["id"], "logs", params={"follow": 1})
    assert code == 200 and set(doc) == {"text", "offset", "done"}
    text, offset = doc["text"], doc["offset"]
    while "two" not in text:
        code, doc = await api("anna", "GET", "jobs", j["id"], "logs", params={"follow": 1, "offset": offset})
        assert code == 200, doc
        text, offset = text + doc["text"], doc["offset"]
    assert text.index("one") < text.index("two")
    await wait_state(api, "alice", j["id"])
    while True:  # the rest of the text, then done
        code, doc = await api("alice", "GET", "jobs", j["id"], "logs", params={"offset": offset, "follow": 1})
        assert code == 200
        if doc["done"]:
            break
        text, offset = text + doc["text"], doc["offset"]
    assert doc == {"text": "", "offset": offset, "done": True}
    code, doc = await api("alice", "GET", "jobs", j["id"], "logs")
    assert doc["text"] == text and doc["offset"] == offset


async def test_logs_refusals(api, service):
    j = await submit(api, "alice", "vca")
    code, doc = await api("bob", "GET", "jobs", j["id"], "logs")
    assert_error(code, doc, 404, says="unknown job")   # not his to see: as if it did not exist
    for params, where in (({"rank": 1}, "query.rank"), ({"rank": -1}, "query.rank"),
                          ({"offset": "x"}, "query.offset"), ({"follow": 2}, "query.follow"),
                          ({"offset": 10 ** 20}, "query.offset")):
        code, doc = await api("alice", "GET", "jobs", j["id"], "logs", params=params)
        assert_error(code, doc, 400, where=where)
    code, doc = await api("alice", "GET", "jobs", "j999", "logs")
    assert_error(code, doc, 404)


# -- exchange ----------------------------------------------------------------

async def test_exchange_views_and_permissions(api, service):
    for what in ("board", "ledger", "offers", "requests"):
        code, doc = await api("ada" if what == "ledger" else "alice", "GET", "exchange", what)
        assert code == 200 and isinstance(doc, dict), doc
        code, doc = await api("eve", "GET", "exchange", what)
        assert_error(code, doc, 403)
    code, doc = await api("alice", "GET", "exchange", "ledger")       # the ledger is for admins
    assert_error(code, doc, 403, says="VC admins only")
    offer = {"vc": "vca", "cell_type": "T-SOCKET", "count": 1, "duration": 3600}
    code, doc = await api("alice", "POST", "exchange", "offers", body=offer)   # a user, not a VC admin
    assert_error(code, doc, 403, where="body.vc", says="VC admins only")
    code, doc = await api("bob", "POST", "exchange", "offers", body=offer)     # another VC's cells
    assert_error(code, doc, 403, where="body.vc")
    code, doc = await api("ada", "POST", "exchange", "offers", body={**offer, "count": 0})
    assert_error(code, doc, 400, where="body.count")
    code, doc = await api("ada", "POST", "exchange", "offers", body={**offer, "vc": "nope"})
    assert_error(code, doc, 404, where="body.vc")
    code, doc = await api("ada", "POST", "exchange", "board", body=offer)
    assert_error(code, doc, 404, says="only offers and requests")
    code, doc = await api("ada", "GET", "exchange", "nonsense")
    assert_error(code, doc, 404, says="no route")


async def test_unknown_route_is_json_404(api, service):
    for path in (("nope",), ("jobs", "j1", "kill"), ("vcs", "vca", "x", "y")):
        code, doc = await api("alice", "GET", *path)
        assert_error(code, doc, 404, says="no route")
        code, doc = await api("alice", "POST", *path, body={})
        assert_error(code, doc, 404, says="no route")


# -- spec reload -------------------------------------------------------------

async def test_spec_reload_admin_only(api, service):
    for user in ("alice", "ada", "bob", "eve"):
        code, doc = await api(user, "POST", "spec", "reload", body={})
        assert_error(code, doc, 403, where="spec/reload", says="cluster admins only")
    code, doc = await api("root", "POST", "spec", "reload", body={})
    assert code == 200 and doc["ok"] is True and doc["vcs"] == ["vca", "vcb"], doc


async def test_spec_reload_changes_membership(api, service):
    j = await submit(api, "alice", "vca")
    text = SPEC.read_text().replace("users: [bob]", "users: [bob, eve]")
    code, doc = await api("root", "POST", "spec", "reload", body={"spec": text})
    assert code == 200, doc
    code, doc = await api("eve", "GET", "status")
    assert doc["vcs"] == ["vcb"]
    code, doc = await api("eve", "POST", "jobs", body={"vc": "vcb", "command": "true"})
    assert code == 201, doc
    code, doc = await api("root", "GET", "jobs", j["id"])   # jobs survive a reload
    assert code == 200


@pytest.mark.parametrize("body,where", [
    ({"spec": "virtualClusters: {}\n"}, None),                 # not a cluster
    ({"spec": ": : :"}, None),                                 # not YAML
    ({"path": "/no/such/spec.yaml"}, None),
    ({"spec": "a", "path": "b"}, "body"),                      # one or the other
    ({"colour": "red"}, "body"),
])
async def test_bad_spec_reload_is_400_and_changes_nothing(api, service, body, where):
    j = await submit(api, "alice", "vca", "sleep 30")
    code, doc = await api("root", "POST", "spec", "reload", body=body)
    assert_error(code, doc, 400, where=where)
    code, doc = await api("alice", "GET", "status")
    assert doc["vcs"] == ["vca"]
    code, doc = await api("root", "GET", "jobs", j["id"])
    assert code == 200 and doc["state"] != "failed"


async def test_no_token_at_all_is_asked_for_one(jp_fetch, service):
    from tornado.httpclient import HTTPClientError
    with pytest.raises(HTTPClientError) as exc:
        await jp_fetch("hived", "api", "jobs", method="GET", headers={"Authorization": ""})
    doc = json.loads(exc.value.response.body)
    assert exc.value.code == 403 and doc["error"].startswith("not authenticated: give a token"), doc
