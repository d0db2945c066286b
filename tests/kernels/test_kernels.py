"""Kernels that are TE jobs, through jupyter_client against a real `hived serve` (demo spec,
local launcher): queueing with a reason, start_timeout, interrupt and restart inside the
same allocation, who may start one, and the kernel label in `hived jobs`."""
from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time

import pytest
import requests
from jupyter_client.manager import AsyncKernelManager, KernelManager

from hived.kernels.provisioner import KernelStartError

from .conftest import HIVED, kernel_env, run_cell, wait_state


def te_filler(client, gpus=8):
    """A TE job holding the whole VC: kernels (TE too) cannot preempt it."""
    job = client.submit({"vc": "research", "gpus": gpus, "job_class": "te", "name": "te-filler",
                         "command": [sys.executable, "-c", "import time; time.sleep(3600)"]})
    return wait_state(client, job["id"], "running")


def started(kernel_name="hived-research-2gpu"):
    km = KernelManager(kernel_name=kernel_name)
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=60)
    return km, kc


def test_the_kernel_shows_as_a_kernel_in_hived_jobs_gpu_jobs_and_metrics(env, hived_serve, capsys):
    km, kc = started()
    try:
        job_id = kernel_env(kc)["HIVED_JOB_ID"]
        out = subprocess.run([*HIVED, "jobs", "--active"], capture_output=True, text=True, check=True).stdout
        line = next(ln for ln in out.splitlines() if ln.startswith(job_id))
        assert "TE/KERNEL" in line and "running" in line
        assert env.job(job_id)["labels"] == {"kernel": km.kernel_id}
        from IPython.testing.globalipapp import get_ipython
        shell = get_ipython()
        shell.run_line_magic("reload_ext", "hived.jupyter_ext")
        capsys.readouterr()
        shell.run_line_magic("gpu_jobs", "--vc research --state running")
        line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(job_id))
        assert " TE/KERNEL " in line      # %gpu_jobs prints the table of `hived jobs`
        metrics = requests.get(hived_serve["url"] + "hived/api/metrics", timeout=30,
                               headers={"Authorization": f"token {hived_serve['token']}"}).text
        assert 'hived_kernel_jobs{state="running",vc="research"} 1.0' in metrics
    finally:
        kc.stop_channels()
        km.shutdown_kernel()


def test_a_second_kernel_in_a_full_vc_queues_with_its_reason_and_starts_when_room_comes(env, caplog):
    filler = te_filler(env)
    km = AsyncKernelManager(kernel_name="hived-research-2gpu")

    async def scenario():
        start = asyncio.ensure_future(km.start_kernel())
        waiting = None
        for _ in range(600):
            await asyncio.sleep(0.1)
            queued = [j for j in env.jobs(vc="research", state="queued") if "kernel" in j["labels"]]
            if queued and queued[0]["wait_reason"]:
                waiting = queued[0]
                break
        assert waiting is not None and not start.done()
        env.cancel(filler["id"])
        await asyncio.wait_for(start, 60)
        return waiting

    with caplog.at_level(logging.WARNING):     # the level Jupyter's tools show by default, not only INFO
        waiting = asyncio.run(scenario())
    try:
        assert waiting["queue_position"] == 0
        logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        line = f"hived: kernel job {waiting['id']} queued at position 1 in VC research: {waiting['wait_reason']}"
        assert logged.count(line) == 1                              # once per change, not once per poll
        assert any(f"kernel job {waiting['id']} started after" in m for m in logged)
        assert env.job(waiting["id"])["state"] == "running"
    finally:
        asyncio.run(km.shutdown_kernel())


def test_a_start_that_waits_past_start_timeout_fails_with_the_reason_and_leaves_no_job(env, kernel_prefix):
    subprocess.run([*HIVED, "kernelspec", "install", "--vc", "research", "--gpus", "2", "--name", "quick",
                    "--start-timeout", "2", "--prefix", str(kernel_prefix)], check=True, capture_output=True)
    te_filler(env)
    km = KernelManager(kernel_name="quick")
    with pytest.raises(KernelStartError) as err:
        km.start_kernel()
    message = str(err.value)
    assert "did not start within 2 s (start_timeout) and was cancelled at position 1 in VC research's queue: " \
        in message
    assert "waits for 2 GPUs (1 pod of 2 GPUs) in its VC" in message      # the job's wait reason
    kernels = [j for j in env.jobs(vc="research") if "kernel" in j["labels"]]
    assert kernels[-1]["id"] in message and kernels[-1]["state"] == "cancelled"
    assert not [j for j in kernels if j["state"] not in ("succeeded", "failed", "cancelled")]


