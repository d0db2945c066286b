"""KubernetesLauncher against the real API server: pods, bindings, events, deletion."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))   # k8s_helpers (pytest runs with --import-mode=importlib)

import json
import time

import pytest
from k8s_helpers import TEMPLATE, gang_placement, pods_of, request, vc_prefix, wait_events

from hived.core.jobs import JobClass, Placement, PodGroup
from hived.k8s import pod_builder as pb
from hived.k8s.launcher import KubernetesLauncher, LaunchError
from hived.k8s.template import TemplateError


@pytest.fixture
def launcher(kube, ns, uid):
    lau = KubernetesLauncher(kube.kubeconfig, template=TEMPLATE, namespace_prefix=vc_prefix(ns), instance=uid,
                             spec_version="7", watch_timeout=2).start()
    yield lau
    lau.stop()


@pytest.mark.parametrize("bind", ["node_name", "binding"])
def test_gang_lands_on_its_cells_with_annotations_and_env(kube, core, ns, uid, nodes, bind):
    n1, n2 = f"{uid}-n1", f"{uid}-n2"
    nodes.add(n1), nodes.add(n2)
    lau = KubernetesLauncher(kube.kubeconfig, template=TEMPLATE, namespace_prefix=vc_prefix(ns), instance=uid,
                             spec_version="7", bind=bind, watch_timeout=2).start()
    try:
        placement = gang_placement(n1, n2)
        lau.launch("j1", request(env={"LR": "0.1"}), placement, attempt=1)
        pods = pods_of(core, ns)
        assert [p.spec.node_name for p in pods] == [n1, n1, n2, n2]
        if bind == "binding":
            assert all(p.spec.scheduler_name == "hived" for p in pods)
        for p, pp in zip(pods, placement.pods):
            ann, lab = p.metadata.annotations, p.metadata.labels
            assert ann[pb.A_GPUS] == ",".join(map(str, pp.gpus))
            assert ann[pb.A_JOB] == "j1" and ann[pb.A_SPEC_VERSION] == "7" and ann[pb.A_ATTEMPT] == "1"
            binding = json.loads(ann[pb.A_BINDING])
            assert binding["chain"] == "V100" and not binding["opportunistic"]
            assert [(q["node"], tuple(q["gpus"]), tuple(q["cells"])) for q in binding["pods"]] == \
                [(q.node, q.gpus, q.cells) for q in placement.pods]
            assert lab[pb.L_VC] == "vc-a" and lab[pb.L_USER] == "alice" and lab[pb.L_PRIORITY] == "be"
            assert lab[pb.L_JOB] == "j1"
            c = p.spec.containers[0]
            env = {e.name: e for e in c.env}
            assert env["NVIDIA_VISIBLE_DEVICES"].value_from.field_ref.field_path == \
                f"metadata.annotations['{pb.A_GPUS}']"
            assert env["HIVED_RANK"].value == str(pp.rank) and env["HIVED_WORLD_SIZE"].value == "4"
            assert env["HIVED_GPUS"].value == ann[pb.A_GPUS] and env["HIVED_NODE"].value == pp.node
            assert env["LR"].value == "0.1" and env["DATA"].value == "/data"
            assert c.command == ["python", "train.py"] and c.image == TEMPLATE["image"]
            # GPUs never go through the device plugin's resource
            assert "nvidia.com/gpu" not in (c.resources.limits or {}) and \
                "nvidia.com/gpu" not in (c.resources.requests or {})
            assert c.resources.requests == {"cpu": "4", "memory": "16Gi"}
            assert p.spec.service_account_name == "trainer"
            assert [s.name for s in p.spec.image_pull_secrets] == ["regcred"]
            assert p.spec.node_selector == {"gpu": "v100"} and p.spec.tolerations[0].key == "gpu"
            assert p.spec.volumes[0].host_path.path == "/data"
            assert p.spec.termination_grace_period_seconds == 30 and p.spec.restart_policy == "Never"
    finally:
        lau.stop()


def test_watch_turns_status_into_job_events(launcher, core, ns, uid, nodes, kubelet):
    n1, n2 = f"{uid}-n1", f"{uid}-n2"
    launcher.launch("j1", request(), gang_placement(n1, n2), attempt=1)
    names = [p.metadata.name for p in pods_of(core, ns)]
    for name in names[:3]:
        kubelet.run(ns, name)
    time.sleep(0.3)
    assert not [e for e in launcher.poll() if e.kind == "started"], "started before the whole gang runs"
    kubelet.run(ns, names[3])
    ev = wait_events(launcher, lambda es: any(e.kind == "started" for e in es))
    assert [e.job_id for e in ev if e.kind == "started"] == ["j1"]
    for name in names[1:]:
        kubelet.exit(ns, name, 0)
    kubelet.exit(ns, names[0], 0)
    ev = wait_events(launcher, lambda es: any(e.kind == "exited" for e in es))
    ex = [e for e in ev if e.kind == "exited"]
    assert len(ex) == 1 and ex[0].exit_code == 0 and ex[0].state == "succeeded"


@pytest.mark.parametrize("end,state,code,reason", [
    ("error", "failed", 3, "Error"),
    ("oom", "oom_killed", 137, "OOMKilled"),
    ("evict", "evicted", 143, "Evicted"),
    ("node_lost", "node_lost", 255, "NodeLost"),
])
def test_a_bad_member_fails_the_gang_and_tears_it_down(launcher, core, ns, uid, kubelet, end, state, code,
                                                        reason):
    launcher.launch("j1", request(groups=[PodGroup(pods=2, gpus=2)]),
                    Placement("V100", gang_placement("a", "b").pods[:2]), attempt=1)
    names = [p.metadata.name for p in pods_of(core, ns)]
    for name in names:
        kubelet.run(ns, name)
    wait_events(launcher, lambda es: any(e.kind == "started" for e in es))
    if end == "error":
        kubelet.exit(ns, names[1], 3, message="Traceback: boom")
    elif end == "oom":
        kubelet.exit(ns, names[1], 137, reason="OOMKilled")
    elif end == "evict":
        kubelet.evict(ns, names[1])
    else:
        kubelet.node_lost(ns, names[1])
    # the surviving member is deleted with the job's grace period ...
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        p0 = core.read_namespaced_pod(names[0], ns)
        if p0.metadata.deletion_timestamp:
            break
        time.sleep(0.05)
    assert p0.metadata.deletion_timestamp is not None and p0.metadata.deletion_grace_period_seconds == 30
    # ... and the gang's cells stay held until it is gone: no exited while it still stops
    time.sleep(0.3)
    assert not [e for e in launcher.poll() if e.kind == "exited"], "exited while a member still holds its GPUs"
    kubelet.confirm_deletion(ns, names[0])
    ev = wait_events(launcher, lambda es: any(e.kind == "exited" for e in es))
    ex = [e for e in ev if e.kind == "exited"]
    assert len(ex) == 1
    assert (ex[0].state, ex[0].exit_code, ex[0].reason, ex[0].rank) == (state, code, reason, 1)
    assert names[1] in ex[0].log_tail and reason in ex[0].log_tail
    if end == "error":
        assert "boom" in ex[0].log_tail


def test_a_failed_gang_is_released_when_a_member_never_confirms_its_deletion(kube, core, ns, uid, kubelet):
    """A member whose node died (here: no Node object at all) never confirms its deletion: teardown_margin
    after its grace period it is force-deleted, with an Event, and the gang's cells go."""
    lau = KubernetesLauncher(kube.kubeconfig, template=TEMPLATE, namespace_prefix=vc_prefix(ns), instance=uid,
                             watch_timeout=2, teardown_margin=0.5).start()
    try:
        lau.launch("j1", request(groups=[PodGroup(pods=2, gpus=2)], grace_period=1.0),
                   Placement("V100", gang_placement("a", "b").pods[:2]), attempt=1)
        names = [p.metadata.name for p in pods_of(core, ns)]
        for name in names:
            kubelet.run(ns, name)
        wait_events(lau, lambda es: any(e.kind == "started" for e in es))
        t0 = time.monotonic()
        kubelet.exit(ns, names[1], 3)
        ev = wait_events(lau, lambda es: any(e.kind == "exited" for e in es))
        assert time.monotonic() - t0 >= 1.4        # grace 1 s + margin 0.5 s
        assert [(e.exit_code, e.rank) for e in ev if e.kind == "exited"] == [(3, 1)]
        assert [p.metadata.name for p in pods_of(core, ns)] == [names[1]]     # the failed one stays listed
        assert lau.events.flush()
        assert [e.involved_object.name for e in core.list_namespaced_event(ns).items
                if e.reason == "ForceDeleted"] == [names[0]]
    finally:
        lau.stop()


