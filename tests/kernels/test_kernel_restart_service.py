"""Killing `hived serve` (SIGKILL) under a running kernel and starting it again: the restarted
service adopts the kernel's job, the kernel keeps working, and shutting it down leaves no
process of the job and no GPU held."""
from __future__ import annotations

import os
import signal
import socket

from jupyter_client.manager import KernelManager

from hived.service.client import HivedClient
from hived.testing.mlflow_server import start_server, stop_server

from .conftest import DEMO_SPEC, kernel_env, run_cell, wait_state


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _processes_of(job_dir: str) -> list[int]:
    """Processes of one job, known by its folder (job ids repeat across other test runs' services)."""
    from hived.service.local_launcher import processes_with_env
    return processes_with_env("HIVED_JOB_DIR", job_dir)


def test_a_killed_and_restarted_service_leaves_no_orphan_kernel(tmp_path, kernel_prefix, monkeypatch):
    port, token = _free_port(), "hived-dev-" + os.urandom(8).hex()
    serve = dict(tick=0.1, spec_text=DEMO_SPEC, extra_env={"HIVED_JOB_ACCOUNT": "server", "HIVED_TOKEN": token},
                 args=("--port", str(port)))
    proc, info = start_server(tmp_path, **serve)
    monkeypatch.setenv("HIVED_URL", info["url"])
    monkeypatch.setenv("HIVED_TOKEN", token)
    monkeypatch.setenv("JUPYTER_PATH", str(kernel_prefix / "share" / "jupyter"))
    for var in ("JUPYTERHUB_API_URL", "JUPYTERHUB_API_TOKEN", "HIVED_USER"):
        monkeypatch.delenv(var, raising=False)
    km = KernelManager(kernel_name="hived-research-2gpu")
    try:
        km.start_kernel()
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=60)
        job_id = kernel_env(kc)["HIVED_JOB_ID"]
        job_dir = run_cell(kc, "import os; x = 1; print(os.environ['HIVED_JOB_DIR'])").strip()
        assert len(_processes_of(job_dir)) == 2            # the host and its kernel
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        os.unlink(os.path.join(info["data_dir"], "server.json"))   # the dead server's; wait for the new one
        proc, info = start_server(tmp_path, **serve)
        client = HivedClient()
        assert client.job(job_id)["state"] == "running"          # adopted, not relaunched
        assert run_cell(kc, "print(x)").strip() == "1"            # the same kernel
        assert km.is_alive()
        kc.stop_channels()
        km.shutdown_kernel()
        assert wait_state(client, job_id, "cancelled")["state"] == "cancelled"
        assert job_dir.startswith(info["data_dir"]) and _processes_of(job_dir) == []
        vc = client.vc("research")
        assert vc["running"] == [] and vc["gpus_used"] == 0
        held = [g for chain in client.cluster()["chains"].values() for node in chain["nodes"].values()
                for g in node["gpus"] if g["holder"]]
        assert held == []
    finally:
        if km.has_kernel:
            km.shutdown_kernel(now=True)
        stop_server(proc)