def test_interrupt_and_restart_keep_the_job_and_its_gpus(env):
    km, kc = started()
    try:
        before = kernel_env(kc)
        run_cell(kc, "x = 41")
        kc.execute("import time; print('sleeping', flush=True); time.sleep(120)")
        wait_running(kc)
        km.interrupt_kernel()
        reply = kc.get_shell_msg(timeout=30)
        while reply["msg_type"] != "execute_reply" or reply["content"].get("status") != "error":
            reply = kc.get_shell_msg(timeout=30)
        assert reply["content"]["ename"] == "KeyboardInterrupt"
        assert run_after_error(kc, "print(x + 1)").strip() == "42"     # the same kernel, interrupted
        km.restart_kernel()
        kc.wait_for_ready(timeout=60)
        after = kernel_env(kc)
        assert after == before                                   # same job, same GPUs
        assert run_cell(kc, "print('x' in globals())").strip() == "False"   # a new kernel
        job = env.job(before["HIVED_JOB_ID"])
        assert job["state"] == "running" and job["attempts"] == 1 and job["preemptions"] == 0
    finally:
        kc.stop_channels()
        km.shutdown_kernel()


def run_after_error(kc, code: str) -> str:
    """A cell sent right after an error: ipykernel aborts what reaches it until its abort window
    closes (stop_on_error), as a person who clicks "run" at that instant sees; send it again."""
    for _ in range(50):
        try:
            return run_cell(kc, code)
        except AssertionError as refused:
            if "'status': 'aborted'" not in str(refused):
                raise
            time.sleep(0.1)
    raise AssertionError("every try was aborted")


def wait_running(kc, timeout=30):
    """Until the cell's own code runs. "busy" comes before ipykernel arms its SIGINT handler,
    so an interrupt sent on "busy" can be ignored, as a person's click at that instant would be."""
    while True:
        msg = kc.get_iopub_msg(timeout=timeout)
        if msg["msg_type"] == "stream" and "sleeping" in msg["content"]["text"]:
            return


def test_another_team_cannot_start_a_kernel_in_the_vc(env, monkeypatch):
    before = len(env.jobs(vc="research"))
    monkeypatch.setenv("HIVED_USER", "bob")      # a member of VC product only
    km = KernelManager(kernel_name="hived-research-2gpu")
    with pytest.raises(Exception) as err:
        km.start_kernel()
    assert "research" in str(err.value) and "not in its users" in str(err.value)
    monkeypatch.delenv("HIVED_USER")
    assert len(env.jobs(vc="research")) == before      # nothing was queued


def test_only_the_owner_or_an_admin_reports_activity_and_only_for_a_running_kernel(env, monkeypatch):
    from hived.service.client import HivedClient, HivedError
    plain = env.submit({"vc": "research", "gpus": 1, "command": [sys.executable, "-c", "pass"]})
    with pytest.raises(HivedError) as err:
        env.kernel_activity(plain["id"])
    assert err.value.status == 400 and "is not a kernel job (no 'kernel' label)" in err.value.line()
    km, kc = started()
    try:
        job_id = kernel_env(kc)["HIVED_JOB_ID"]
        answer = env.kernel_activity(job_id)
        assert answer["id"] == job_id and answer["release_at"] is None   # research sets no kernelIdleTimeout here
        with pytest.raises(HivedError) as err:
            HivedClient(user="bob").kernel_activity(job_id)
        assert err.value.status in (403, 404)
    finally:
        kc.stop_channels()
        km.shutdown_kernel()
    with pytest.raises(HivedError) as err:
        env.kernel_activity(job_id)
    assert err.value.status in (400, 409) and "not running" in err.value.line()