def test_preemption_deletes_with_grace_period(launcher, core, ns, uid, kubelet):
    launcher.launch("j1", request(), gang_placement("a", "b"), attempt=1)
    names = [p.metadata.name for p in pods_of(core, ns)]
    for name in names:
        kubelet.run(ns, name)
    wait_events(launcher, lambda es: any(e.kind == "started" for e in es))
    launcher.terminate("j1", 45)
    for name in names:
        p = core.read_namespaced_pod(name, ns)
        assert p.metadata.deletion_timestamp is not None and p.metadata.deletion_grace_period_seconds == 45
    time.sleep(0.2)
    assert not [e for e in launcher.poll() if e.kind == "exited"], "exited before the pods are gone"
    for name in names:
        kubelet.confirm_deletion(ns, name)
    ev = wait_events(launcher, lambda es: any(e.kind == "exited" for e in es))
    ex = [e for e in ev if e.kind == "exited"]
    assert len(ex) == 1 and ex[0].exit_code == 143 and "terminated by hived" in ex[0].log_tail
    assert pods_of(core, ns) == []


def test_kill_with_zero_grace_honours_the_jobs_grace_and_waits_for_the_kubelet(launcher, core, ns, kubelet):
    """A cancel (grace 0) is no force delete: pods get the job's grace, and the GPUs are handed on
    only once the kubelet confirms each pod is gone; the engine's later KILL forces nothing."""
    launcher.launch("j1", request(), gang_placement("a", "b"), attempt=1)
    launcher.terminate("j1", 0)
    pods = pods_of(core, ns)
    assert len(pods) == 4 and all(p.metadata.deletion_timestamp is not None for p in pods)
    assert {p.metadata.deletion_grace_period_seconds for p in pods} == {30}
    launcher.terminate("j1", 0)                     # grace over: still no force delete
    time.sleep(0.5)
    assert [e for e in launcher.poll() if e.kind == "exited"] == []
    assert len(pods_of(core, ns)) == 4
    for p in pods[:3]:
        kubelet.confirm_deletion(ns, p.metadata.name)
    time.sleep(0.3)
    assert [e for e in launcher.poll() if e.kind == "exited"] == []
    kubelet.confirm_deletion(ns, pods[3].metadata.name)
    ev = wait_events(launcher, lambda es: any(e.kind == "exited" for e in es))
    assert [e.kind for e in ev] == ["exited"]


