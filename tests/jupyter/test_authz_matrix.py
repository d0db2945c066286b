"""Who may do what, over every route that changes something: one table, and
the REST API and the service behind it answer it alike (both ask
``hived.service.access.Access``).

Roles: a member of vca (alice), a member of the other team (bob), vca's admin
(ada), a cluster admin (root), a user in no VC (eve), and the account running
the server (its own token)."""
from __future__ import annotations

import asyncio
import json

import pytest
from tornado.httpclient import HTTPClientError

from hived.service.access import SERVER_ACCOUNT
from hived.service.scheduler import NotAuthorized

from .conftest import SPEC, TOKENS
from .helpers import wait_state

ROLES = ("alice", "bob", "ada", "root", "eve", "server")
# route -> the roles it lets through
ALLOWED = {
    "spec/reload": {"root", "server"},
    "tokens/reload": {"root", "server"},
    "jobs (submit to vca)": {"alice", "ada", "root", "server"},
    "jobs/{id}/cancel (alice's job)": {"alice", "ada", "root", "server"},
    "gc (vca)": {"ada", "root", "server"},
    "exchange/requests (vca)": {"ada", "root", "server"},
}
SERVER_USER = "hived-server"      # the server account's name, in no VC and not among the spec's admins


@pytest.fixture
def jp_server_config(hived_data):
    return {
        "ServerApp": {
            "jpserver_extensions": {"hived.jupyter_ext": True},
            "identity_provider_class": "hived.jupyter_ext.auth.HivedIdentityProvider",
        },
        "HivedIdentityProvider": {"user_tokens": TOKENS, "token_user": SERVER_USER},
        "HivedExtension": {"spec_path": str(SPEC), "data_dir": str(hived_data), "tick_seconds": 0.05},
    }


@pytest.fixture
def call(jp_fetch, jp_serverapp):
    async def go(role, method, *path, body=None):
        token = jp_serverapp.identity_provider.token if role == "server" else f"tok-{role}"
        kw: dict = {"method": method, "headers": {"Authorization": f"token {token}"}}
        if method == "POST":
            kw["body"] = json.dumps(body or {})
        try:
            r = await jp_fetch("hived", "api", *path, **kw)
        except HTTPClientError as exc:
            r = exc.response
        return r.code, json.loads(r.body) if r.body else None
    return go


def _groups(role):
    return (SERVER_ACCOUNT,) if role == "server" else ()


def _user(role):
    return SERVER_USER if role == "server" else role


async def test_every_mutating_route_answers_the_same_table(call, service):
    async def alice_job():
        code, job = await call("alice", "POST", "jobs", body={"vc": "vca", "command": "sleep 30"})
        assert code == 201, job
        return job["id"]

    async def route(name, role):
        if name == "spec/reload":
            return await call(role, "POST", "spec", "reload", body={})
        if name == "tokens/reload":
            return await call(role, "POST", "tokens", "reload")
        if name == "jobs (submit to vca)":
            return await call(role, "POST", "jobs", body={"vc": "vca", "command": "true"})
        if name == "jobs/{id}/cancel (alice's job)":
            return await call(role, "POST", "jobs", await alice_job(), "cancel")
        if name == "gc (vca)":
            return await call(role, "POST", "gc", body={"vc": "vca", "dry_run": True})
        return await call(role, "POST", "exchange", "requests",
                          body={"vc": "vca", "cell_type": "T-SOCKET", "count": 1, "duration": 3600})

    seen = {}
    for name in ALLOWED:
        for role in ROLES:
            code, doc = await route(name, role)
            assert code != 403 or "may not" in doc["error"], (name, role, doc)
            # tokens/reload lets through to 404: this server has no tokens file; a job the
            # caller may not see is refused as one that does not exist
            hidden = code == 404 and "unknown job" in doc["error"]
            seen[name, role] = code != 403 and not hidden
    table = {name: {role for role in ROLES if seen[name, role]} for name in ALLOWED}
    assert table == ALLOWED


def _service_allows(service, name, role, job_id):
    user, groups = _user(role), _groups(role)
    try:
        if name == "jobs (submit to vca)":
            service.submit(user, {"vc": "vca", "command": "true"}, groups)
        elif name == "jobs/{id}/cancel (alice's job)":
            service.cancel(job_id, user, groups)
        elif name == "gc (vca)":
            service.gc(user, "vca", True, None, groups)
        else:
            service.exchange.post_request(user, {"vc": "vca", "cell_type": "T-SOCKET", "count": 1,
                                                 "duration": 3600}, groups)
    except NotAuthorized:
        return False
    return True


async def test_the_service_answers_as_the_rest_api(call, service):
    for name in ("jobs (submit to vca)", "jobs/{id}/cancel (alice's job)", "gc (vca)", "exchange/requests (vca)"):
        allowed = set()
        for role in ROLES:
            code, job = await call("alice", "POST", "jobs", body={"vc": "vca", "command": "sleep 30"})
            assert code == 201, job
            if await asyncio.to_thread(_service_allows, service, name, role, job["id"]):
                allowed.add(role)
        assert allowed == ALLOWED[name], name


async def test_a_vc_that_names_nobody_has_only_its_admins(call, service):
    text = SPEC.read_text().replace("    users: [bob]\n", "")
    code, doc = await call("root", "POST", "spec", "reload", body={"spec": text})
    assert code == 200, doc
    code, doc = await call("bob", "POST", "jobs", body={"vc": "vcb", "command": "true"})
    assert code == 403 and "may not submit to VC 'vcb'" in doc["error"], doc
    with pytest.raises(NotAuthorized, match="^user 'bob' is not a member of VC 'vcb'$"):
        service.submit("bob", {"vc": "vcb", "command": "true"})
    code, doc = await call("root", "POST", "jobs", body={"vc": "vcb", "command": "true"})
    assert code == 201, doc
    await wait_state(call_as(call, "root"), "root", doc["id"])


def call_as(call, role):
    async def api(user, method, *path, **kw):
        return await call(role, method, *path, **kw)
    return api
