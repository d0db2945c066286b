"""Idle release: VC research sets kernelIdleTimeout 8 s. A notebook run by nbclient on a hived
kernel sees its GPUs; a cell that runs longer than the timeout keeps the kernel (the provisioner
reports it); once no cell ran for 8 s hived cancels the job with the reason, and the next cell
shows that reason instead of a dead kernel."""
from __future__ import annotations

import nbformat
import pytest
from jupyter_core.utils import run_sync
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from nbformat.v4 import new_code_cell, new_notebook

from hived.service.client import HivedClient
from hived.testing.mlflow_server import start_server, stop_server

from .conftest import idle_spec, wait_state

TIMEOUT = 8   # seconds: longer than a kernel takes to boot on a busy machine


@pytest.fixture(scope="module")
def idle_serve(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hived-idle")
    proc, info = start_server(tmp, tick=0.1, spec_text=idle_spec(TIMEOUT), extra_env={"HIVED_JOB_ACCOUNT": "server"})
    yield info
    stop_server(proc)


@pytest.fixture
def client(idle_serve, kernel_prefix, monkeypatch):
    monkeypatch.setenv("HIVED_URL", idle_serve["url"])
    monkeypatch.setenv("HIVED_TOKEN", idle_serve["token"])
    monkeypatch.setenv("JUPYTER_PATH", str(kernel_prefix / "share" / "jupyter"))
    for var in ("JUPYTERHUB_API_URL", "JUPYTERHUB_API_TOKEN", "HIVED_USER"):
        monkeypatch.delenv(var, raising=False)
    return HivedClient()


def test_an_idle_kernel_is_released_with_its_reason_and_the_next_cell_shows_it(client):
    nb = new_notebook(cells=[
        new_code_cell("import os; print(os.environ['CUDA_VISIBLE_DEVICES'], os.environ['HIVED_JOB_ID'])"),
        new_code_cell(f"import time; time.sleep({TIMEOUT + 2})"),
        new_code_cell("print('still here')")])
    nb.metadata["kernelspec"] = {"name": "hived-research-2gpu", "display_name": "hived", "language": "python"}
    nbc = NotebookClient(nb, kernel_name="hived-research-2gpu", timeout=60)
    with nbc.setup_kernel():
        nbc.execute_cell(nb.cells[0], 0)
        gpus, job_id = nb.cells[0].outputs[0]["text"].split()
        assert len(gpus.split(",")) == 2
        nbc.execute_cell(nb.cells[1], 1)          # busy longer than the timeout: not idle
        assert client.job(job_id)["state"] == "running"
        job = wait_state(client, job_id, "cancelled", timeout=60)
        released = [h["reason"] for h in job["history"] if h["reason"].startswith("released")]
        assert released == [f"released: the kernel ran no cell for {TIMEOUT} s (kernelIdleTimeout of VC research); "
                            "its GPUs went back to the VC. Restart the kernel to queue for GPUs again"]
        assert run_sync(nbc.km.is_alive)()       # what a Jupyter server's restarter asks
        with pytest.raises(CellExecutionError) as err:
            nbc.execute_cell(nb.cells[2], 2)
        assert f"hived ended this kernel's job {job_id}: {released[0]}" in str(err.value)
        assert client.vc("research")   # the VC answers; its GPUs are free again:
        assert not [j for j in client.jobs(vc="research") if j["state"] == "running"]
        run_sync(nbc.km.restart_kernel)()          # a restart queues a new job
        run_sync(nbc.kc.wait_for_ready)(timeout=60)
        nbc.execute_cell(nb.cells[0], 0)
        assert nb.cells[0].outputs[0]["text"].split()[1] != job_id
    assert not [j for j in client.jobs(vc="research") if j["state"] not in ("succeeded", "failed", "cancelled")]
    nbformat.validate(nb)
