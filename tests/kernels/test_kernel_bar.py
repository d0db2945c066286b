"""The issue's bar: a kernel of VC research with 2 GPUs, started through jupyter_client
against a real `hived serve`, preempts the BE job filling the VC, sees its GPUs and job id,
is the user's running TE job; shutting it down ends the job and the BE job runs again."""
from __future__ import annotations

from jupyter_client.manager import KernelManager

from .conftest import fill_vc, kernel_env, wait_state


def test_a_hived_kernel_is_a_te_job_that_preempts_be_and_gives_the_gpus_back(env):
    client = env
    be = fill_vc(client)
    km = KernelManager(kernel_name="hived-research-2gpu")
    km.start_kernel()
    try:
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=60)
        seen = kernel_env(kc)
        assert len(seen["CUDA_VISIBLE_DEVICES"].split(",")) == 2
        job = client.job(seen["HIVED_JOB_ID"])
        assert job["state"] == "running" and job["job_class"] == "te" and job["vc"] == "research"
        assert job["gpus"] == 2
        assert job["labels"]["kernel"] == km.kernel_id
        me = client.status()["user"]
        running = client.jobs(user=me, state="running")
        assert seen["HIVED_JOB_ID"] in [j["id"] for j in running if j["job_class"] == "te"]
        be_now = client.job(be["id"])
        assert be_now["state"] == "queued" and be_now["preemptions"] == 1
        kc.stop_channels()
    finally:
        km.shutdown_kernel()
    assert client.job(seen["HIVED_JOB_ID"])["state"] == "cancelled"
    wait_state(client, be["id"], "running")