def test_a_job_without_grace_gets_the_default_not_a_force_delete(kube, core, ns, kubelet):
    lau = KubernetesLauncher(kube.kubeconfig, template=TEMPLATE, namespace_prefix=vc_prefix(ns), instance=ns,
                             watch_timeout=1, default_grace=45)
    try:
        lau.launch("j1", request(grace_period=0.0, groups=[PodGroup(1, 2)]),
                   Placement("V100", gang_placement("a", "b").pods[:1]), attempt=1)
        (pod,) = pods_of(core, ns)
        assert pod.spec.termination_grace_period_seconds == 45
        lau.terminate("j1", 0)
        (pod,) = pods_of(core, ns)
        assert pod.metadata.deletion_grace_period_seconds == 45
    finally:
        lau.stop()


def test_pods_never_confirmed_gone_are_released_after_the_stated_bound(kube, core, ns):
    """A lost node's kubelet confirms nothing: teardown_margin after the grace its pod is force-deleted
    (its node "a" has no Node object) and the cells go."""
    lau = KubernetesLauncher(kube.kubeconfig, template=TEMPLATE, namespace_prefix=vc_prefix(ns), instance=ns,
                             watch_timeout=1, teardown_margin=1.0)
    try:
        lau.launch("j1", request(grace_period=1.0, groups=[PodGroup(1, 2)]),
                   Placement("V100", gang_placement("a", "b").pods[:1]), attempt=1)
        t0 = time.monotonic()
        lau.terminate("j1", 1.0)
        ev = wait_events(lau, lambda es: any(e.kind == "exited" for e in es))
        assert time.monotonic() - t0 >= 1.8 and ev[-1].kind == "exited"   # never before grace + margin
        assert pods_of(core, ns) == []                  # force-deleted: no kubelet there to run it
    finally:
        lau.stop()


