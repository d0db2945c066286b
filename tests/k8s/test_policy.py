"""The admin's pod policy: per-VC namespaces, the Pod Security profiles, the allow-lists, and the
refusal at submit (field named, nothing created) through the real service and API server."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))   # k8s_helpers (pytest runs with --import-mode=importlib)

import json  # noqa: E402
import subprocess  # noqa: E402

import pytest  # noqa: E402
import yaml  # noqa: E402
from k8s_helpers import gang_placement, request, spec_for, vc_prefix  # noqa: E402

from hived.core.engine import RequestError  # noqa: E402
from hived.k8s import pod_builder as pb  # noqa: E402
from hived.k8s.launcher import KubernetesLauncher  # noqa: E402
from hived.k8s.pod_security import violations  # noqa: E402
from hived.k8s.policy import (  # noqa: E402
    PolicyError,
    PolicyFileError,
    check_template,
    load_policy,
    namespace_manifest,
    vc_manifests,
    vc_namespace,
)
from hived.k8s.service import KubernetesSchedulerService  # noqa: E402
from hived.k8s.template import JobTemplate, TemplateError, check_for_vc  # noqa: E402
from hived.k8s.watch import wait_for  # noqa: E402

POLICY = """
namespacePrefix: jobs-
schedulerServiceAccount: hived
defaults:
  images: ["registry.example/*", "nvcr.io/nvidia/*"]
virtualClusters:
  vca:
    serviceAccounts: [trainer]
  lab:
    podSecurity: baseline
    volumeTypes: [emptyDir, nfs, hostPath]
  ops:
    podSecurity: privileged
    volumeTypes: [hostPath]
