"""Pods that never start: an unbound pod after a crash in binding mode, and the Pending timeout."""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))   # k8s_helpers (pytest runs with --import-mode=importlib)


from k8s_helpers import TEMPLATE, gang_placement, pods_of, request, vc_prefix, wait_events  # noqa: E402

from hived.core.failures import FailureClass, classify  # noqa: E402
from hived.core.jobs import Placement, PodGroup  # noqa: E402
from hived.k8s.launcher import EXIT_PENDING_TIMEOUT, KubernetesLauncher  # noqa: E402


def test_crash_between_create_and_bind_is_repaired_on_restart(hv):
    svc = hv.service(launcher_kw={"bind": "binding"})
    svc.launcher.raw.bind_pod = lambda *a, **k: b"{}"      # the process dies before each bind
    jid = svc.submit("alice", {"vc": "vca", "command": "sleep 1000", "job_class": "be", "pods": 2, "gpus": 2})["id"]
    hv.tick_until(svc, lambda: len(hv.pods(jid)) == 2)
    assert all(p.spec.node_name is None for p in hv.pods(jid))
    placement = svc.get_job(jid)["placement"]
    svc.close()

    svc2 = hv.service(launcher_kw={"bind": "binding"})
    assert any("not bound; bound them" in c for c in svc2.recovered["cluster"]["completed"])
    want = {f"hived-{jid}-a1-r{q['rank']}": q["node"] for q in placement["pods"]}
    assert {p.metadata.name: p.spec.node_name for p in hv.pods(jid)} == want
    hv.run_all(jid)
    hv.tick_until(svc2, lambda: svc2.get_job(jid)["state"] == "running")


def _one_pod():
    return request(groups=[PodGroup(1, 2)], grace_period=1.0), Placement("V100", gang_placement("a", "b").pods[:1])


def test_a_gang_pending_past_the_timeout_is_torn_down_and_reported(kube, core, ns, kubelet):
    lau = KubernetesLauncher(kube.kubeconfig, template=TEMPLATE, namespace_prefix=vc_prefix(ns), instance=ns,
                             watch_timeout=1, pending_timeout=1.0, teardown_margin=30).start()
    try:
        req, pl = _one_pod()
        lau.launch("j1", req, pl, attempt=1)
        t0 = time.monotonic()
        (pod,) = pods_of(core, ns)
        deadline = time.monotonic() + 10
        while pods_of(core, ns)[0].metadata.deletion_timestamp is None and time.monotonic() < deadline:
            assert [e for e in lau.poll() if e.kind == "exited"] == []
            time.sleep(0.1)
        assert time.monotonic() - t0 >= 0.9
        assert pods_of(core, ns)[0].metadata.deletion_timestamp is not None
        assert [e for e in lau.poll() if e.kind == "exited"] == []     # its cells wait for the pod to go
        kubelet.confirm_deletion(ns, pod.metadata.name)
        ev = wait_events(lau, lambda es: any(e.kind == "exited" for e in es))
        (ex,) = [e for e in ev if e.kind == "exited"]
        assert (ex.exit_code, ex.reason) == (EXIT_PENDING_TIMEOUT, "PendingTimeout")
        assert "not all running 1s after creation" in ex.log_tail
        assert classify(ex.exit_code, ex.log_tail).cls is FailureClass.INFRA      # retried with back-off
    finally:
        lau.stop()


def test_an_adopted_gang_that_never_started_times_out_too(kube, core, ns, kubelet):
    """After a restart, pods all Pending are not a running job for ever."""
    first = KubernetesLauncher(kube.kubeconfig, template=TEMPLATE, namespace_prefix=vc_prefix(ns), instance=ns,
                               watch_timeout=1)
    req, pl = _one_pod()
    first.launch("j1", req, pl, attempt=1)
    first.stop()
    lau = KubernetesLauncher(kube.kubeconfig, template=TEMPLATE, namespace_prefix=vc_prefix(ns), instance=ns,
                             watch_timeout=1, pending_timeout=1.0, teardown_margin=0.5).start()
    try:
        assert lau.adopt("j1", pl)
        ev = wait_events(lau, lambda es: any(e.kind == "exited" for e in es), timeout=15)
        assert [e.reason for e in ev if e.kind == "exited"] == ["PendingTimeout"]
    finally:
        lau.stop()
