"""A real `hived serve` on the demo spec (local launcher, the demo's fake GPUs) and hived
kernelspecs installed with the real `hived kernelspec install` into a temporary prefix."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hived.service.client import TERMINAL_STATES, HivedClient
from hived.testing.mlflow_server import start_server, stop_server

REPO = Path(__file__).resolve().parents[2]
DEMO_SPEC = (REPO / "examples" / "demo" / "demo_cluster.yaml").read_text()
HIVED = [sys.executable, "-m", "hived.cli.main"]


def idle_spec(seconds: float) -> str:
    """The demo spec with ``kernelIdleTimeout`` on VC research."""
    return DEMO_SPEC.replace("  research:\n", f"  research:\n    kernelIdleTimeout: {seconds:g}\n", 1)


@pytest.fixture(scope="module")
def hived_serve(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hived-kernels")
    # as root the local launcher would run each VC's jobs under an account of its own, which cannot
    # reach this checkout's python under /root: jobs run as the server's account
    proc, info = start_server(tmp, tick=0.1, spec_text=DEMO_SPEC, job_account="server",
                              args=("--trust-user-header",))
    info["proc"], info["tmp"] = proc, tmp
    yield info
    stop_server(proc)


@pytest.fixture(scope="module")
def kernel_prefix(tmp_path_factory):
    """`hived kernelspec install --vc research --gpus 2 --prefix P` (and a 4-GPU one), as an admin would."""
    prefix = tmp_path_factory.mktemp("jupyter-prefix")
    for gpus in (2, 4):
        subprocess.run([*HIVED, "kernelspec", "install", "--vc", "research", "--gpus", str(gpus),
                        "--prefix", str(prefix)], check=True, capture_output=True, text=True)
    return prefix


@pytest.fixture
def env(hived_serve, kernel_prefix, monkeypatch):
    """HIVED_URL/HIVED_TOKEN of the service, JUPYTER_PATH finding the kernelspecs; a client;
    every job the test leaves behind is cancelled after it."""
    monkeypatch.setenv("HIVED_URL", hived_serve["url"])
    monkeypatch.setenv("HIVED_TOKEN", hived_serve["token"])
    monkeypatch.setenv("JUPYTER_PATH", str(kernel_prefix / "share" / "jupyter"))
    for var in ("JUPYTERHUB_API_URL", "JUPYTERHUB_API_TOKEN", "HIVED_USER"):
        monkeypatch.delenv(var, raising=False)
    client = HivedClient()
    yield client
    for job in client.jobs():
        if job["state"] not in TERMINAL_STATES:
            client.cancel(job["id"])
    for job in client.jobs():
        if job["state"] not in TERMINAL_STATES:
            client.wait(job["id"], poll=0.1, timeout=30)


def fill_vc(client: HivedClient, gpus: int = 8, vc: str = "research") -> dict:
    """A BE job holding every GPU of the VC, running."""
    job = client.submit({"vc": vc, "gpus": gpus, "job_class": "be", "name": "filler",
                         "command": [sys.executable, "-c", "import time; time.sleep(3600)"]})
    wait_state(client, job["id"], "running")
    return job


def wait_state(client: HivedClient, job_id: str, state: str, timeout: float = 60) -> dict:
    import time
    deadline = time.monotonic() + timeout
    while True:
        job = client.job(job_id)
        if job["state"] == state:
            return job
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id} is {job['state']}, not {state}, after {timeout} s: "
                                 f"{job.get('wait_reason') or job.get('reason')}")
        time.sleep(0.1)


def kernel_env(kc, timeout: float = 60) -> dict:
    """CUDA_VISIBLE_DEVICES and HIVED_JOB_ID as the kernel sees them."""
    code = "import os, json; print(json.dumps({k: os.environ.get(k) for k in " \
           "('CUDA_VISIBLE_DEVICES', 'HIVED_JOB_ID', 'HIVED_VC')}))"
    return __import__("json").loads(run_cell(kc, code, timeout))


def run_cell(kc, code: str, timeout: float = 60) -> str:
    out: list[str] = []
    reply = kc.execute_interactive(code, timeout=timeout,
                                   output_hook=lambda m: out.append(m["content"].get("text", ""))
                                   if m["msg_type"] == "stream" else None)
    assert reply["content"]["status"] == "ok", reply["content"]
    return "".join(out)


os.environ.setdefault("JUPYTER_PLATFORM_DIRS", "1")