@pytest.mark.parametrize("bad,where", [
    ({"imagePullPolicy": "Always"}, "template.imagePullPolicy"),
    ({"volumes": [{"name": "d", "hostPth": {"path": "/"}}]}, "template.volumes[0].hostPth"),
    ({"resources": {"limits": {"nvidia.com/gpu": "2"}}}, "template.resources.limits.nvidia.com/gpu"),
    ({"resources": {"requests": {"memory": "lots"}}}, "template.resources.requests.memory"),
    ({"env": {"NVIDIA_VISIBLE_DEVICES": "all"}}, "template.env.NVIDIA_VISIBLE_DEVICES"),
    ({"tolerations": [{"key": "x", "operator": "Exists", "efect": "NoSchedule"}]}, "template.tolerations[0].efect"),
    ({"volume_mounts": [{"name": "nope", "mountPath": "/x"}]}, "template.volume_mounts[0].name"),
    ({"namespace": "Bad_NS"}, "template.namespace"),
    ({"namespace": "elsewhere"}, "template.namespace"),      # not the namespace hived watches
])
def test_invalid_template_refused_before_any_pod(launcher, core, ns, bad, where):
    req = request()
    req.k8s_template = bad
    with pytest.raises(TemplateError) as e:
        launcher.validate(req)
    assert e.value.where == where
    with pytest.raises(TemplateError):
        launcher.launch("j1", req, gang_placement("a", "b"), attempt=1)
    assert core.list_namespaced_pod(ns).items == []


def test_default_template_is_validated_when_the_launcher_is_built(kube, ns):
    with pytest.raises(TemplateError, match="template.image"):
        KubernetesLauncher(kube.kubeconfig, template={"command": ["x"]}, namespace_prefix=vc_prefix(ns))


@pytest.mark.parametrize("bind", ["node_name", "binding"])
def test_server_refusing_mid_gang_leaves_no_half_gang(kube, core, ns, uid, bind):
    lau = KubernetesLauncher(kube.kubeconfig, template=TEMPLATE, namespace_prefix=vc_prefix(ns), instance=uid,
                             bind=bind, watch_timeout=2).start()
    try:
        # Someone else already holds rank 2's name: the server refuses that pod with 409.
        taken = pb.pod_name("j1", 1, 2)
        core.create_namespaced_pod(ns, {"metadata": {"name": taken},
                                        "spec": {"containers": [{"name": "c", "image": "x"}]}})
        with pytest.raises(LaunchError) as e:
            lau.launch("j1", request(), gang_placement("a", "b"), attempt=1)
        assert e.value.status == 409 and "j1" in str(e.value)
        left = [p.metadata.name for p in core.list_namespaced_pod(ns).items]
        assert left == [taken], f"half gang left behind: {left}"
        assert lau.poll() == []
    finally:
        lau.stop()


@pytest.mark.parametrize("pods", [1, 4])      # a gang of several pods meets it at its Service first
def test_a_missing_vc_namespace_is_refused_naming_it_and_the_command(kube, core, uid, pods):
    lau = KubernetesLauncher(kube.kubeconfig, template=TEMPLATE, namespace_prefix=f"{uid}-nope-", instance=uid,
                             watch_timeout=2)
    placement = Placement("V100", gang_placement("a", "b").pods[:pods])
    try:
        with pytest.raises(LaunchError) as e:
            lau.launch("j1", request(groups=[PodGroup(pods, 2)]), placement, attempt=1)
        assert e.value.status == 404
        assert f"namespace '{uid}-nope-vc-a' does not exist" in str(e.value)
        assert "python -m hived.k8s.policy SPEC POLICY | kubectl apply -f -" in str(e.value)
        assert lau.poll() == [] and lau.gang_states("j1") == {}
    finally:
        lau.stop()


def test_opportunistic_placement_is_labelled_so(launcher, core, ns):
    launcher.launch("j1", request(job_class=JobClass.TE), gang_placement("a", "b", opportunistic=True), attempt=2)
    pods = pods_of(core, ns)
    assert {p.metadata.labels[pb.L_PRIORITY] for p in pods} == {"opportunistic"}
    assert all(p.metadata.name.endswith(f"-a2-r{i}") for i, p in enumerate(pods))
    assert json.loads(pods[0].metadata.annotations[pb.A_BINDING])["opportunistic"] is True


def test_string_command_runs_through_a_shell(launcher, core, ns):
    launcher.launch("j1", request(command="echo hi && sleep 1", groups=[PodGroup(1, 2)]),
                    Placement("V100", gang_placement("a", "b").pods[:1]), attempt=1)
    c = pods_of(core, ns)[0].spec.containers[0]
    assert c.command == ["/bin/sh", "-c", "echo hi && sleep 1"]


