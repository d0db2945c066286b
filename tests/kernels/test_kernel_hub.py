"""A hived kernel started by a JupyterHub user, for real: the Hub of tests/hub (hived as its
managed service, alice in team-a -> VC vca, bob in team-b -> VC vcb), alice's single-user
server started through the Hub, the kernelspecs in alice's home as `hived kernelspec install
--user` would put them. The provisioner runs inside her server with nothing but what the Hub
gives it (no HIVED_URL/HIVED_TOKEN): it finds hived through Hub discovery with her server's
token, so the kernel's job is alice's, in her VC, and bob can neither act on it nor start one."""
from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import requests
import websocket

from .conftest import HIVED

sys.path.insert(0, str(Path(__file__).parents[1]))   # tests/: the Hub harness of tests/hub (--import-mode=importlib)
from hub.conftest import DRIVER_TOKEN, Hub  # noqa: E402

pytestmark = pytest.mark.slow
AUTH = {"Authorization": f"token {DRIVER_TOKEN}"}    # the Hub's driver service may use users' servers


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hub-kernels")
    for vc, gpus in (("vca", 2), ("vcb", 1)):   # what `hived kernelspec install --user` does in alice's home
        subprocess.run([*HIVED, "kernelspec", "install", "--vc", vc, "--gpus", str(gpus),
                        "--prefix", str(tmp / "home" / "alice" / ".local")], check=True, capture_output=True)
    h = Hub(tmp)
    yield h
    h.stop()


@pytest.fixture(scope="module")
def servers(hub):
    return {"alice": hub.start_server("alice")}     # bob acts with his own Hub token only


def api(hub, token, method, route, **kw):
    return requests.request(method, hub.hived + "hived/api/" + route, timeout=30,
                            headers={"Authorization": f"token {token}"}, **kw)


def run_cell(server: str, kernel_id: str, code: str, timeout: float = 60) -> str:
    """One cell through the server's kernel websocket (what JupyterLab does); its stdout."""
    ws = websocket.create_connection(server.replace("http", "ws", 1) + f"api/kernels/{kernel_id}/channels",
                                     header=[f"Authorization: token {DRIVER_TOKEN}"], timeout=timeout)
    msg_id, text = uuid.uuid4().hex, ""
    try:
        ws.send(json.dumps({
            "header": {"msg_id": msg_id, "session": uuid.uuid4().hex, "username": "test", "date": "",
                       "msg_type": "execute_request", "version": "5.3"},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                        "allow_stdin": False, "stop_on_error": True}}))
        while True:
            msg = json.loads(ws.recv())
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "stream":
                text += msg["content"]["text"]
            elif msg["msg_type"] == "error":
                raise AssertionError("\n".join(msg["content"]["traceback"]))
            elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                return text
    finally:
        ws.close()


def wait_ended(hub, token, job_id, timeout=60):
    deadline = time.monotonic() + timeout
    while (job := api(hub, token, "GET", f"jobs/{job_id}").json())["state"] not in ("succeeded", "failed",
                                                                                      "cancelled"):
        assert time.monotonic() < deadline, job
        time.sleep(0.2)
    return job


def test_a_hub_users_kernel_is_their_job_in_their_vc_and_no_one_elses(hub, servers):
    alice, bob = hub.token_for("alice"), hub.token_for("bob")
    started = requests.post(servers["alice"] + "api/kernels", json={"name": "hived-vca-2gpu"}, headers=AUTH,
                            timeout=120)
    assert started.status_code == 201, started.text
    kernel_id = started.json()["id"]
    try:
        seen = json.loads(run_cell(servers["alice"], kernel_id, "import os, json; print(json.dumps("
                                   "{k: os.environ.get(k) for k in ('HIVED_JOB_ID', 'HIVED_VC', "
                                   "'CUDA_VISIBLE_DEVICES')}))"))
        job = api(hub, alice, "GET", f"jobs/{seen['HIVED_JOB_ID']}").json()
        assert (job["user"], job["vc"], job["state"], job["job_class"]) == ("alice", "vca", "running", "te")
        assert job["labels"] == {"kernel": kernel_id} and seen["HIVED_VC"] == "vca"
        assert len(seen["CUDA_VISIBLE_DEVICES"].split(",")) == 2
        for route in (f"jobs/{job['id']}/cancel", f"jobs/{job['id']}/activity", f"jobs/{job['id']}/hold"):
            refused = api(hub, bob, "POST", route, json={})
            assert refused.status_code in (403, 404), (route, refused.status_code, refused.text)
        assert api(hub, alice, "GET", f"jobs/{job['id']}").json()["state"] == "running"
        assert api(hub, alice, "POST", f"jobs/{job['id']}/activity", json={}).status_code == 200
    finally:
        requests.delete(servers["alice"] + f"api/kernels/{kernel_id}", headers=AUTH, timeout=60)
    assert wait_ended(hub, alice, job["id"])["state"] == "cancelled"


def test_a_hub_user_cannot_start_a_kernel_in_another_teams_vc(hub, servers):
    admin = hub.token_for("hubadmin")
    before = api(hub, admin, "GET", "jobs", params={"vc": "vcb"}).json()["jobs"]
    refused = requests.post(servers["alice"] + "api/kernels", json={"name": "hived-vcb-1gpu"}, headers=AUTH,
                            timeout=120)
    assert refused.status_code == 403, refused.text      # hived's refusal, not the server's "Unhandled error"
    assert "user 'alice' may not submit to VC 'vcb'" in refused.json()["message"], refused.text
    assert api(hub, admin, "GET", "jobs", params={"vc": "vcb"}).json()["jobs"] == before   # nothing queued