"""


def refusal(tpl: dict, vc: str = "vca", policy: str = POLICY) -> PolicyError:
    with pytest.raises(PolicyError) as e:
        check_template(JobTemplate.from_dict(tpl), load_policy(policy).for_vc(vc))
    return e.value


def allowed(tpl: dict, vc: str = "vca", policy: str = POLICY) -> None:
    check_template(JobTemplate.from_dict(tpl), load_policy(policy).for_vc(vc))


IMG = "registry.example/train:1"


# ---------------------------------------------------------------- namespaces

def test_vc_namespace_is_dns_safe_stable_and_distinct():
    assert vc_namespace("research", "hived-") == "hived-research"
    odd = vc_namespace("Research_Team/β", "hived-")
    assert odd == vc_namespace("Research_Team/β", "hived-")              # stable
    assert odd.startswith("hived-research-team") and len(odd) <= 63
    assert all(c.isalnum() and c.isascii() or c == "-" for c in odd)
    assert vc_namespace("Research", "hived-") != vc_namespace("research", "hived-")
    long = vc_namespace("v" * 100, "hived-")
    assert len(long) <= 63 and long != vc_namespace("v" * 99, "hived-")


def test_namespace_manifest_carries_the_vcs_pod_security_level():
    pol = load_policy(POLICY)
    ns = namespace_manifest("lab", pol)
    labels = ns["metadata"]["labels"]
    assert ns["metadata"]["name"] == "jobs-lab"
    assert labels["pod-security.kubernetes.io/enforce"] == "baseline"
    assert namespace_manifest("vca", pol)["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert namespace_manifest("anyone")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_vc_manifests_are_accepted_by_the_api_server(core, uid):
    """The Namespace manifests are created for real (minikas serves Namespaces; RoleBindings are
    checked against the typed model: minikas serves no RBAC)."""
    from kubernetes.client import models as m
    pol = load_policy(f"namespacePrefix: {uid}-\n")
    docs = vc_manifests(["vca", "Lab Two"], pol)
    made = []
    try:
        for d in docs:
            if d["kind"] == "Namespace":
                core.create_namespace(d)
                made.append(d["metadata"]["name"])
            else:
                m.V1RoleBinding.model_validate(d)
                assert d["metadata"]["namespace"] in made
        got = core.read_namespace(f"{uid}-vca")
        assert got.metadata.labels["pod-security.kubernetes.io/enforce"] == "restricted"
        assert got.metadata.annotations[pb.L_VC] == "vca"
    finally:
        for n in made:
            core.delete_namespace(n)


@pytest.mark.parametrize("text,where", [
    ("defaults: {podSecurity: lax}\n", "defaults.podSecurity"),
    ("virtualClusters: {vca: {volumeTypes: [hostPth]}}\n", "virtualClusters.vca.volumeTypes.0"),
    ("virtualClusters: {vca: {serviceAccounts: [hived]}}\n", "virtualClusters.vca.serviceAccounts"),
    ("virtualClusters: {vca: {namespace: hived}}\n", "virtualClusters.vca.namespace"),
    ("virtualClusters: {vca: {namespace: kube-system}}\n", "virtualClusters.vca.namespace"),
    ("virtualClusters: {a: {namespace: x}, b: {namespace: x}}\n", "share namespace 'x'"),
    ("namespacePrefix: ''\n", "namespacePrefix"),
    ("imagess: []\n", "imagess"),
])
def test_a_bad_policy_file_is_refused_in_one_line_naming_where(text, where):
    with pytest.raises(PolicyFileError) as e:
        load_policy(text)
    assert where in str(e.value) and "\n" not in str(e.value)


def test_policy_cli_prints_every_vcs_namespace(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(json.dumps(spec_for("n")))
    pol = tmp_path / "policy.yaml"
    pol.write_text(POLICY)
    out = subprocess.run([sys.executable, "-m", "hived.k8s.policy", str(spec), str(pol)],
                         capture_output=True, text=True, check=True).stdout
    docs = list(yaml.safe_load_all(out))
    assert [(d["kind"], d["metadata"].get("namespace", d["metadata"]["name"])) for d in docs] == [
        ("Namespace", "jobs-vca"), ("RoleBinding", "jobs-vca"), ("Namespace", "jobs-vcb"), ("RoleBinding", "jobs-vcb")]
    bad = subprocess.run([sys.executable, "-m", "hived.k8s.policy", str(spec), str(tmp_path / "none.yaml")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "none.yaml" in bad.stderr


# ---------------------------------------------------------------- the profiles

def test_host_path_on_root_is_refused_naming_the_field_and_rule():
    e = refusal({"image": IMG, "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
                 "volume_mounts": [{"name": "root", "mountPath": "/host"}]})
    assert e.where == "template.volumes[0].hostPath"
    assert "HostPath Volumes" in e.problem and "restricted" in e.problem


@pytest.mark.parametrize("tpl,where,rule", [
    ({"security_context": {"privileged": True}}, "template.security_context.privileged", "Privileged"),
    ({"host_network": True}, "template.host_network", "Host Namespaces"),
    ({"host_pid": True}, "template.host_pid", "Host Namespaces"),
    ({"host_ipc": True}, "template.host_ipc", "Host Namespaces"),
    ({"ports": [{"containerPort": 80, "hostPort": 80}]}, "template.ports[0].hostPort", "Host Ports"),
    ({"security_context": {"capabilities": {"add": ["SYS_ADMIN"]}}},
     "template.security_context.capabilities.add[0]", "Capabilities"),
    ({"security_context": {"capabilities": {"drop": ["NET_RAW"]}}},
     "template.security_context.capabilities.drop", "Capabilities"),
    ({"security_context": {"allowPrivilegeEscalation": True}},
     "template.security_context.allowPrivilegeEscalation", "Privilege Escalation"),
    ({"pod_security_context": {"runAsNonRoot": False}}, "template.pod_security_context.runAsNonRoot", "Non-root"),
    ({"security_context": {"runAsNonRoot": False}}, "template.security_context.runAsNonRoot", "Non-root"),
    ({"security_context": {"runAsUser": 0}}, "template.security_context.runAsUser", "Non-root user"),
    ({"security_context": {"seccompProfile": {"type": "Unconfined"}}},
     "template.security_context.seccompProfile.type", "Seccomp"),
    ({"security_context": {"procMount": "Unmasked"}}, "template.security_context.procMount", "/proc"),
    ({"pod_security_context": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}},
     "template.pod_security_context.sysctls[0].name", "Sysctls"),
    ({"security_context": {"seLinuxOptions": {"type": "spc_t"}}},
     "template.security_context.seLinuxOptions.type", "SELinux"),
    ({"security_context": {"appArmorProfile": {"type": "Unconfined"}}},
     "template.security_context.appArmorProfile.type", "AppArmor"),
    ({"annotations": {"container.apparmor.security.beta.kubernetes.io/main": "unconfined"}},
     "template.annotations.container.apparmor.security.beta.kubernetes.io/main", "AppArmor"),
    ({"volumes": [{"name": "n", "nfs": {"server": "s", "path": "/"}}]}, "template.volumes[0].nfs", "Volume Types"),
])
def test_restricted_refuses_each_rule_naming_the_field(tpl, where, rule):
    e = refusal({"image": IMG, **tpl})
    assert e.where == where and rule in e.problem, e


def test_baseline_allows_what_only_restricted_forbids_but_not_host_access():
    # baseline: running as root, adding CHOWN, an nfs volume are fine ...
    allowed({"image": IMG, "pod_security_context": {"runAsNonRoot": False},
             "security_context": {"allowPrivilegeEscalation": True, "capabilities": {"add": ["CHOWN"],
                                                                                     "drop": []}},
             "volumes": [{"name": "n", "nfs": {"server": "s", "path": "/x"}}]}, vc="lab")
    # ... the node's files, privileges and namespaces are not, even when the admin lists hostPath
    assert refusal({"image": IMG, "volumes": [{"name": "h", "hostPath": {"path": "/"}}]},
                   vc="lab").where == "template.volumes[0].hostPath"
    assert refusal({"image": IMG, "security_context": {"privileged": True}}, vc="lab").where == \
        "template.security_context.privileged"
    assert refusal({"image": IMG, "security_context": {"capabilities": {"add": ["SYS_ADMIN"]}}},
                   vc="lab").where == "template.security_context.capabilities.add[0]"


def test_privileged_vc_still_has_its_allow_lists():
    allowed({"image": IMG, "security_context": {"privileged": True}, "host_network": True,
             "volumes": [{"name": "h", "hostPath": {"path": "/dev"}}]}, vc="ops")
    assert refusal({"image": IMG, "volumes": [{"name": "e", "emptyDir": {}}]}, vc="ops").where == \
        "template.volumes[0].emptyDir"       # not on ops' volume list


def test_hived_defaults_pass_restricted_and_the_built_pod_carries_them():
    tpl = JobTemplate.from_dict({"image": IMG})
    assert list(violations(tpl, "restricted")) == []
    pod = pb.build_pods("j1", request(), gang_placement("n1", "n2"), 1, tpl, namespace="ns")[0]
    c = pod["spec"]["containers"][0]
    assert c["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert pod["spec"]["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    assert pod["spec"]["automountServiceAccountToken"] is False       # no service account: no token
    # a template may tighten or add what the profile allows; the defaults stay underneath
    tpl = JobTemplate.from_dict({"image": IMG, "security_context": {"runAsUser": 1000,
                                                                    "readOnlyRootFilesystem": True}})
    sc = pb.build_pods("j1", request(), gang_placement("n1", "n2"), 1, tpl,
                       namespace="ns")[0]["spec"]["containers"][0]["securityContext"]
    assert sc["runAsUser"] == 1000 and sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"]


# ---------------------------------------------------------------- allow-lists

def test_images_must_match_the_vcs_patterns():
    allowed({"image": "nvcr.io/nvidia/pytorch:24.05-py3"})
    e = refusal({"image": "docker.io/evil/miner:1"})
    assert e.where == "template.image" and "registry.example/*" in e.problem
    # a short name is matched as the runtime pulls it
    allowed({"image": "ubuntu:22.04"}, policy="defaults: {images: ['docker.io/library/*']}\n")
    assert refusal({"image": "someone/ubuntu:22.04"},
                   policy="defaults: {images: ['docker.io/library/*']}\n").where == "template.image"


def test_the_schedulers_own_service_account_is_never_usable():
    e = refusal({"image": IMG, "service_account": "hived"})
    assert e.where == "template.service_account" and "scheduler's own" in e.problem
    e = refusal({"image": IMG, "service_account": "default"})
    assert e.where == "template.service_account" and "trainer" in e.problem
    allowed({"image": IMG, "service_account": "trainer"})
    e = refusal({"image": IMG, "service_account": "trainer"}, vc="vcb")        # another VC's
    assert "none; a job gets no API token" in e.problem


def test_a_template_may_not_pick_another_namespace():
    assert refusal({"image": IMG, "namespace": "hived"}).where == "template.namespace"
    allowed({"image": IMG, "namespace": "jobs-vca"})


# ---------------------------------------------------------------- at submit, end to end

@pytest.fixture
def make_svc(kube, ns, uid, nodes, tmp_path):
    for i in range(2):
        nodes.add(f"{uid}-n{i}")
    spec = tmp_path / "spec.yaml"
    spec.write_text(json.dumps(spec_for(uid)))
    made = []

    def make():
        policy = load_policy(POLICY.replace("namespacePrefix: jobs-", f"namespacePrefix: {vc_prefix(ns)}"))
        lau = KubernetesLauncher(kube.kubeconfig, template={"image": IMG}, instance=uid, watch_timeout=1,
                                 pipeline=True, policy=policy)      # vca's jobs: in jns, the policy's
        svc = KubernetesSchedulerService(str(spec), tmp_path / "data", launcher=lau, tick_seconds=0.05)
        made.append(svc)
        return svc
    yield make
    for svc in made:
        svc.close()


@pytest.mark.parametrize("bad,where", [
    ({"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}, "k8s_template.volumes[0].hostPath"),
    ({"service_account": "hived"}, "k8s_template.service_account"),
    ({"image": "quay.io/anyone/x:1"}, "k8s_template.image"),
])
def test_a_refused_template_is_refused_at_submit_and_nothing_is_created(make_svc, core, jns, bad, where):
    svc = make_svc()
    with pytest.raises(RequestError) as e:
        svc.submit("alice", {"vc": "vca", "command": "true", "gpus": 2, "k8s_template": bad})
    assert e.value.field == where
    assert svc.list_jobs() == [] and svc.store.count_jobs() == 0
    svc.tick()
    assert core.list_namespaced_pod(jns).items == []


def test_an_allowed_image_and_service_account_run(make_svc, core, jns):
    svc = make_svc()
    own = {"image": "nvcr.io/nvidia/pytorch:24.05-py3", "service_account": "trainer"}
    job = svc.submit("alice", {"vc": "vca", "command": "python train.py", "gpus": 2, "k8s_template": own})
    assert wait_for(lambda: svc.tick() is not None and len(core.list_namespaced_pod(jns).items) == 1, 10)
    pod = core.list_namespaced_pod(jns).items[0]
    assert pod.metadata.annotations[pb.A_JOB] == job["id"]
    assert pod.spec.service_account_name == "trainer" and pod.spec.automount_service_account_token is True
    assert pod.spec.containers[0].image == own["image"]
    assert pod.spec.security_context.seccomp_profile.type == "RuntimeDefault"


def test_the_service_reads_the_policy_file_named_by_the_environment(kube, ns, tmp_path, monkeypatch):
    from hived.k8s.service import launcher_from_env
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    monkeypatch.setenv("HIVED_K8S_KUBECONFIG", kube.kubeconfig)
    monkeypatch.setenv("HIVED_K8S_NAMESPACE", ns)
    monkeypatch.setenv("HIVED_K8S_POLICY", str(path))
    lau = launcher_from_env()
    assert lau.policy.for_vc("lab").pod_security == "baseline"
    assert lau.namespace_for("vca") == "jobs-vca" != ns          # the policy's, not hived's own
    monkeypatch.delenv("HIVED_K8S_POLICY")
    assert launcher_from_env().namespace_for("vca") == "hived-vca"  # without a policy file
    monkeypatch.setenv("HIVED_K8S_POLICY", str(path))
    path.write_text("defaults: {podSecurity: lax}\n")
    with pytest.raises(PolicyFileError) as e:
        launcher_from_env()
    assert str(path) in str(e.value) and "defaults.podSecurity" in str(e.value)


# ---------------------------------------------------------------- round 2: an allow-list, every source judged

TOKEN_VOLUME = {"name": "tok", "projected": {"sources": [
    {"serviceAccountToken": {"audience": "vault", "expirationSeconds": 86400, "path": "token"}}]}}
TOKEN_MOUNT = [{"name": "tok", "mountPath": "/var/run/secrets/vault"}]


def test_a_projected_service_account_token_needs_an_allowed_service_account():
    """Finding 1: a kubelet would issue the token of the namespace's `default` account."""
    tpl = {"image": IMG, "volumes": [TOKEN_VOLUME], "volume_mounts": TOKEN_MOUNT}
    e = refusal(tpl)                                # vca allows `trainer`, the template names none
    assert e.where == "template.volumes[0].projected.sources[0].serviceAccountToken"
    assert "Projected Sources" in e.problem and "'default'" in e.problem
    allowed({**tpl, "service_account": "trainer"})  # the token of an account the VC allows
    e = refusal(tpl, vc="other")                    # the defaults allow no account at all
    assert e.where == "template.volumes[0].projected.sources[0].serviceAccountToken"
    # the same refusal without a policy file, for a job's own fields
    with pytest.raises(PolicyError) as e2:
        check_for_vc(JobTemplate.from_dict(tpl), "vca", None, own={"volumes": tpl["volumes"]})
    assert e2.value.where == "template.volumes[0].projected.sources[0].serviceAccountToken"
    # configMap, secret and downwardAPI sources carry no identity: allowed everywhere
    allowed({"image": IMG, "volumes": [{"name": "p", "projected": {"sources": [
        {"configMap": {"name": "c"}}, {"secret": {"name": "s"}},
        {"downwardAPI": {"items": [{"path": "l", "fieldRef": {"fieldPath": "metadata.labels"}}]}}]}}]}, vc="other")


