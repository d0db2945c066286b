"""KubernetesLauncher with pipeline=True (what the service runs): launch and terminate return at
once, one sender thread makes the API calls in order, refusals come back as events."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))   # k8s_helpers (pytest runs with --import-mode=importlib)

import threading

import pytest
from k8s_helpers import TEMPLATE, gang_placement, pods_of, request, vc_prefix, wait_events

from hived.core.jobs import Placement, PodGroup
from hived.k8s import pod_builder as pb
from hived.k8s.launcher import EXIT_LAUNCH_REFUSED, KubernetesLauncher
from hived.k8s.template import TemplateError


@pytest.fixture
def piped(kube, ns, uid):
    lau = KubernetesLauncher(kube.kubeconfig, template=TEMPLATE, namespace_prefix=vc_prefix(ns), instance=uid,
                             watch_timeout=2, pipeline=True).start()
    yield lau
    lau.stop()


def hold_sender(lau):
    """Block the sender thread until the returned event is set (queue a call that waits)."""
    gate, busy = threading.Event(), threading.Event()

    def wait():
        busy.set()
        gate.wait(10)
    lau._submit(wait)
    assert busy.wait(5)
    return gate


def test_launch_returns_before_the_pods_exist_and_creates_them_in_order(piped, core, ns):
    gate = hold_sender(piped)
    piped.launch("j1", request(), gang_placement("a", "b"), attempt=1)
    piped.launch("j2", request(groups=[PodGroup(1, 2)]), Placement("V100", gang_placement("a", "b").pods[:1]),
                 attempt=1)
    assert core.list_namespaced_pod(ns).items == [], "created before the sender's turn"
    gate.set()
    assert piped.flush(10)
    assert [p.spec.node_name for p in pods_of(core, ns)] == ["a", "a", "b", "b"]
    assert [p.metadata.name for p in pods_of(core, ns, "j2")] == [pb.pod_name("j2", 1, 0)]
    assert piped.poll() == []


def test_invalid_template_is_still_refused_synchronously(piped, core, ns):
    req = request()
    req.k8s_template = {"volumes": [{"name": "d", "hostPth": {"path": "/"}}]}
    with pytest.raises(TemplateError, match="hostPth"):
        piped.launch("j1", req, gang_placement("a", "b"), attempt=1)
    assert piped.flush(5) and core.list_namespaced_pod(ns).items == []


def test_refused_gang_becomes_an_exited_event_and_leaves_no_half_gang(piped, core, ns):
    taken = pb.pod_name("j1", 1, 2)
    core.create_namespaced_pod(ns, {"metadata": {"name": taken},
                                    "spec": {"containers": [{"name": "c", "image": "x"}]}})
    piped.launch("j1", request(), gang_placement("a", "b"), attempt=1)
    # the next job is not held up by the refusal
    piped.launch("j2", request(groups=[PodGroup(1, 2)]), Placement("V100", gang_placement("c", "d").pods[:1]),
                 attempt=1)
    ev = wait_events(piped, lambda es: any(e.kind == "exited" for e in es))
    ex = [e for e in ev if e.kind == "exited"]
    assert [(e.job_id, e.exit_code, e.reason) for e in ex] == [("j1", EXIT_LAUNCH_REFUSED, "LaunchRefused")]
    assert "409" in ex[0].log_tail and "launch failed" in ex[0].log_tail
    assert piped.flush(5)
    names = sorted(p.metadata.name for p in core.list_namespaced_pod(ns).items)
    assert names == sorted([taken, pb.pod_name("j2", 1, 0)]), f"half gang left behind: {names}"


def test_terminate_before_the_create_ran_creates_nothing(piped, core, ns):
    gate = hold_sender(piped)
    piped.launch("j1", request(), gang_placement("a", "b"), attempt=1)
    piped.terminate("j1", 30)
    gate.set()
    ev = wait_events(piped, lambda es: any(e.kind == "exited" for e in es))
    ex = [e for e in ev if e.kind == "exited"]
    assert len(ex) == 1 and ex[0].exit_code == 143 and "before its pods were created" in ex[0].log_tail
    assert piped.flush(5) and core.list_namespaced_pod(ns).items == []


def test_terminate_after_the_create_deletes_with_the_grace_period(piped, core, ns, kubelet):
    piped.launch("j1", request(), gang_placement("a", "b"), attempt=1)
    assert piped.flush(10)
    piped.terminate("j1", 45)
    assert piped.flush(10)
    pods = pods_of(core, ns)
    assert len(pods) == 4
    assert all(p.metadata.deletion_grace_period_seconds == 45 for p in pods)
    for p in pods:
        kubelet.confirm_deletion(ns, p.metadata.name)
    ev = wait_events(piped, lambda es: any(e.kind == "exited" for e in es))
    assert [e.exit_code for e in ev if e.kind == "exited"] == [143]


def test_stop_makes_every_queued_call_first(kube, core, ns, uid):
    lau = KubernetesLauncher(kube.kubeconfig, template=TEMPLATE, namespace_prefix=vc_prefix(ns), instance=uid,
                             watch_timeout=2, pipeline=True).start()
    for i in range(5):
        lau.launch(f"j{i}", request(groups=[PodGroup(1, 2)]), Placement("V100", gang_placement("a", "b").pods[:1]),
                   attempt=1)
    lau.stop()
    assert len(core.list_namespaced_pod(ns).items) == 5
