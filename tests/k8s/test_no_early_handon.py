"""No GPU is handed on while the previous pod may still run on it (round 2, finding 4): on a Ready
node the cells wait for the pod to be gone, however long; only a node that is NotReady or gone has
its lingering pods force-deleted, with an Event."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))   # k8s_helpers (pytest runs with --import-mode=importlib)

JOB = {"vc": "vca", "command": "sleep 1000", "job_class": "be", "pods": 1, "gpus": 8, "grace_period": 1}


def events(core, ns, reason):
    return [e for e in core.list_namespaced_event(ns).items if e.reason == reason]


def test_a_pod_terminating_on_a_ready_node_keeps_its_gpus(hv, core):
    svc = hv.service(launcher_kw={"teardown_margin": 0.5})
    (a,) = hv.start_jobs(svc, JOB)
    (old,) = hv.pods(a)
    node = old.spec.node_name
    svc.cancel(a, "alice")                   # the pod stays Terminating: a hung GPU process
    b = svc.submit("alice", dict(JOB))["id"]
    # past grace period + margin, the old pod still exists on a Ready node: a's GPUs stay held
    hv.tick_until(svc, lambda: svc.get_job(a)["reason"].startswith("terminating (stuck)"))
    assert node in svc.get_job(a)["reason"]
    from hived.jupyter_ext.widgets_job import status_facts
    assert any("terminating (stuck)" in f for f in status_facts(svc.get_job(a)))     # the dashboards too
    assert any(j["reason"].startswith("terminating (stuck)") for j in svc.list_jobs() if j["id"] == a)
    for _ in range(20):
        svc.tick()
    assert svc.launcher.flush()
    assert hv.pods(b) == [], "b's pod was bound while a's pod still runs on a Ready node"
    assert svc.get_job(b)["state"] in ("queued", "placed") and svc.get_job(a)["state"] == "preempting"
    assert core.read_namespaced_pod(old.metadata.name, hv.vca).metadata.deletion_timestamp is not None
    assert svc.launcher.events.flush() and events(core, hv.vca, "TerminationStuck")
    assert not events(core, hv.vca, "ForceDeleted")        # never under a kubelet that may still run it
    hv.kubelet.confirm_deletion(hv.vca, old.metadata.name)   # the process finally exits
    hv.tick_until(svc, lambda: len(hv.pods(b)) == 1)
    assert svc.get_job(a)["state"] == "cancelled"


def test_a_pod_lingering_on_a_notready_node_is_force_deleted_with_an_event(hv, core, nodes):
    svc = hv.service(launcher_kw={"teardown_margin": 0.5})
    (a,) = hv.start_jobs(svc, JOB)
    (old,) = hv.pods(a)
    nodes.set_ready(old.spec.node_name, False)       # its kubelet stops answering
    svc.cancel(a, "alice")
    hv.tick_until(svc, lambda: svc.get_job(a)["state"] == "cancelled", timeout=20)
    assert hv.pods(a) == []                          # force-deleted: the API object is gone
    assert svc.launcher.events.flush()
    (ev,) = events(core, hv.vca, "ForceDeleted")
    assert ev.involved_object.name == old.metadata.name and "NotReady" in ev.message
