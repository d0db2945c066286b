"""API-server outages in the middle of a gang: retried, never a half gang, never a stuck job.

The session's API server is stopped and started again on the same port and etcd (``kube``)."""
from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))   # k8s_helpers (pytest runs with --import-mode=importlib)

import pytest  # noqa: E402
from k8s_helpers import TEMPLATE, gang_placement, pods_of, request, vc_prefix, wait_events  # noqa: E402

from hived.core.failures import FailureClass, classify  # noqa: E402
from hived.core.jobs import PodGroup  # noqa: E402
from hived.k8s.launcher import KubernetesLauncher  # noqa: E402
from hived.k8s.watch import wait_for  # noqa: E402

GANG3 = dict(groups=[PodGroup(3, 2)], grace_period=5.0)


def _placement3():
    from hived.core.jobs import Placement
    return Placement("V100", gang_placement("a", "b").pods[:3])


@pytest.fixture
def outage(kube):
    """Stop the API server; ``outage.back()`` starts it again. Always back after the test."""
    class Outage:
        down = False

        def stop(self):
            kube.stop_apiserver()
            self.down = True

        def back(self):
            if self.down:
                kube.start_apiserver()
                self.down = False
    o = Outage()
    yield o
    o.back()


def _launcher(kube, ns, **kw):
    return KubernetesLauncher(kube.kubeconfig, template=TEMPLATE, namespace_prefix=vc_prefix(ns), instance=ns,
                              watch_timeout=1, pipeline=True, **kw).start()


def test_a_few_seconds_of_outage_mid_gang_only_delay_the_launch(kube, core, ns, outage):
    lau = _launcher(kube, ns, api_retry_for=30)
    try:
        real = lau.raw.create_pod
        calls = []

        def create(ns_, pod):            # the server goes away right after the first member
            out = real(ns_, pod)
            calls.append(pod["metadata"]["name"])
            if len(calls) == 1:
                outage.stop()
                threading.Timer(2.0, outage.back).start()
            return out
        lau.raw.create_pod = create
        lau.launch("j1", request(**GANG3), _placement3(), attempt=1)
        assert lau.flush(60)
        assert len(pods_of(core, ns)) == 3
        assert [e for e in lau.poll() if e.kind == "exited"] == []
    finally:
        lau.stop()


def test_a_long_outage_mid_gang_refuses_the_attempt_and_leaves_no_half_gang(kube, core, ns, outage):
    lau = _launcher(kube, ns, api_retry_for=1)
    try:
        real = lau.raw.create_pod

        def create(ns_, pod):
            out = real(ns_, pod)
            outage.stop()                 # down for longer than the launcher retries
            return out
        lau.raw.create_pod = create
        lau.launch("j1", request(**GANG3), _placement3(), attempt=1)
        ev = wait_events(lau, lambda es: any(e.kind == "exited" for e in es), timeout=30)
        (ex,) = [e for e in ev if e.kind == "exited"]
        assert ex.reason == "LaunchRefused"
        # an outage is an infrastructure failure: the engine retries it after a back-off
        assert classify(ex.exit_code, ex.log_tail).cls is FailureClass.INFRA, ex.log_tail
        outage.back()
        # the member created before the outage is deleted once the server answers again
        assert wait_for(lambda: lau.poll() is not None and pods_of(core, ns) == [], 30), \
            [p.metadata.name for p in pods_of(core, ns)]
        assert wait_for(lambda: lau._undeleted == {}, 10), lau._undeleted   # the reaper books it done
    finally:
        lau.stop()


def test_cancel_during_an_outage_ends_once_the_pods_are_gone(kube, core, ns, kubelet, outage):
    lau = _launcher(kube, ns, api_retry_for=1)
    try:
        lau.launch("j1", request(**GANG3), _placement3(), attempt=1)
        assert lau.flush(30)
        for p in pods_of(core, ns):
            kubelet.run(ns, p.metadata.name)
        wait_events(lau, lambda es: any(e.kind == "started" for e in es))
        outage.stop()
        lau.terminate("j1", 0)              # must not raise nor hang the sender
        assert lau.flush(30)
        time.sleep(0.5)
        assert [e for e in lau.poll() if e.kind == "exited"] == []   # nothing confirmed gone yet
        outage.back()
        assert wait_for(lambda: lau.poll() is not None and all(
            p.metadata.deletion_timestamp is not None for p in pods_of(core, ns)), 30)
        for p in pods_of(core, ns):
            kubelet.confirm_deletion(ns, p.metadata.name)
        ev = wait_events(lau, lambda es: any(e.kind == "exited" for e in es), timeout=20)
        assert [e.kind for e in ev if e.kind == "exited"] == ["exited"]
    finally:
        lau.stop()
