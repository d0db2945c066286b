"""What a gang's pods carry: the rendezvous (torchrun's names, DNS through a headless Service),
CPU/memory from the job, and hived's own container settings."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))   # k8s_helpers (pytest runs with --import-mode=importlib)

import pytest  # noqa: E402
from k8s_helpers import vc_ns, vc_prefix  # noqa: E402

from hived.core.jobs import JobClass, JobRequest, Placement, PodGroup, PodPlacement  # noqa: E402
from hived.k8s import pod_builder as pb  # noqa: E402
from hived.k8s.template import JobTemplate, TemplateError  # noqa: E402

TPL = JobTemplate.from_dict({"image": "registry.example/train:1",
                             "resources": {"requests": {"cpu": "4", "memory": "16Gi", "ephemeral-storage": "10Gi"},
                                           "limits": {"example.com/rdma": "1"}}})


def three_pods(**group):
    req = JobRequest(user="alice", vc="vca", command="torchrun train.py", job_class=JobClass.BE,
                     groups=[PodGroup(pods=3, gpus=2, **group)], name="t")
    placement = Placement("V100", tuple(PodPlacement(r, f"n{r}", (0, 1), (f"c{r}",)) for r in range(3)))
    return req, placement


def env_of(pod: dict) -> dict:
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}


def test_a_three_pod_gang_carries_master_addr_world_size_and_distinct_ranks():
    req, placement = three_pods()
    pods = pb.build_pods("j7", req, placement, 2, TPL, namespace="hived-vca")
    envs = [env_of(p) for p in pods]
    assert sorted(e["RANK"] for e in envs) == ["0", "1", "2"]
    assert {e["WORLD_SIZE"] for e in envs} == {"3"}
    rank0 = pods[0]["metadata"]["name"]
    svc = pb.service_name("j7")
    assert {e["MASTER_ADDR"] for e in envs} == {f"{rank0}.{svc}.hived-vca.svc"}
    assert {e["MASTER_PORT"] for e in envs} == {str(pb.MASTER_PORT)}
    peers = envs[0]["HIVED_PEERS"].split(",")
    assert peers == [f"{p['metadata']['name']}.{svc}.hived-vca.svc" for p in pods]
    assert all(e["HIVED_PEERS"] == envs[0]["HIVED_PEERS"] for e in envs)
    for p in pods:        # the names resolve: hostname.subdomain, the Service selects the gang
        assert p["spec"]["hostname"] == p["metadata"]["name"] and p["spec"]["subdomain"] == svc
        sel = pb.service_manifest("j7", "hived-vca", instance="hived")["spec"]["selector"]
        assert sel.items() <= p["metadata"]["labels"].items()
    fq = pb.build_pods("j7", req, placement, 2, TPL, namespace="ns", cluster_domain="cluster.local")
    assert env_of(fq[1])["MASTER_ADDR"].endswith(".ns.svc.cluster.local")


def test_a_single_pod_needs_no_service():
    req = JobRequest(user="alice", vc="vca", command="x", groups=[PodGroup(1, 1)])
    (pod,) = pb.build_pods("j1", req, Placement("V100", (PodPlacement(0, "n1", (0,)),)), 1, TPL, namespace="ns")
    env = env_of(pod)
    assert (env["MASTER_ADDR"], env["WORLD_SIZE"], env["RANK"]) == ("localhost", "1", "0")
    assert "subdomain" not in pod["spec"] and "hostname" not in pod["spec"]


@pytest.mark.parametrize("name", ["MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "HIVED_PEERS"])
def test_a_template_may_not_set_the_rendezvous(name):
    with pytest.raises(TemplateError) as e:
        JobTemplate.from_dict({"image": "i", "env": {name: "x"}})
    assert e.value.where == f"template.env.{name}"


def test_the_jobs_cpu_and_memory_win_over_the_template_which_only_adds():
    req, placement = three_pods(cpus=12, memory_gb=96)
    (c,) = pb.build_pods("j1", req, placement, 1, TPL, namespace="ns")[0]["spec"]["containers"]
    assert c["resources"]["requests"] == {"cpu": "12", "memory": "98304Mi", "ephemeral-storage": "10Gi"}
    assert c["resources"]["limits"] == {"cpu": "12", "memory": "98304Mi", "example.com/rdma": "1"}
    # the node share the engine resolved, when the job named none
    req, placement = three_pods()
    pods = pb.build_pods("j1", req, placement, 1, TPL, namespace="ns", demands=[(16.0, 128.0, 2.0)] * 3)
    assert pods[2]["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "16"
    assert pods[2]["spec"]["containers"][0]["resources"]["limits"]["memory"] == "131072Mi"
    # fractional CPUs in millicores
    req, placement = three_pods(cpus=2.5)
    assert pb.build_pods("j1", req, placement, 1, TPL, namespace="ns")[0]["spec"]["containers"][0][
        "resources"]["requests"]["cpu"] == "2500m"


def test_a_template_without_resources_still_requests_the_jobs_share():
    req, placement = three_pods(cpus=8, memory_gb=64)
    (c,) = pb.build_pods("j1", req, placement, 1, JobTemplate.from_dict({"image": "i"}),
                         namespace="ns")[0]["spec"]["containers"]
    assert c["resources"] == {"requests": {"cpu": "8", "memory": "65536Mi"},
                              "limits": {"cpu": "8", "memory": "65536Mi"}}


def test_a_template_asking_for_privileges_gets_no_conflicting_default():
    """The API refuses privileged (or CAP_SYS_ADMIN) together with allowPrivilegeEscalation false;
    a VC allowed to ask for it gets a pod the API accepts."""
    t = JobTemplate.from_dict({"image": "i", "security_context": {"privileged": True}})
    assert "allowPrivilegeEscalation" not in pb.container_security_context(t)
    t = JobTemplate.from_dict({"image": "i", "security_context": {"privileged": True,
                                                                 "allowPrivilegeEscalation": True}})
    assert pb.container_security_context(t)["allowPrivilegeEscalation"] is True


def test_gang_pods_and_their_service_are_accepted_by_the_api_server(core, ns):
    """Created for real: the Service (headless, not-ready addresses published) and three pods whose
    hostname/subdomain/env/security context the server stores as built."""
    req, placement = three_pods(cpus=4, memory_gb=8)
    svc = core.create_namespaced_service(ns, pb.service_manifest("j9", ns, instance="t", vc="vca"))
    assert svc.spec.cluster_ip == "None" and svc.spec.publish_not_ready_addresses is True
    for pod in pb.build_pods("j9", req, placement, 1, TPL, namespace=ns, instance="t"):
        core.create_namespaced_pod(ns, pod)
    pods = sorted(core.list_namespaced_pod(ns, label_selector=",".join(
        f"{k}={v}" for k, v in svc.spec.selector.items())).items, key=lambda p: p.metadata.name)
    assert len(pods) == 3
    ranks = set()
    for p in pods:
        env = {e.name: e.value for e in p.spec.containers[0].env}
        ranks.add(env["RANK"])
        assert env["MASTER_ADDR"] == f"{pods[0].metadata.name}.{svc.metadata.name}.{ns}.svc"
        assert env["WORLD_SIZE"] == "3"
        assert p.spec.subdomain == svc.metadata.name and p.spec.hostname == p.metadata.name
        assert p.spec.containers[0].security_context.capabilities.drop == ["ALL"]
        assert p.spec.containers[0].resources.limits["cpu"] == "4"
    assert ranks == {"0", "1", "2"}


def test_a_three_pod_gang_launched_through_the_launcher(kube, core, ns, uid, nodes, kubelet):
    """In its VC's namespace, with its headless Service there from the start; the Service goes when
    the gang has ended."""
    from hived.k8s.launcher import KubernetesLauncher
    from hived.k8s.watch import wait_for
    for r in range(3):
        nodes.add(f"{uid}-n{r}")
    jns = vc_ns(core, ns, "vca")
    req, _ = three_pods(cpus=2, memory_gb=4)
    placement = Placement("V100", tuple(PodPlacement(r, f"{uid}-n{r}", (0, 1), (f"c{r}",)) for r in range(3)))
    lau = KubernetesLauncher(kube.kubeconfig, template={"image": "registry.example/train:1"},
                             namespace_prefix=vc_prefix(ns), instance=uid, watch_timeout=1)
    try:
        lau.launch("j3", req, placement, attempt=1)
        pods = sorted(core.list_namespaced_pod(jns).items, key=lambda p: p.metadata.name)
        envs = [{e.name: e.value for e in p.spec.containers[0].env} for p in pods]
        assert [e["RANK"] for e in envs] == ["0", "1", "2"] and {e["WORLD_SIZE"] for e in envs} == {"3"}
        assert {e["MASTER_ADDR"] for e in envs} == {f"{pods[0].metadata.name}.{pb.service_name('j3')}.{jns}.svc"}
        assert [p.spec.node_name for p in pods] == [f"{uid}-n{r}" for r in range(3)]
        assert {p.spec.containers[0].resources.requests["cpu"] for p in pods} == {"2"}
        assert core.list_namespaced_pod(ns).items == []            # vc-a's namespace: not this job's
        svc = core.read_namespaced_service(pb.service_name("j3"), jns)
        assert svc.spec.cluster_ip == "None" and svc.metadata.labels[pb.L_INSTANCE] == uid

        for p in pods:
            kubelet.exit(jns, p.metadata.name, 0)
        ended = []
        assert wait_for(lambda: ended.extend(e for e in lau.poll() if e.kind == "exited") or bool(ended), 10)
        assert ended[0].exit_code == 0
        assert wait_for(lambda: not core.list_namespaced_service(jns).items, 10), "the gang's Service outlived it"
    finally:
        lau.stop()
