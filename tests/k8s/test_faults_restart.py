"""Restarts in the middle of a fault: nothing is counted twice, nothing is left half done."""
from __future__ import annotations

import pytest  # noqa: E402

JOB = {"vc": "vca", "command": "sleep 1000", "job_class": "be", "pods": 2, "gpus": 2, "max_retries": 3,
       "grace_period": 1}


@pytest.mark.parametrize("leftover", ["failed pod", "failed pod and a member on the lost node"])
def test_restart_during_retry_backoff_counts_the_failure_once(hv, leftover, nodes):
    svc = hv.service(launcher_kw={"teardown_margin": 0.5})
    (jid,) = hv.start_jobs(svc, JOB)
    p0, p1 = [p.metadata.name for p in hv.pods(jid)]
    hv.kubelet.node_lost(hv.vca, p0)            # an infrastructure failure: retried after a back-off
    assert svc.launcher.flush()
    if leftover == "failed pod":
        hv.kubelet.confirm_deletion(hv.vca, p1)  # the sibling is gone; the failed pod stays listed
    else:       # the node is lost for good: nothing confirms the sibling's end; hived force-deletes it
        nodes.set_ready(hv.pods(jid)[1].spec.node_name, False)
    hv.tick_until(svc, lambda: svc.get_job(jid)["state"] == "queued")
    before = svc.get_job(jid)
    assert before["attempts"] == 1 and svc.eng.job(jid).failures == 1
    assert svc.eng.job(jid).not_before > svc.clock()       # in its back-off
    svc.close()

    svc2 = hv.service()
    job = svc2.get_job(jid)
    assert job["state"] == "queued", job["history"][-3:]
    assert svc2.eng.job(jid).failures == 1 and job["attempts"] == 1
    assert jid not in svc2.recovered["adopted"]
    for _ in range(5):
        svc2.tick()
    job = svc2.get_job(jid)
    assert job["state"] == "queued" and svc2.eng.job(jid).failures == 1, job["history"][-3:]
    # what is left of the failed attempt is deleted, not adopted
    assert svc2.launcher.flush()
    assert all(p.metadata.deletion_timestamp is not None or p.status.phase == "Failed" for p in hv.pods(jid))


def test_gpus_of_a_gang_ended_by_a_spec_change_wait_for_its_pods(hv):
    """vcb leaves the spec: its gang is ended and deleted, but the next job gets its GPUs only when
    the pods are confirmed gone (not while they stop through their grace period)."""
    svc = hv.service()
    (b,) = hv.start_jobs(svc, {"vc": "vcb", "command": "sleep 1000", "job_class": "be", "pods": 1, "gpus": 2,
                               "grace_period": 45}, users=("bob",))
    node = svc.get_job(b)["placement"]["pods"][0]["node"]
    svc.close()

    svc2 = hv.service(hv.spec("spec2.yaml", vcs=(("vca", "T-NODE", 2),)))   # vcb is gone
    assert any(b in e for e in svc2.recovered["cluster"]["ended"])
    (pod,) = hv.pods(b)
    assert pod.metadata.deletion_timestamp is not None                       # stopping, 45 s grace
    big = svc2.submit("alice", {"vc": "vca", "command": "sleep 1", "job_class": "be", "pods": 2, "gpus": 8,
                                "affinity": "soft"})["id"]
    for _ in range(10):
        svc2.tick()
    assert svc2.get_job(big)["state"] == "queued"         # both nodes whole: one still has b's pod on it
    assert {(u["node"], u["reason"]) for u in svc2.status()["unhealthy"]} == {
        (node, f"pods of ended job {b} still stopping")}
    hv.kubelet.confirm_deletion(pod.metadata.namespace, pod.metadata.name)
    hv.tick_until(svc2, lambda: svc2.get_job(big)["state"] in ("placed", "running"), timeout=15)
    assert svc2.status()["unhealthy"] == []