@pytest.mark.parametrize("volume", [
    {"name": "v", "configMap": {"name": "c"}, "nfs": {"server": "evil", "path": "/"}},
    {"name": "v", "emptyDir": {}, "iscsi": {"targetPortal": "10.0.0.1:3260", "iqn": "iqn.x:y", "lun": 0}},
])
def test_a_volume_with_two_sources_is_refused(volume):
    """Finding 3: the second source is what a kubelet might mount; one volume, one source."""
    with pytest.raises(TemplateError) as e:
        JobTemplate.from_dict({"image": IMG, "volumes": [volume]})
    assert e.value.where == "template.volumes[0]"
    second = [k for k in volume if k != "name"]
    assert all(k in e.value.problem for k in second) and "one source" in e.value.problem


def test_every_source_key_is_judged_by_the_profile():
    """Even a volume that bypassed template validation is judged by each of its keys."""
    tpl = JobTemplate(image=IMG, volumes=({"name": "v", "configMap": {"name": "c"}, "nfs": {"server": "s",
                                                                                          "path": "/"}},))
    assert [w for w, _, _ in violations(tpl, "restricted")] == ["template.volumes[0].nfs"]


@pytest.mark.parametrize("res", ["nvidia.com/mig-1g.10gb", "nvidia.com/gpu.shared", "amd.com/gpu", "amd.com/xgmi",
                                 "gpu.intel.com/i915", "example.com/vgpu", "example.com/mig-3g", "NVIDIA.COM/GPU"])
