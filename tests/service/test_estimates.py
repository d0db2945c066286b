"""The estimate shown beside a job: in a FIFO VC, nothing until the job says how far it is,
then what the estimator learns from its progress; ended jobs show none."""
import time
from pathlib import Path

import pytest

from hived.service.scheduler import SchedulerService

SPEC = Path(__file__).with_name("spec_small.yaml")


@pytest.fixture
def svc(tmp_path):
    t = [1000.0]
    s = SchedulerService(str(SPEC), tmp_path / "data", tick_seconds=0.05, scheme="hived", clock=lambda: t[0])
    s.t = t
    yield s
    s.stop(cancel_jobs=True, timeout=5)
    s.close()


def test_a_fifo_job_without_an_estimate_shows_what_its_progress_teaches(svc):
    job = svc.submit("bob", {"vc": "vcb", "command": "sleep 60", "gpus": 4})["id"]
    assert svc.get_job(job)["estimate"] is None and svc.get_job(job)["estimated"] is None
    deadline = time.time() + 15
    while svc.get_job(job)["state"] != "running":
        assert time.time() < deadline, svc.get_job(job)
        svc.tick()
        time.sleep(0.05)
    svc.t[0] += 100
    svc.report_progress(job, 25, 100)                 # a quarter done after 100 s
    est = svc.get_job(job)["estimated"]
    assert est["source"] == "progress" and est["value"] == pytest.approx(400, rel=0.05)
    assert [j["estimated"]["source"] for j in svc.list_jobs(vc="vcb")] == ["progress"]
    svc.cancel(job, "bob")
    deadline = time.time() + 15
    while svc.get_job(job)["state"] != "cancelled":
        assert time.time() < deadline
        svc.tick()
        time.sleep(0.05)
    assert svc.get_job(job)["estimated"] is None
