"""What hived says about a gang is what the cluster shows: running only when every pod runs, a launch
refused before any pod existed is no start (round 2, finding 7)."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))   # k8s_helpers (pytest runs with --import-mode=importlib)

import json  # noqa: E402
import sqlite3  # noqa: E402

import pytest  # noqa: E402

JOB = {"vc": "vca", "command": "sleep 1000", "job_class": "be", "pods": 2, "gpus": 2}


def _launched(hv, svc, jid, n=2):
    hv.tick_until(svc, lambda: len(hv.pods(jid)) == n)
    assert svc.launcher.flush()


@pytest.mark.parametrize("journal", ["kept", "lost"])
def test_an_adopted_gang_whose_pods_are_pending_is_starting_not_running(hv, journal):
    svc = hv.service()
    jid = svc.submit("alice", dict(JOB))["id"]
    _launched(hv, svc, jid)
    assert svc.get_job(jid)["state"] == "placed"          # no pod Running yet
    svc.close()
    if journal == "lost":
        (hv.data / "hived.db").unlink()
        for extra in hv.data.glob("hived.db-*"):
            extra.unlink()

    svc2 = hv.service()
    assert jid in svc2.recovered["adopted"]
    for _ in range(3):
        svc2.tick()
    job = svc2.get_job(jid)
    assert job["state"] == "placed" and job["started"] is None, job["history"]
    assert "starting" in job["reason"], job
    from hived.jupyter_ext.widgets_job import status_facts
    assert any(f.startswith("starting: 0 of 2 pods Running") for f in status_facts(job)), status_facts(job)
    assert not any(h["reason"] == "started" for h in job["history"])
    hv.kubelet.run(hv.vca, hv.pods(jid)[0].metadata.name)   # one of two: still starting
    for _ in range(3):
        svc2.tick()
    assert svc2.get_job(jid)["state"] == "placed"
    hv.run_all(jid)                                          # every member Running: now it runs
    hv.tick_until(svc2, lambda: svc2.get_job(jid)["state"] == "running")
    job = svc2.get_job(jid)
    assert job["attempts"] == 1 and job["started"] is not None


def test_a_launch_refused_before_any_pod_is_an_infrastructure_failure_without_a_start(hv, core):
    """The VC's namespace does not exist: nothing ran, so no `running: started` entry, and the
    failure is the cluster's (retried after a back-off), naming the namespace and the command."""
    svc = hv.service()
    jid = svc.submit("bob", {"vc": "vcb", "command": "x", "gpus": 2, "max_retries": 0})["id"]
    core.delete_namespace(hv.vc_namespaces["vcb"])           # the admin never applied it (or removed it)
    hv.tick_until(svc, lambda: svc.get_job(jid)["failure_class"] is not None)
    job = svc.get_job(jid)
    ns = hv.vc_namespaces["vcb"]
    assert job["failure_class"] == "infrastructure", job
    assert f"namespace '{ns}' does not exist" in job["last_error"]
    assert "python -m hived.k8s.policy SPEC POLICY | kubectl apply -f -" in job["last_error"]
    assert f"namespace '{ns}' does not exist" in job["reason"], job["reason"]
    assert not any(h["state"] == "running" for h in job["history"]), job["history"]
    assert job["started"] is None
    assert hv.pods(jid) == []
    db = sqlite3.connect(hv.data / "hived.db")
    (rec,) = db.execute("SELECT record FROM jobs WHERE job_id=?", (jid,)).fetchone()
    assert not any(h[1] == "running" for h in json.loads(rec)["history"])
