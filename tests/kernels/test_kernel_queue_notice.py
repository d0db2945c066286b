"""A queued kernel tells the user where it stands, not only the server's log: a real Jupyter
server (subprocess, the ``hived.kernels`` server extension enabled as the package's
jupyter_server_config.d file enables it) streams the provisioner's queue event to a frontend
subscribed to ``/api/events/subscribe`` before the kernel was asked for."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest
import requests
import websocket

from hived.kernels.queue_notice import KERNEL_QUEUE_EVENT

from .conftest import HIVED
from .test_kernels import te_filler

TOKEN = "jupyter-" + "0123456789abcdef" * 2


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def jupyter_server(env, tmp_path):
    """`jupyter server` with hived.kernels enabled; HIVED_URL/HIVED_TOKEN/JUPYTER_PATH from ``env``."""
    config = tmp_path / "config"
    config.mkdir()
    (config / "jupyter_server_config.json").write_text(
        json.dumps({"ServerApp": {"jpserver_extensions": {"hived.kernels": True}}}))
    port = _port()
    log = open(tmp_path / "server.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter_server", "--no-browser", "--allow-root", f"--port={port}",
         "--ip=127.0.0.1", f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={tmp_path}"],
        env={**os.environ, "JUPYTER_CONFIG_DIR": str(config)}, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 90
    while True:
        assert proc.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
        try:
            if requests.get(url + "api/status", headers=_auth(), timeout=2).status_code == 200:
                break
        except requests.RequestException:
            pass
        assert time.monotonic() < deadline, (tmp_path / "server.log").read_text()[-3000:]
        time.sleep(0.2)
    yield url
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()


def _auth() -> dict:
    return {"Authorization": f"token {TOKEN}"}


def test_a_frontend_subscribed_to_the_servers_events_sees_the_queue_position_and_reason(env, jupyter_server):
    events = websocket.create_connection(jupyter_server.replace("http", "ws", 1) + "api/events/subscribe",
                                         header=[f"Authorization: token {TOKEN}"], timeout=60)
    filler = te_filler(env)
    answer: dict = {}

    def start():   # POST /api/kernels answers once the kernel started
        answer["r"] = requests.post(jupyter_server + "api/kernels", json={"name": "hived-research-2gpu"},
                                    headers=_auth(), timeout=120)

    starter = threading.Thread(target=start)
    starter.start()
    try:
        seen = []     # the first may be "submitted: tried at the next scheduling round"
        while not seen or "waits for" not in seen[-1]["wait_reason"]:
            event = json.loads(events.recv())
            if event.get("schema_id") == KERNEL_QUEUE_EVENT:
                seen.append(event)
        assert len({e["msg"] for e in seen}) == len(seen)     # one event per change
        job = env.job(event["job_id"])
        assert job["state"] == "queued" and job["labels"].get("kernel") == event["kernel_id"]
        assert (event["vc"], event["state"], event["queue_position"]) == ("research", "queued", 1)
        assert event["wait_reason"] == job["wait_reason"] and "waits for 2 GPUs" in event["wait_reason"]
        assert event["msg"] == (f"hived: kernel job {job['id']} queued at position 1 in VC research: "
                                f"{job['wait_reason']}")
        assert "r" not in answer        # the start still waits: the event came while it queued
    finally:
        env.cancel(filler["id"])
        starter.join(120)
        events.close()
    assert answer["r"].status_code == 201, answer["r"].text
    kernel_id = answer["r"].json()["id"]
    assert kernel_id == event["kernel_id"]
    assert env.job(event["job_id"])["state"] == "running"
    requests.delete(jupyter_server + f"api/kernels/{kernel_id}", headers=_auth(), timeout=60)
    assert env.job(event["job_id"])["state"] == "cancelled"


def test_a_start_past_start_timeout_answers_the_frontend_with_where_the_job_stood(env, jupyter_server,
                                                                                  kernel_prefix):
    subprocess.run([*HIVED, "kernelspec", "install", "--vc", "research", "--gpus", "2", "--name", "quick",
                    "--start-timeout", "2", "--prefix", str(kernel_prefix)], check=True, capture_output=True)
    te_filler(env)
    r = requests.post(jupyter_server + "api/kernels", json={"name": "quick"}, headers=_auth(), timeout=120)
    assert r.status_code == 503, r.text            # not the server's bare "Unhandled error"
    message = r.json()["message"]
    job = [j for j in env.jobs(vc="research") if "kernel" in j["labels"]][-1]
    assert message.startswith(f"hived: kernel job {job['id']} did not start within 2 s (start_timeout) and was "
                              "cancelled at position 1 in VC research's queue: waits for 2 GPUs"), message
    assert job["state"] == "cancelled"
