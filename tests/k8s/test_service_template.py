"""A job's own Kubernetes template fields through the service: checked when submitted, on the pods
when launched, kept across a restart of hived."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))   # k8s_helpers (pytest runs with --import-mode=importlib)

import json  # noqa: E402

import pytest  # noqa: E402
from k8s_helpers import spec_for, vc_prefix  # noqa: E402

from hived.core.engine import RequestError  # noqa: E402
from hived.k8s import pod_builder as pb  # noqa: E402
from hived.k8s.launcher import KubernetesLauncher  # noqa: E402
from hived.k8s.service import KubernetesSchedulerService  # noqa: E402
from hived.k8s.watch import wait_for  # noqa: E402

DEFAULT = {"image": "registry.example/train:1", "env": {"DATA": "/data"}}


@pytest.fixture
def make_svc(kube, ns, uid, nodes, tmp_path):
    for i in range(2):
        nodes.add(f"{uid}-n{i}")
    spec = tmp_path / "spec.yaml"
    spec.write_text(json.dumps(spec_for(uid)))
    made = []

    def make():
        lau = KubernetesLauncher(kube.kubeconfig, template=DEFAULT, namespace_prefix=vc_prefix(ns), instance=uid,
                                 watch_timeout=1, pipeline=True)
        svc = KubernetesSchedulerService(str(spec), tmp_path / "data", launcher=lau, tick_seconds=0.05)
        made.append(svc)
        return svc
    yield make
    for svc in made:
        try:
            svc.close()
        except Exception:
            pass


@pytest.mark.parametrize("bad,where", [
    ({"volumes": [{"name": "d", "hostPth": {"path": "/"}}]}, "k8s_template.volumes[0].hostPth"),
    ({"resources": {"limits": {"nvidia.com/gpu": "1"}}}, "k8s_template.resources.limits.nvidia.com/gpu"),
    ({"imagee": "x"}, "k8s_template.imagee"),
])
def test_bad_template_fields_are_refused_at_submit_and_nothing_is_queued(make_svc, core, jns, bad, where):
    svc = make_svc()
    with pytest.raises(RequestError) as e:
        svc.submit("alice", {"vc": "vca", "command": "true", "gpus": 2, "k8s_template": bad})
    assert e.value.field == where
    assert svc.list_jobs() == [] and svc.store.count_jobs() == 0
    svc.tick()
    assert core.list_namespaced_pod(jns).items == []


def test_job_template_fields_reach_the_pods_and_survive_a_restart(make_svc, core, jns):
    svc = make_svc()
    own = {"image": "nvcr.io/nvidia/pytorch:24.05-py3", "env": {"LR": "0.1"},
           "resources": {"requests": {"memory": "64Gi"}}}
    job = svc.submit("alice", {"vc": "vca", "command": "python train.py", "gpus": 2, "job_class": "be",
                               "k8s_template": own})
    assert job["k8s_template"] == own
    assert wait_for(lambda: svc.tick() is not None and len(core.list_namespaced_pod(jns).items) == 1, 10)
    pod = core.list_namespaced_pod(jns).items[0]
    c = pod.spec.containers[0]
    env = {e.name: e.value for e in c.env}
    assert c.image == own["image"] and env["LR"] == "0.1" and env["DATA"] == "/data"
    assert c.resources.requests["memory"] == "64Gi"
    assert json.loads(pod.metadata.annotations[pb.A_REQUEST])["k8s_template"] == own
    svc.close()
    svc2 = make_svc()
    assert svc2.recovered["adopted"] == [job["id"]]
    assert svc2.eng.job(job["id"]).request.k8s_template == own


def test_working_directory_order_job_template_then_workdir_then_default():
    from hived.core.jobs import JobClass, JobRequest, Placement, PodGroup, PodPlacement
    from hived.k8s.template import JobTemplate
    placement = Placement("V100", (PodPlacement(0, "n1", (0,), ("c",)),))
    default = JobTemplate.from_dict({"image": "img", "working_dir": "/default"})

    def workdir(**kw):
        req = JobRequest(user="alice", vc="vca", command="x", job_class=JobClass.BE, groups=[PodGroup(1, 1)], **kw)
        tpl = default.merged(req.k8s_template)
        return pb.build_pods("j1", req, placement, 1, tpl, namespace="ns")[0]["spec"]["containers"][0]["workingDir"]
    assert workdir() == "/default"
    assert workdir(workdir="/home/alice/proj") == "/home/alice/proj"
    assert workdir(workdir="/home/alice/proj", k8s_template={"working_dir": "/workspace"}) == "/workspace"


@pytest.mark.parametrize("bad,where", [
    ({"volumes": [{"name": "root", "hostPath": {"path": "/"}}],
      "volume_mounts": [{"name": "root", "mountPath": "/host"}]}, "k8s_template.volumes[0].hostPath"),
    ({"service_account": "hived"}, "k8s_template.service_account"),
    ({"service_account": "default"}, "k8s_template.service_account"),
    ({"security_context": {"privileged": True}}, "k8s_template.security_context.privileged"),
    ({"host_network": True}, "k8s_template.host_network"),
])
def test_without_an_admin_policy_a_jobs_own_fields_meet_the_restricted_default(make_svc, core, jns, bad, where):
    """A launcher given no policy still holds a job to the default one (restricted, no service
    account) for what the job asks for itself; nothing is queued or created."""
    svc = make_svc()
    assert svc.launcher.policy is None
    with pytest.raises(RequestError) as e:
        svc.submit("alice", {"vc": "vca", "command": "true", "gpus": 2, "k8s_template": bad})
    assert e.value.field == where
    assert svc.store.count_jobs() == 0 and core.list_namespaced_pod(jns).items == []


def test_without_an_admin_policy_the_default_template_is_the_admins_word(kube, ns, uid):
    """The default template (the admin's) may mount what the default policy would refuse a job."""
    from hived.core.jobs import JobRequest, PodGroup
    lau = KubernetesLauncher(kube.kubeconfig, namespace_prefix=vc_prefix(ns), instance=uid, watch_timeout=1,
                             template={"image": "img", "volumes": [{"name": "d", "hostPath": {"path": "/data"}}],
                                       "service_account": "trainer"})
    req = JobRequest(user="alice", vc="vca", command="x", groups=[PodGroup(1, 1)], k8s_template={"env": {"A": "1"}})
    assert lau.validate(req).volumes[0]["hostPath"] == {"path": "/data"}
    req.k8s_template = {"service_account": "other"}
    with pytest.raises(ValueError) as e:
        lau.validate(req)
    assert e.value.where == "template.service_account"