def test_every_device_plugin_resource_is_refused(res):
    """Finding 2: any device plugin resource would let the plugin pick GPUs hived gave to others."""
    for part in ("limits", "requests"):
        with pytest.raises(TemplateError) as e:
            JobTemplate.from_dict({"image": IMG, "resources": {part: {res: "7"}}})
        assert e.value.where == f"template.resources.{part}.{res}"
        assert "device plugin" in e.value.problem and "hived chooses the GPUs" in e.value.problem
    JobTemplate.from_dict({"image": IMG, "resources": {"limits": {"example.com/rdma": "1", "ephemeral-storage": "1Gi",
                                                                  "hugepages-2Mi": "1Gi"}}})


@pytest.mark.parametrize("bad,where", [
    ({"volumes": [TOKEN_VOLUME], "volume_mounts": TOKEN_MOUNT},
     "k8s_template.volumes[0].projected.sources[0].serviceAccountToken"),
    ({"resources": {"limits": {"nvidia.com/mig-1g.10gb": "7"}}},
     "k8s_template.resources.limits.nvidia.com/mig-1g.10gb"),
    ({"resources": {"limits": {"nvidia.com/gpu.shared": "8"}}}, "k8s_template.resources.limits.nvidia.com/gpu.shared"),
    ({"volumes": [{"name": "v", "configMap": {"name": "c"}, "nfs": {"server": "s", "path": "/"}}]},
     "k8s_template.volumes[0]"),
    ({"volumes": [{"name": "v", "emptyDir": {}, "iscsi": {"targetPortal": "t:3260", "iqn": "iqn.x:y", "lun": 0}}]},
     "k8s_template.volumes[0]"),
])
def test_round2_findings_are_refused_at_submit_and_nothing_is_created(make_svc, core, jns, bad, where):
    svc = make_svc()
    with pytest.raises(RequestError) as e:
        svc.submit("alice", {"vc": "vca", "command": "true", "gpus": 2, "k8s_template": bad})
    assert e.value.field == where
    assert svc.list_jobs() == [] and svc.store.count_jobs() == 0
    svc.tick()
    assert core.list_namespaced_pod(jns).items == []
