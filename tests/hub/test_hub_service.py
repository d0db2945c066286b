"""hived as a JupyterHub service, for real: identity, groups and scopes come
from the Hub; notebooks of two users in two groups submit as themselves."""
from __future__ import annotations

import os
import time

import nbformat
import pytest
import requests
from nbclient import NotebookClient

from .conftest import CACHE_SECONDS

pytestmark = pytest.mark.slow


def call(hub, token, method, route, **kw):
    return requests.request(method, hub.hived + "hived/api/" + route, timeout=30,
                            headers={"Authorization": f"token {token}"}, **kw)


@pytest.fixture(scope="module")
def tokens(hub):
    return {user: hub.token_for(user) for user in ("alice", "bob", "hubadmin")}


def wait_job(hub, token, job_id, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        job = call(hub, token, "GET", f"jobs/{job_id}").json()
        if job.get("state") in ("succeeded", "failed", "cancelled"):
            return job
        assert time.monotonic() < deadline, job
        time.sleep(0.2)


def test_hub_tokens_name_the_person_and_their_groups_vcs(hub, tokens):
    seen = {u: call(hub, t, "GET", "status").json() for u, t in tokens.items()}
    assert (seen["alice"]["user"], seen["alice"]["vcs"], seen["alice"]["admin"]) == ("alice", ["vca"], False)
    assert (seen["bob"]["user"], seen["bob"]["vcs"], seen["bob"]["admin"]) == ("bob", ["vcb"], False)
    assert seen["hubadmin"]["admin"] is True  # through the spec's adminGroups
    r = call(hub, "not-a-hub-token", "GET", "status")
    assert r.status_code == 403, r.text


def test_token_without_the_service_scope_is_refused(hub):
    narrow = hub.as_driver("POST", "users/alice/tokens",
                           json={"note": "no hived", "scopes": ["read:users:name!user=alice"]}).json()["token"]
    r = call(hub, narrow, "GET", "status")
    assert r.status_code == 403, r.text
    assert "access:services!service=hived" in r.json()["error"]


def test_token_in_url_is_not_taken(hub, tokens):
    r = requests.get(hub.hived + "hived/api/status", params={"token": tokens["alice"]}, timeout=30)
    assert r.status_code == 403 and "URL" in r.json()["error"]


def _notebook(*sources: str):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def _run_as(hub, user, token, tmp_path, *sources):
    """Execute a notebook in a kernel with the environment a Hub user's server gives it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HIVED_", "JUPYTERHUB_"))}
    env.update(JUPYTERHUB_API_URL=hub.api, JUPYTERHUB_API_TOKEN=token, JUPYTERHUB_USER=user)
    nb = _notebook(*sources)
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(tmp_path)}}).execute(env=env)
    return ["".join(o.get("text", "") or "".join(o.get("traceback", [])) for o in cell.outputs) for cell in nb.cells]


@pytest.mark.parametrize("user, vc, other", [("alice", "vca", "vcb"), ("bob", "vcb", "vca")])
def test_notebook_magics_submit_as_the_hub_user(hub, tokens, tmp_path, user, vc, other):
    out = _run_as(hub, user, tokens[user], tmp_path,
                  "%load_ext hived.jupyter_ext",
                  "%gpu_submit --gpus 1 -- python -c \"print('hello from the GPU job')\"",
                  "print('job', _gpu_job['user'], _gpu_job['vc'], _gpu_job['state'])",
                  f"%gpu_submit --vc {other} --gpus 1 --detach -- true")
    assert "hello from the GPU job" in out[1], out
    assert out[2].strip() == f"job {user} {vc} succeeded", out
    assert "may not submit" in out[3] or "403" in out[3], out


def test_other_vcs_jobs_are_refused(hub, tokens):
    r = call(hub, tokens["alice"], "POST", "jobs", json={"vc": "vca", "command": "true", "gpus": 1})
    assert r.status_code in (200, 201), r.text
    job_id = r.json()["id"]
    # another team's job answers exactly as a job that does not exist (no oracle: docs/security.md)
    hidden = call(hub, tokens["bob"], "GET", f"jobs/{job_id}")
    missing = call(hub, tokens["bob"], "GET", "jobs/j99999")
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json()["error"].replace(job_id, "ID") == missing.json()["error"].replace("j99999", "ID")
    assert call(hub, tokens["bob"], "POST", f"jobs/{job_id}/cancel", json={}).status_code == 404
    assert call(hub, tokens["bob"], "GET", "jobs", params={"vc": "vca"}).status_code == 404   # as a missing VC
    listed = call(hub, tokens["bob"], "GET", "jobs").json()["jobs"]
    assert all(j["vc"] == "vcb" for j in listed), listed
    r = call(hub, tokens["bob"], "POST", "jobs", json={"vc": "vca", "command": "true", "gpus": 1})
    assert r.status_code == 403, r.text
    assert call(hub, tokens["hubadmin"], "GET", f"jobs/{job_id}").status_code == 200


def test_jobs_do_not_inherit_the_service_token(hub, tokens):
    r = call(hub, tokens["alice"], "POST", "jobs", json={
        "vc": "vca", "gpus": 1,
        "command": "python -c \"import os; print('token:', os.environ.get('JUPYTERHUB_API_TOKEN'))\""})
    job = wait_job(hub, tokens["alice"], r.json()["id"])
    log = call(hub, tokens["alice"], "GET", f"jobs/{job['id']}/logs").json()["text"]
    assert job["state"] == "succeeded" and "token: None" in log, (job, log)


def test_removed_from_group_is_refused_within_the_cache_lifetime(hub, tokens):
    submit = {"vc": "vca", "command": "true", "gpus": 1}
    assert call(hub, tokens["alice"], "POST", "jobs", json=submit).status_code in (200, 201)
    hub.as_driver("DELETE", "groups/team-a/users", json={"users": ["alice"]})
    try:
        deadline = time.monotonic() + CACHE_SECONDS + 1.5
        while call(hub, tokens["alice"], "POST", "jobs", json=submit).status_code != 403:
            assert time.monotonic() < deadline, "still accepted after the cache lifetime"
            time.sleep(0.2)
        assert call(hub, tokens["alice"], "GET", "status").json()["vcs"] == []
    finally:
        hub.as_driver("POST", "groups/team-a/users", json={"users": ["alice"]})
    deadline = time.monotonic() + CACHE_SECONDS + 1.5
    while call(hub, tokens["alice"], "POST", "jobs", json=submit).status_code not in (200, 201):
        assert time.monotonic() < deadline, "not accepted again after being added back"
        time.sleep(0.2)


def test_cli_inside_a_hub_session_lists_the_hub_users_own_jobs(hub, tokens):
    import subprocess
    import sys
    mine = call(hub, tokens["bob"], "POST", "jobs", json={"vc": "vcb", "command": "true", "gpus": 1}).json()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HIVED_", "JUPYTERHUB_"))}
    env.update(JUPYTERHUB_API_URL=hub.api, JUPYTERHUB_API_TOKEN=tokens["bob"], USER="someone-else")
    out = subprocess.run([sys.executable, "-m", "hived.cli.main", "jobs", "--mine", "--json"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    import json
    jobs = json.loads(out.stdout)["jobs"]
    assert mine["id"] in {j["id"] for j in jobs} and {j["user"] for j in jobs} == {"bob"}, jobs


@pytest.mark.parametrize("user, vc, other", [("alice", "vca", "vcb"), ("bob", "vcb", "vca")])
def test_magics_in_the_users_own_hub_server_submit_as_that_user(hub, user, vc, other):
    """The kernel runs in the user's single-user server the Hub spawned, with
    the server's own $JUPYTERHUB_API_TOKEN: no token or URL is given."""
    server = hub.start_server(user)
    out = hub.execute(server, [
        "import os; print(os.environ['JUPYTERHUB_USER'], 'HIVED_URL' in os.environ)",
        "%load_ext hived.jupyter_ext",
        "%gpu_submit --gpus 1 -- python -c \"print('hello from', 'the server')\"",
        "print('job', _gpu_job['user'], _gpu_job['vc'], _gpu_job['state'])",
        f"%gpu_submit --vc {other} --gpus 1 --detach -- true",
        "%gpu_jobs",
    ])
    assert out[0].strip() == f"{user} False", out
    assert "hello from the server" in out[2], out
    assert out[3].strip() == f"job {user} {vc} succeeded", out
    assert "may not submit" in out[4], out
    assert user in out[5] and other not in out[5], out


def _client_in_session(hub, token, **env):
    import subprocess
    import sys
    run_env = {k: v for k, v in os.environ.items() if not k.startswith(("HIVED_", "JUPYTERHUB_"))}
    run_env.update(JUPYTERHUB_API_URL=hub.api, JUPYTERHUB_API_TOKEN=token, **env)
    code = ("from hived.service.client import HivedClient, HivedError\n"
            "try:\n    c = HivedClient(); print(c.url, c.status()['user'])\n"
            "except HivedError as e:\n    print(e)")
    return subprocess.run([sys.executable, "-c", code], env=run_env, capture_output=True, text=True,
                          timeout=60).stdout.strip()


def test_discovery_goes_through_the_proxy_when_the_hub_hides_the_service(hub):
    blind = hub.as_driver("POST", "users/alice/tokens",
                          json={"note": "no read:services",
                                "scopes": ["access:services!service=hived"]}).json()["token"]
    refused = _client_in_session(hub, blind)
    assert "no service 'hived'" in refused and "read:services!service=hived" in refused, refused
    found = _client_in_session(hub, blind, JUPYTERHUB_PUBLIC_URL=hub.url)
    assert found == f"{hub.hived} alice", found


def test_without_a_cache_a_group_change_applies_on_the_next_request(tmp_path_factory):
    from .conftest import Hub
    hub = Hub(tmp_path_factory.mktemp("hub-nocache"), cache=0)
    try:
        token = hub.token_for("bob")
        assert call(hub, token, "GET", "status").json()["vcs"] == ["vcb"]
        hub.as_driver("DELETE", "groups/team-b/users", json={"users": ["bob"]})
        assert call(hub, token, "GET", "status").json()["vcs"] == []
        r = call(hub, token, "POST", "jobs", json={"vc": "vcb", "command": "true", "gpus": 1})
        assert r.status_code == 403, r.text
    finally:
        hub.stop()
