"""The pod watch across resourceVersion expiry, pod status -> state, and node health -> cells."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))   # k8s_helpers (pytest runs with --import-mode=importlib)

import time

import pytest
from k8s_helpers import TEMPLATE, Kubelet, gang_placement, pods_of, request, spec_for, vc_prefix, wait_events

from hived.core.engine import Engine
from hived.core.jobs import Placement, PodGroup
from hived.k8s import pod_builder as pb
from hived.k8s.launcher import KubernetesLauncher
from hived.k8s.nodes import NodeHealth, node_healthy
from hived.k8s.watch import ListWatch, _Expired, pod_state, wait_for

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
    lau = KubernetesLauncher(kube.kubeconfig, template=TEMPLATE, namespace_prefix=vc_prefix(ns), instance=uid,
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


def _drain(nh, want, timeout=10.0, states=False):
    got = []
    poll = nh.poll_states if states else nh.poll
    assert wait_for(lambda: got.extend(poll()) or want(got), timeout), f"health changes seen: {got}"
    return got


class _Clock:
    """The toleration's clock, moved by the test (no sleeping through a toleration)."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_cordon_holds_notready_past_toleration_is_lost(kube, core, uid, nodes):
    n0, n1, n2 = f"{uid}-n0", f"{uid}-n1", f"{uid}-n2"
    nodes.add(n0), nodes.add(n1)              # n2 is in the spec but not in the cluster
    clock = _Clock()
    nh = NodeHealth(core, [n0, n1, n2], timeout_seconds=1, notready_toleration=60, clock=clock).start()
    try:
        first = {n: (s, r) for n, s, r in nh.poll_states()}
        assert first[n0][0] == first[n1][0] == "ok"
        assert first[n2] == ("cordoned", "no Node object (within its 60s toleration)")
        # kubectl cordon: no new pods there, the node is not lost
        nodes.cordon(n0)
        assert _drain(nh, lambda g: g, states=True) == [(n0, "cordoned", "cordoned (spec.unschedulable)")]
        # NotReady: held (cordoned) inside the toleration ...
        nodes.set_ready(n1, False)
        assert _drain(nh, lambda g: g, states=True) == [
            (n1, "cordoned", "Ready=False (KubeletNotReady) (within its 60s toleration)")]
        clock.t = 59.0
        assert nh.poll_states() == []
        # ... lost past it (no event needed: the time alone decides), n2 too
        clock.t = 61.0
        assert sorted(nh.poll_states()) == [(n1, "lost", "Ready=False (KubeletNotReady) for more than 60s"),
                                            (n2, "lost", "no Node object for more than 60s")]
        # Ready again: back to ok, the toleration starts afresh next time
        nodes.set_ready(n1, True)
        nodes.cordon(n0, False)
        got = _drain(nh, lambda g: len(g) >= 2, states=True)
        assert sorted(got) == [(n0, "ok", ""), (n1, "ok", "")]
        nodes.set_ready(n1, False)
        assert _drain(nh, lambda g: g, states=True)[0][1] == "cordoned"
        assert nh.unhealthy() == {n1: "Ready=False (KubeletNotReady) (within its 60s toleration)",
                                  n2: "no Node object for more than 60s"}
    finally:
        nh.stop()


def test_generic_poll_reports_only_lost_nodes_as_unhealthy(kube, core, uid, nodes):
    """A plain SchedulerService moves the jobs of an unhealthy node: a cordon must not say unhealthy."""
    n0 = f"{uid}-n0"
    nodes.add(n0)
    clock = _Clock()
    nh = NodeHealth(core, [n0], timeout_seconds=1, notready_toleration=5, clock=clock).start()
    try:
        assert nh.poll() == [(n0, None, True, "")]
        nodes.cordon(n0)
        time.sleep(0.5)
        assert nh.poll() == []
        nodes.set_ready(n0, False)
        time.sleep(0.5)
        assert nh.poll() == []
        clock.t = 10.0
        assert nh.poll() == [(n0, None, False, "Ready=False (KubeletNotReady) for more than 5s")]
        # moving lost nodes' jobs is still the engine's: its cells go bad
        eng = Engine(spec_for(uid, nodes=1, vcs=(("vca", "T-NODE", 1),)))
        eng.set_health(n0, None, False, 0.0)
        assert eng.alloc.tree.nodes[n0].bad_gpus == 8
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
    a = KubernetesLauncher(kube.kubeconfig, template=TEMPLATE, namespace_prefix=vc_prefix(ns), instance=f"{uid}a",
                           watch_timeout=1)
    b = KubernetesLauncher(kube.kubeconfig, template=TEMPLATE, namespace_prefix=vc_prefix(ns), instance=f"{uid}b",
                           watch_timeout=1)
    try:
        a.launch("j1", request(), gang_placement("x", "y"), attempt=1)
        assert wait_for(lambda: len(a.owned_pods()) == 4)
        assert len(a.owned_pods(fresh=True)) == 4 and b.owned_pods() == [] and b.owned_pods(fresh=True) == []
        assert {p["metadata"]["labels"][pb.L_INSTANCE] for p in a.owned_pods()} == {f"{uid}a"}
    finally:
        a.stop(), b.stop()
