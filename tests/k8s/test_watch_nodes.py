"""The pod watch across resourceVersion expiry, pod status -> state, and node health -> cells."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))   # k8s_helpers (pytest runs with --import-mode=importlib)

import time

import pytest

from hived.core.engine import Engine
from hived.core.jobs import DecisionKind, JobClass, JobRequest, Placement, PodGroup
from hived.k8s import pod_builder as pb
from hived.k8s.launcher import KubernetesLauncher
from hived.k8s.nodes import NodeHealth, node_healthy
from hived.k8s.watch import ListWatch, _Expired, pod_state, wait_for

from k8s_helpers import TEMPLATE, Kubelet, gang_placement, pods_of, request, spec_for, wait_events

POD = {"spec": {"containers": [{"name": "c", "image": "i"}]}}


def test_expired_version_relists_and_emits_only_the_difference(kube, core, ns):
    seen = []
    lw = ListWatch(lambda **k: core.list_namespaced_pod(ns, **k),
                   lambda kind, p: seen.append((kind, p["metadata"]["name"])), timeout_seconds=2)
    for i in range(3):
        core.create_namespaced_pod(ns, {"metadata": {"name": f"p{i}"}, **POD})
    lw.relist()
    old_rv = lw.resource_version
    assert sorted(seen) == [("ADDED", "p0"), ("ADDED", "p1"), ("ADDED", "p2")]
    seen.clear()
    # While hived is not watching: one pod goes, one changes, one comes; etcd compacts and the
    # API server restarts, so nothing remembers the events after old_rv.
    core.delete_namespaced_pod("p0", ns, grace_period_seconds=0)
    core.patch_namespaced_pod_status("p1", ns, {"status": {"phase": "Running"}})
    core.create_namespaced_pod(ns, {"metadata": {"name": "p9"}, **POD})
    kube.compact_etcd()
    kube.restart_apiserver()
    with pytest.raises(_Expired, match="too old resource version"):
        lw.watch_once()
    assert seen == []
    lw.relist()
    assert sorted(seen) == [("ADDED", "p9"), ("DELETED", "p0"), ("MODIFIED", "p1")], "p2 did not change"
    assert int(lw.resource_version) > int(old_rv) and lw.relists == 2
    assert {p["metadata"]["name"] for p in lw.snapshot()} == {"p1", "p2", "p9"}


def test_launcher_watch_recovers_from_expiry_without_losing_a_status(kube, core, ns, uid, kubelet):
    lau = KubernetesLauncher(kube.kubeconfig, template=TEMPLATE, namespace=ns, instance=uid,
                             watch_timeout=1).start()
    try:
        lau.launch("j1", request(groups=[PodGroup(2, 2)]),
                   Placement("V100", gang_placement("a", "b").pods[:2]), attempt=1)
        names = [p.metadata.name for p in pods_of(core, ns)]
        kubelet.run(ns, names[0])
        assert wait_for(lambda: lau.gang_states("j1").get(0) and lau.gang_states("j1")[0].state == "running")
        kube.stop_apiserver()          # the watch loses its server ...
        with kube.second_apiserver() as other:
            Kubelet(other).run(ns, names[1])   # ... a change goes through another one ...
        kube.compact_etcd()            # ... etcd forgets the history ...
        kube.start_apiserver()         # ... so the watch's resourceVersion is too old: 410, list again
        ev = wait_events(lau, lambda es: any(e.kind == "started" for e in es), timeout=15)
        assert [e.kind for e in ev] == ["started"]
        assert lau.watch.relists == 2, "the 410 made the watch list again"
        kubelet.exit(ns, names[0], 0)
        kubelet.exit(ns, names[1], 0)
        ev = wait_events(lau, lambda es: any(e.kind == "exited" for e in es), timeout=15)
        assert [(e.kind, e.exit_code) for e in ev] == [("exited", 0)]
    finally:
        lau.stop()


def _pod(phase="Pending", reason="", conditions=(), cs=None):
    st = {"phase": phase, "reason": reason, "conditions": list(conditions)}
    if cs:
        st["containerStatuses"] = [cs]
    return {"status": st}


@pytest.mark.parametrize("pod,state,code,reason", [
    (_pod("Running"), "running", None, ""),
    (_pod(cs={"state": {"waiting": {"reason": "ImagePullBackOff"}}}), "pending", None, "ImagePullBackOff"),
    (_pod("Succeeded"), "succeeded", 0, "Completed"),
    (_pod("Failed", cs={"state": {"terminated": {"exitCode": 2, "reason": "Error"}}}), "failed", 2, "Error"),
    (_pod("Failed", cs={"state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}), "oom_killed", 137,
     "OOMKilled"),
    (_pod("Running", cs={"lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}), "oom_killed",
     137, "OOMKilled"),
    (_pod("Failed", "Evicted"), "evicted", 143, "Evicted"),
    (_pod("Running", conditions=[{"type": "DisruptionTarget", "status": "True",
                                  "reason": "EvictionByEvictionAPI"}]), "evicted", 143, "EvictionByEvictionAPI"),
    (_pod("Running", conditions=[{"type": "DisruptionTarget", "status": "True",
                                  "reason": "DeletionByTaintManager"}]), "node_lost", 255, "DeletionByTaintManager"),
    (_pod("Unknown"), "node_lost", 255, "Unknown"),
    (_pod("Failed", "NodeLost"), "node_lost", 255, "NodeLost"),
])
def test_pod_status_to_state(pod, state, code, reason):
    s = pod_state(pod)
    assert (s.state, s.exit_code, s.reason) == (state, code, reason)


def test_deleted_running_pod_is_deleted_not_running():
    s = pod_state(_pod("Running"), deleted=True)
    assert s.state == "deleted" and s.terminal


@pytest.mark.parametrize("node,ok", [
    ({"spec": {}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}, True),
    ({"spec": {"unschedulable": True}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}, False),
    ({"spec": {}, "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}, False),
    ({"spec": {}, "status": {"conditions": [{"type": "MemoryPressure", "status": "False"}]}}, False),
    (None, False),
])
def test_bad_node_rule(node, ok):
    assert node_healthy(node) is ok


def _drain(nh, want, timeout=10.0):
    got = []
    assert wait_for(lambda: got.extend(nh.poll()) or want(got), timeout), f"health changes seen: {got}"
    return got


def test_not_ready_and_cordoned_nodes_mark_their_cells_unhealthy(kube, core, uid, nodes):
    n0, n1, n2 = f"{uid}-n0", f"{uid}-n1", f"{uid}-n2"
    nodes.add(n0), nodes.add(n1)              # n2 is in the spec but not in the cluster
    eng = Engine(spec_for(uid, nodes=3, vcs=(("vca", "T-NODE", 2),)))
    nh = NodeHealth(core, [n0, n1, n2], timeout_seconds=1).start()
    try:
        first = nh.poll()
        assert sorted((n, ok) for n, _, ok, _ in first) == [(n0, True), (n1, True), (n2, False)]
        assert dict((n, r) for n, _, _, r in first)[n2] == "no Node object"
        for node, gpu, ok, _ in first:
            eng.set_health(node, gpu, ok, 0.0)
        tree = eng.alloc.tree
        assert (tree.nodes[n0].bad, tree.nodes[n1].bad, tree.nodes[n2].bad) == (0, 0, 8)

        # a running 8-GPU job; its node goes NotReady: its cells go bad and the job is moved
        jid = eng.submit(JobRequest(user="alice", vc="vca", job_class=JobClass.BE, groups=[PodGroup(1, 8)]), 1.0)
        (start,) = eng.step(1.0)
        node = start.placement.pods[0].node
        other = n1 if node == n0 else n0
        eng.on_started(jid, 1.0)
        nodes.set_ready(node, False)
        got = _drain(nh, lambda g: any(n == node for n, *_ in g))
        assert got == [(node, None, False, "Ready=False (KubeletNotReady)")]
        decisions = eng.set_health(node, None, False, 2.0)
        assert tree.nodes[node].bad == 8
        assert [(d.kind, d.job_id) for d in decisions] and all(d.job_id == jid for d in decisions)
        assert decisions[0].kind in (DecisionKind.PREEMPT, DecisionKind.KILL)

        # cordon the other node too: both bad
        nodes.cordon(other)
        got = _drain(nh, lambda g: any(n == other for n, *_ in g))
        assert got == [(other, None, False, "cordoned (spec.unschedulable)")]
        eng.set_health(other, None, False, 3.0)
        assert tree.nodes[other].bad == 8
        # uncordon + Ready again: healthy, and a new job can be placed there
        nodes.cordon(other, False)
        nodes.set_ready(node, True)
        got = _drain(nh, lambda g: len(g) >= 2)
        assert sorted(got) == sorted([(other, None, True, ""), (node, None, True, "")])
        for n, g, ok, _ in got:
            eng.set_health(n, g, ok, 4.0)
        assert tree.nodes[node].bad == tree.nodes[other].bad == 0
        # a deleted Node object is unhealthy as well
        nodes.delete(other)
        got = _drain(nh, lambda g: any(n == other for n, *_ in g))
        assert got == [(other, None, False, "no Node object")]
        assert nh.unhealthy() == {n2: "no Node object", other: "no Node object"}
    finally:
        nh.stop()


def test_node_health_ignores_nodes_outside_the_spec(core, uid, nodes):
    nodes.add(f"{uid}-other")
    nh = NodeHealth(core, [f"{uid}-n0"], timeout_seconds=1).start()
    try:
        nodes.set_ready(f"{uid}-other", False)
        time.sleep(0.3)
        assert [n for n, *_ in nh.poll()] == [f"{uid}-n0"]    # only the spec's node (missing: unhealthy)
    finally:
        nh.stop()


def test_owned_pods_are_selected_by_instance(kube, core, ns, uid):
    a = KubernetesLauncher(kube.kubeconfig, template=TEMPLATE, namespace=ns, instance=f"{uid}a", watch_timeout=1)
    b = KubernetesLauncher(kube.kubeconfig, template=TEMPLATE, namespace=ns, instance=f"{uid}b", watch_timeout=1)
    try:
        a.launch("j1", request(), gang_placement("x", "y"), attempt=1)
        assert wait_for(lambda: len(a.owned_pods()) == 4)
        assert len(a.owned_pods(fresh=True)) == 4 and b.owned_pods() == [] and b.owned_pods(fresh=True) == []
        assert {p["metadata"]["labels"][pb.L_INSTANCE] for p in a.owned_pods()} == {f"{uid}a"}
    finally:
        a.stop(), b.stop()
