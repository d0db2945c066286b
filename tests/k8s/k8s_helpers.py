"""Helpers shared by the k8s tests (plain functions; the fixtures are in conftest.py)."""
from __future__ import annotations

import json
import time

from hived.core.jobs import JobClass, JobRequest, Placement, PodGroup, PodPlacement
from hived.k8s import pod_builder as pb

TEMPLATE = {"image": "registry.example/train:1", "env": {"DATA": "/data"},
            "resources": {"requests": {"cpu": "4", "memory": "16Gi"}},
            "volumes": [{"name": "data", "hostPath": {"path": "/data"}}],
            "volume_mounts": [{"name": "data", "mountPath": "/data"}],
            "service_account": "trainer", "image_pull_secrets": ["regcred"],
            "node_selector": {"gpu": "v100"},
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]}


VC_A = "vc-a"     # the VC of request(); the ``ns`` fixture is its namespace


def vc_prefix(ns: str) -> str:
    """The namespace prefix under which VC vc-a's namespace is ``ns`` (the ``ns`` fixture's)."""
    assert ns.endswith(f"-{VC_A}"), ns
    return ns[:-len(VC_A)]


def vc_ns(core, ns: str, vc: str) -> str:
    """VC ``vc``'s namespace beside ``ns`` (same prefix), created if it is not there yet."""
    from kubernetes.client.rest import ApiException
    name = vc_prefix(ns) + vc
    try:
        core.create_namespace({"metadata": {"name": name}})
    except ApiException as e:
        if e.status != 409:
            raise
    return name


def gang_placement(n1, n2, opportunistic=False):
    """4 pods x 2 GPUs: two per node, each on one 2-GPU cell (a PCIe switch)."""
    cells = [(n1, (0, 1), f"V100/{n1}/0"), (n1, (2, 3), f"V100/{n1}/1"),
             (n2, (4, 5), f"V100/{n2}/2"), (n2, (6, 7), f"V100/{n2}/3")]
    return Placement("V100", tuple(PodPlacement(r, n, g, (c,)) for r, (n, g, c) in enumerate(cells)),
                     opportunistic)


def request(**kw):
    base = dict(user="alice", vc="vc-a", command=["python", "train.py"], job_class=JobClass.BE,
                groups=[PodGroup(pods=4, gpus=2)], grace_period=30.0, name="train")
    base.update(kw)
    return JobRequest(**base)


def wait_events(launcher, want, timeout=10.0):
    got, end = [], time.monotonic() + timeout
    while time.monotonic() < end:
        got += launcher.poll()
        if want(got):
            return got
        time.sleep(0.02)
    raise AssertionError(f"events not seen in {timeout}s: {got}")


def pods_of(core, ns, job="j1"):
    items = core.list_namespaced_pod(ns, label_selector=f"{pb.L_JOB}={job}").items
    return sorted(items, key=lambda p: int(p.metadata.labels[pb.L_RANK]))


def spec_for(prefix: str, nodes: int = 2, vcs=(("vca", "T-NODE", 1), ("vcb", "T-NODE", 1)), users=None) -> dict:
    """A spec dict like tests/service/spec_small.yaml (8-GPU nodes of two 4-GPU sockets and
    four 2-GPU switches) whose nodes are named ``{prefix}-n{i}``: Node objects are
    cluster-scoped, so each test names its own."""
    users = users or {"vca": ["alice"], "vcb": ["bob"]}
    return {
        "physicalCluster": {
            "cellTypes": {
                "T-SWITCH": {"childCellType": "T-GPU", "childCellNumber": 2},
                "T-SOCKET": {"childCellType": "T-SWITCH", "childCellNumber": 2},
                "T-NODE": {"childCellType": "T-SOCKET", "childCellNumber": 2, "isNodeLevel": True,
                           "cpus": 64, "memoryGB": 512}},
            "physicalCells": [{"cellType": "T-NODE", "cellAddress": f"{prefix}-n{i}"} for i in range(nodes)]},
        "virtualClusters": {vc: {"virtualCells": [{"cellType": ct if ct == "T-NODE" else f"T-NODE.{ct}",
                                                   "cellNumber": n}],
                                 "users": users.get(vc, [])}
                            for vc, ct, n in vcs},
        "admins": ["root"],
    }


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


class Harness:
    def __init__(self, kube, core, ns, uid, nodes, kubelet, tmp_path):
        self.kube, self.core, self.ns, self.uid, self.kubelet = kube, core, ns, uid, kubelet
        self.tmp = tmp_path
        self.data = tmp_path / "data"
        self.made = []
        # each VC's jobs run in its own namespace (vca's and vcb's, beside ``ns``)
        self.vc_namespaces = {vc: vc_ns(core, ns, vc) for vc in ("vca", "vcb")}
        self.vca = self.vc_namespaces["vca"]
        for i in range(2):
            nodes.add(f"{uid}-n{i}")

    def spec(self, name="spec.yaml", **kw) -> str:
        p = self.tmp / name
        p.write_text(json.dumps(spec_for(self.uid, **kw)))
        return str(p)

    def service(self, spec=None, launcher_kw=None, data=None, **kw):
        from hived.k8s.launcher import KubernetesLauncher
        from hived.k8s.service import KubernetesSchedulerService
        lau = KubernetesLauncher(self.kube.kubeconfig, template={"image": "registry.example/train:1"},
                                 namespace_prefix=vc_prefix(self.ns), instance=self.uid, watch_timeout=1,
                                 pipeline=True, **(launcher_kw or {}))   # as launcher_from_env builds it
        svc = KubernetesSchedulerService(spec or self.spec(), data or self.data, launcher=lau, tick_seconds=0.05,
                                         **{"leader": None, **kw})
        self.made.append(svc)
        return svc

    def pods(self, job_id=None):
        """This test's hived pods, in every VC namespace."""
        sel = f"{pb.L_INSTANCE}={self.uid}" + (f",{pb.L_JOB}={job_id}" if job_id else "")
        items = self.core.list_pod_for_all_namespaces(label_selector=sel).items
        return sorted(items, key=lambda p: p.metadata.name)

    def run_all(self, job_id):
        for p in self.pods(job_id):
            self.kubelet.run(p.metadata.namespace, p.metadata.name)

    @staticmethod
    def tick_until(svc, pred, timeout=10.0, why=None):
        from hived.k8s.watch import wait_for
        decisions = []
        ok = wait_for(lambda: decisions.extend(svc.tick()) or pred(), timeout, step=0.05)
        assert ok, f"condition not reached; decisions {decisions}" + (f"; {why()}" if why else "")
        return decisions

    def start_jobs(self, svc, *payloads, users=("alice", "bob")):
        ids = []
        for payload, user in zip(payloads, users):
            ids.append(svc.submit(user, payload)["id"])
        self.tick_until(svc, lambda: all(len(self.pods(j)) == svc.eng.job(j).request.total_pods for j in ids))
        for j in ids:
            self.run_all(j)
        self.tick_until(svc, lambda: all(svc.eng.job(j).state.value == "running" for j in ids))
        return ids

    def close_all(self):
        for svc in self.made:
            try:
                svc.close()
            except Exception:
                pass