@pytest.mark.parametrize("bind", ["node_name", "binding"])
def test_admission_refusing_mid_gang_leaves_no_half_gang(kube, core, uid, bind):
    """The API server's namespace admission refuses pod 3 of 4 (its namespace was deleted
    meanwhile): the two pods already created are deleted again."""
    ns = f"{uid}-adm-vc-a"
    core.create_namespace({"metadata": {"name": ns}})
    lau = KubernetesLauncher(kube.kubeconfig, template=TEMPLATE, namespace_prefix=vc_prefix(ns), instance=uid,
                             bind=bind, watch_timeout=1)
    real = lau.raw.create_pod
    made = []

    def create(namespace, body):
        if len(made) == 2:
            core.delete_namespace(ns)
        out = real(namespace, body)
        made.append(body["metadata"]["name"])
        return out
    lau.raw.create_pod = create
    try:
        with pytest.raises(LaunchError) as e:
            lau.launch("j1", request(), gang_placement("a", "b"), attempt=1)
        assert e.value.status == 404 and f"namespace {ns!r} does not exist" in str(e.value) and len(made) == 2
        assert core.list_namespaced_pod(ns).items == [], "half gang left behind"
        assert lau.poll() == [] and lau.gang_states("j1") == {}
    finally:
        lau.stop()


def test_ended_gangs_are_retired_but_their_logs_still_found(launcher, core, ns, kubelet, monkeypatch):
    import hived.k8s.launcher as L
    monkeypatch.setattr(L, "RETIRED_KEPT", 2)
    for i in range(3):
        job = f"j{i}"
        launcher.launch(job, request(groups=[PodGroup(1, 2)]), Placement("V100", gang_placement("a", "b").pods[:1]),
                        attempt=1)
        launcher.terminate(job, 0)
        kubelet.confirm_deletion(ns, pb.pod_name(job, 1, 0))
        wait_events(launcher, lambda es, job=job: any(e.kind == "exited" and e.job_id == job for e in es))
    assert launcher.gang_states("j2") == {}, "an ended gang is still tracked"
    # the last RETIRED_KEPT jobs still name their pods for logs (no kubelet here: the server says why)
    text, _ = launcher.logs("j2", 0)
    assert pb.pod_name("j2", 1, 0) in text
    assert launcher.logs("j0", 0) == ("", 0), "the oldest retired job should be forgotten"


def test_a_multi_pod_gang_gets_its_headless_service_created_first_and_deleted_at_the_end(
        launcher, core, ns, kubelet, monkeypatch):
    """The launcher's I/O for the gang Service; the manifest itself is pod_builder's (a stand-in here
    when this branch lacks it)."""
    made = []

    def service_manifest(job_id, namespace, *, instance="hived", vc=""):
        made.append((job_id, namespace, instance))
        return {"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": f"hived-{job_id}", "namespace": namespace},
                "spec": {"clusterIP": "None", "selector": {pb.L_JOB: job_id}, "publishNotReadyAddresses": True,
                         "ports": [{"name": "rdzv", "port": 29500, "protocol": "TCP", "targetPort": 29500}]}}
    monkeypatch.setattr(pb, "service_manifest", service_manifest, raising=False)
    real, order = launcher.raw.create_pod, []
    monkeypatch.setattr(launcher.raw, "create_pod",
                        lambda n, pod: order.append(("pod", len(core.list_namespaced_service(n).items)))
                        or real(n, pod))
    launcher.launch("j1", request(), gang_placement("a", "b"), attempt=1)
    assert [s.metadata.name for s in core.list_namespaced_service(ns).items] == ["hived-j1"]
    assert order and all(n == 1 for _, n in order)          # the Service existed before every pod
    launcher.launch("j2", request(groups=[PodGroup(1, 2)]), Placement("V100", gang_placement("c", "d").pods[:1]),
                    attempt=1)
    assert len(made) == 1                                    # one pod: no Service
    for p in pods_of(core, ns):
        kubelet.exit(ns, p.metadata.name, 0)
    wait_events(launcher, lambda es: any(e.kind == "exited" and e.job_id == "j1" for e in es))
    from hived.k8s.watch import wait_for
    assert wait_for(lambda: core.list_namespaced_service(ns).items == [], 10)
