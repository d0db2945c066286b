"""Every door to reconfiguration reaches the service's one ``reload_spec``: the
service itself, the extension (``HivedState.reload``), ``POST spec/reload``, the
Python client, the admin widget, ``hived spec reload`` and SIGHUP to ``hived
serve``. For the same spec they give the same answer, and for the same bad spec
the same refusal in the same words, changing nothing."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from hived.core.engine import RequestError
from hived.service.client import HivedError

from .conftest import SPEC, LiveServer
from .helpers import wait_state

GOOD = SPEC.read_text()
VC_GONE = GOOD.replace("  vca:\n", "  vcx:\n")          # a running vca job fits it not even as opportunistic
SAME_ANSWER = {"ok": True, "vcs": ["vca", "vcb"], "chains": ["T-NODE"], "downgraded": []}


@pytest.fixture
def client_for(jp_serverapp, http_server_client, jp_http_port, jp_base_url):
    from hived.service.client import HivedClient
    return lambda user: HivedClient(f"http://127.0.0.1:{jp_http_port}{jp_base_url}", token=f"tok-{user}")


async def test_in_process_doors_agree(api, service, jp_serverapp, client_for):
    state = jp_serverapp.web_app.settings["hived"]
    code, job = await api("alice", "POST", "jobs", body={"vc": "vca", "command": "sleep 30", "gpus": 4})
    assert code == 201, job
    await wait_state(api, "alice", job["id"], ("running",))

    with pytest.raises(RequestError) as direct:
        await asyncio.to_thread(service.reload_spec, VC_GONE)
    field, problem = direct.value.field, direct.value.problem
    assert field == "spec" and problem.startswith(f"job {job['id']} (running) does not fit the new spec")
    with pytest.raises(RequestError) as ext:
        await asyncio.to_thread(state.reload, VC_GONE)
    assert (ext.value.field, ext.value.problem) == (field, problem)
    code, doc = await api("root", "POST", "spec", "reload", body={"spec": VC_GONE})
    assert code == 400 and doc == {"error": problem, "where": field}
    with pytest.raises(HivedError) as remote:
        await asyncio.to_thread(client_for("root").reload_spec, VC_GONE)
    assert remote.value.status == 400 and remote.value.line() == f"{field}: {problem}"
    # nothing changed: neither the service's spec nor who may do what
    assert sorted(service.spec.vcs) == ["vca", "vcb"] and "vca" in state.access.vc_users
    code, doc = await api("alice", "GET", "jobs", job["id"])
    assert doc["state"] == "running" and doc["placement"]["opportunistic"] is False

    answers = [await asyncio.to_thread(service.reload_spec, GOOD),
               await asyncio.to_thread(state.reload, GOOD),
               (await api("root", "POST", "spec", "reload", body={"spec": GOOD}))[1],
               await asyncio.to_thread(client_for("root").reload_spec, GOOD),
               await asyncio.to_thread(client_for("root").reload_spec)]       # the server's own file
    assert answers == [SAME_ANSWER] * 5


def _cli(server, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIVED_")}
    return subprocess.run([sys.executable, "-m", "hived.cli.main", "spec", "reload", *args,
                           "--url", server.url], check=False, env=env, capture_output=True, text=True,
                          timeout=60)


def _wait_log(server, text: str, start: int) -> str:
    deadline = time.monotonic() + 20
    while True:
        log = (server.data_dir / "serve.log").read_text()[start:]
        if text in log:
            return log
        assert time.monotonic() < deadline, f"not in the log: {text!r}\n{log[-2000:]}"
        time.sleep(0.05)


def test_cli_widget_and_sighup_agree(tmp_path):
    from hived.jupyter_ext.widgets_admin import AdminActions
    spec = tmp_path / "cluster.yaml"
    spec.write_text(GOOD)
    data = tmp_path / "data"
    data.mkdir()
    server = LiveServer(data, spec=spec)
    try:
        alice, root = server.client("alice"), server.client("root")
        job = alice.submit({"vc": "vca", "command": "sleep 30", "gpus": 4})["id"]
        deadline = time.monotonic() + 20
        while alice.job(job)["state"] != "running":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        with pytest.raises(HivedError) as ref:
            root.reload_spec(VC_GONE)
        line = ref.value.line()
        assert line.startswith(f"spec: job {job} (running) does not fit the new spec")

        bad = tmp_path / "bad.yaml"
        bad.write_text(VC_GONE)
        r = _cli(server, str(bad), "--token", "tok-root")
        assert (r.returncode, r.stdout, r.stderr) == (2, "", f"hived spec reload: {line}\n")
        r = _cli(server, str(bad), "--token", "tok-alice")
        assert r.returncode == 3 and "cluster admins only" in r.stderr

        spec.write_text(VC_GONE)      # the server's own file now holds the bad spec
        said = []
        AdminActions(root, lambda text, ok: said.append((text, ok))).reload()
        assert said == [(f"hived: {line}", False)]
        mark = len((data / "serve.log").read_text())
        server.proc.send_signal(signal.SIGHUP)
        _wait_log(server, f"hived: spec not reloaded: {line}", mark)
        assert sorted(root.vcs()["vcs"]) == ["vca", "vcb"] and alice.job(job)["state"] == "running"

        spec.write_text(GOOD)
        r = _cli(server, "--token", "tok-root", "--json")
        assert r.returncode == 0 and json.loads(r.stdout) == SAME_ANSWER, r.stderr
        r = _cli(server, "--token", "tok-root")
        text = "spec reloaded: VCs vca, vcb; downgraded to opportunistic: none"
        assert r.stdout == text + "\n"
        AdminActions(root, lambda text, ok: said.append((text, ok))).reload()
        assert said[-1] == (text, True)
        mark = len((data / "serve.log").read_text())
        server.proc.send_signal(signal.SIGHUP)
        _wait_log(server, "hived: " + text, mark)
        root.cancel(job)
    finally:
        server.stop()
