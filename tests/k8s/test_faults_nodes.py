"""Node faults as Kubernetes means them: a cordon stops new gangs only; NotReady past a toleration moves gangs."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))   # k8s_helpers (pytest runs with --import-mode=importlib)

import pytest  # noqa: E402
from k8s_helpers import Harness  # noqa: E402

from hived.k8s.nodes import NodeHealth  # noqa: E402

ONE_VC = (("vca", "T-NODE", 2),)


class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


@pytest.fixture
def hv(kube, core, ns, uid, nodes, kubelet, tmp_path):
    h = Harness(kube, core, ns, uid, nodes, kubelet, tmp_path)
    h.nodes = nodes
    yield h
    h.close_all()


def _service(hv, clock, toleration=30.0):
    nh = NodeHealth(hv.core, [f"{hv.uid}-n0", f"{hv.uid}-n1"], timeout_seconds=1,
                    notready_toleration=toleration, clock=clock)
    svc = hv.service(hv.spec(vcs=ONE_VC), health=nh)
    nh.start()
    return svc


def _node_of(svc, jid):
    return svc.get_job(jid)["placement"]["pods"][0]["node"]


def _still_running(hv, svc, jid, ticks=10):
    for _ in range(ticks):
        svc.tick()
    assert svc.get_job(jid)["state"] == "running"
    assert all(p.metadata.deletion_timestamp is None for p in hv.pods(jid))


def test_cordon_keeps_the_running_gang_and_places_nothing_new_there(hv):
    clock = _Clock()
    svc = _service(hv, clock)
    (a,) = hv.start_jobs(svc, {"vc": "vca", "command": "sleep 1000", "job_class": "be", "pods": 2, "gpus": 2})
    node = _node_of(svc, a)
    other = next(n for n in (f"{hv.uid}-n0", f"{hv.uid}-n1") if n != node)
    hv.nodes.cordon(node)
    hv.tick_until(svc, lambda: any(u["node"] == node for u in svc.status()["unhealthy"]))
    assert [u["reason"] for u in svc.status()["unhealthy"]] == ["cordoned (spec.unschedulable)"]
    _still_running(hv, svc, a)                      # a cordon is not an eviction
    # a new gang goes elsewhere, although packing would put it beside the first
    b = svc.submit("alice", {"vc": "vca", "command": "sleep 1", "job_class": "be", "pods": 1, "gpus": 2})["id"]
    hv.tick_until(svc, lambda: svc.get_job(b)["state"] in ("placed", "running"))
    assert _node_of(svc, b) == other
    # uncordoned: the node takes gangs again
    hv.nodes.cordon(node, False)
    hv.tick_until(svc, lambda: svc.status()["unhealthy"] == [])
    # two 4-GPU gangs: the only free sockets are one per node, so one of them must go to the node
    cd = [svc.submit("alice", {"vc": "vca", "command": "sleep 1", "job_class": "be", "pods": 1, "gpus": 4})["id"]
          for _ in range(2)]
    hv.tick_until(svc, lambda: all(svc.get_job(j)["state"] in ("placed", "running") for j in cd))
    assert node in {_node_of(svc, j) for j in cd}
    _still_running(hv, svc, a, ticks=2)


def test_not_ready_moves_the_gang_only_after_the_toleration(hv):
    clock = _Clock()
    svc = _service(hv, clock, toleration=30.0)
    (a,) = hv.start_jobs(svc, {"vc": "vca", "command": "sleep 1000", "job_class": "be", "pods": 2, "gpus": 2,
                               "grace_period": 5})
    node = _node_of(svc, a)
    hv.nodes.set_ready(node, False)
    hv.tick_until(svc, lambda: any(u["node"] == node for u in svc.status()["unhealthy"]))
    clock.t = 29.0
    _still_running(hv, svc, a)                      # a kubelet that missed heartbeats: the gang stays
    clock.t = 31.0
    hv.tick_until(svc, lambda: svc.get_job(a)["state"] != "running")
    assert svc.get_job(a)["state"] in ("preempting", "queued")
    assert "for more than 30s" in svc.status()["unhealthy"][0]["reason"]
    assert svc.launcher.flush()
    assert all(p.metadata.deletion_timestamp is not None for p in hv.pods(a))


def _allocatable(core, name, cpu, memory="512Gi"):
    core.patch_node_status(name, {"status": {"allocatable": {"cpu": cpu, "memory": memory,
                                                             "nvidia.com/gpu": "8", "pods": "110"}}})


def test_placement_respects_node_allocatable(hv):
    """The spec says 64 CPUs a node; the kubelets admit pods for 8 (a real kubelet rejects OutOfcpu)."""
    n0, n1 = f"{hv.uid}-n0", f"{hv.uid}-n1"
    for n in (n0, n1):
        _allocatable(hv.core, n, "8")
    svc = _service(hv, _Clock())
    job = svc.submit("alice", {"vc": "vca", "command": "sleep 1", "job_class": "be", "pods": 1, "gpus": 2,
                               "cpus": 16})["id"]
    for _ in range(10):
        svc.tick()
    assert svc.get_job(job)["state"] == "queued"
    _allocatable(hv.core, n1, "64000m")            # n1's kubelet admits more now
    hv.tick_until(svc, lambda: svc.get_job(job)["state"] in ("placed", "running"))
    assert _node_of(svc, job) == n1
    # memory counts too: 20 GiB allocatable leaves no room for a 64 GB pod
    for n in (n0, n1):
        _allocatable(hv.core, n, "64", "20Gi")
    big = svc.submit("alice", {"vc": "vca", "command": "sleep 1", "job_class": "be", "pods": 1, "gpus": 2,
                               "cpus": 1, "memory_gb": 64})["id"]
    for _ in range(10):
        svc.tick()
    assert svc.get_job(big)["state"] == "queued"
    _allocatable(hv.core, n0, "64", "100Gi")
    hv.tick_until(svc, lambda: svc.get_job(big)["state"] in ("placed", "running"))
    assert _node_of(svc, big) == n0
