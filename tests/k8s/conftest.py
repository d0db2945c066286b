"""A real Kubernetes API server for the k8s tests: etcd + minikas on loopback.

The session fixture ``kube`` starts etcd and minikas (hived.testing.minikas: the
shared test API server built on k8s.io/apiserver, in ``$HIVED_SHARED/k8s-apiserver``;
``HIVED_SHARED`` defaults to ``../shared`` beside the repository),
writes a kubeconfig, and stops both at the end. It can also restart the API
server alone (same port, same etcd), run a second one, and compact etcd, to
test watch expiry and reconnects.

There is no kubelet: ``kubelet`` writes pod status through the status
subresource the way a kubelet would, and confirms graceful deletions.
"""
from __future__ import annotations

import itertools
import sys
import uuid
from pathlib import Path

import pytest

from hived.testing import minikas

sys.path.insert(0, str(Path(__file__).parent))
from k8s_helpers import VC_A, Harness, Kubelet, Nodes, vc_ns  # noqa: E402

TOKEN = minikas.TOKEN
Cluster = minikas.Cluster


@pytest.fixture(scope="session")
def kube():
    try:
        c = Cluster().start()
    except minikas.MinikasError as e:
        pytest.fail(str(e))
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="session")
def core(kube):
    from kubernetes import client
    return client.CoreV1Api(kube.api_client())


_ids = itertools.count()


@pytest.fixture
def ns(core):
    """A fresh namespace per test (the API server is shared by the session): the namespace of VC
    ``vc-a`` (k8s_helpers.request's) under a fresh prefix, so a launcher given
    ``namespace_prefix=vc_prefix(ns)`` puts that VC's jobs here; ``vc_ns`` makes other VCs'."""
    name = f"t{next(_ids)}-{uuid.uuid4().hex[:6]}-{VC_A}"
    core.create_namespace({"metadata": {"name": name}})
    return name


@pytest.fixture
def hv(kube, core, ns, uid, nodes, kubelet, tmp_path):
    """A hived service harness over the test API server; its services are closed afterwards."""
    h = Harness(kube, core, ns, uid, nodes, kubelet, tmp_path)
    yield h
    h.close_all()


@pytest.fixture
def jns(core, ns):
    """VC vca's namespace, where its jobs run (beside ``ns``, vc-a's)."""
    return vc_ns(core, ns, "vca")


@pytest.fixture
def uid():
    """A short unique prefix for cluster-scoped names (nodes) and hived instances."""
    return f"u{uuid.uuid4().hex[:6]}"


@pytest.fixture
def nodes(core):
    return Nodes(core)


@pytest.fixture
def kubelet(core):
    return Kubelet(core)

