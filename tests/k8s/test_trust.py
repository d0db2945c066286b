"""Only hived's own pods are trusted: a pod someone else made with hived's labels is neither adopted
nor deleted after a restart, and is reported as an Event (k8s/trust.py)."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))   # k8s_helpers (pytest runs with --import-mode=importlib)

import copy  # noqa: E402
import json  # noqa: E402
import uuid  # noqa: E402

from hived.k8s import pod_builder as pb  # noqa: E402
from hived.k8s.trust import A_SIGNATURE, SECRET, PodSigner  # noqa: E402

JOB = {"vc": "vca", "command": "sleep 1000", "job_class": "be", "pods": 1, "gpus": 2}


def forge(hv, real, ns: str, job: str, user: str, vc: str, gpus=None, signature=None) -> str:
    """A pod made by hand from a running hived pod's labels and annotations, as another job."""
    md = real.metadata
    ann = dict(md.annotations)
    binding = json.loads(ann[pb.A_BINDING])
    if gpus is not None:
        binding["pods"][0]["gpus"] = gpus
        ann[pb.A_GPUS] = ",".join(map(str, gpus))
    req = json.loads(ann[pb.A_REQUEST])
    req.update(user=user, vc=vc)
    ann.update({pb.A_JOB: job, pb.A_BINDING: json.dumps(binding), pb.A_REQUEST: json.dumps(req)})
    if signature is None:
        ann.pop(A_SIGNATURE, None)
    else:
        ann[A_SIGNATURE] = signature
    labels = {**md.labels, pb.L_JOB: job, pb.L_USER: user, pb.L_VC: vc}
    name = pb.pod_name(job, 1, 0)
    hv.core.create_namespaced_pod(ns, {"metadata": {"name": name, "labels": labels, "annotations": ann},
                                       "spec": {"nodeName": real.spec.node_name, "restartPolicy": "Never",
                                                "containers": [{"name": "main", "image": "evil:1"}]}})
    hv.kubelet.run(ns, name)
    return name


def untrusted_events(core, ns: str, name: str) -> list:
    return [e for e in core.list_namespaced_event(ns).items
            if e.reason == "UntrustedPod" and e.involved_object.name == name]


def test_forged_pods_are_not_adopted_and_are_reported(hv, core):
    """Finding 5: a hand-made pod with a running job's labels (job j77 of user bob in VC vcb, in a
    sandbox namespace; another in vcb's own namespace without a signature; a third copying a real
    signature onto other GPUs) becomes no job after a restart, holds no GPU, and is left alone."""
    svc = hv.service()
    (a,) = hv.start_jobs(svc, JOB)
    real = hv.pods(a)[0]
    assert real.metadata.annotations.get(A_SIGNATURE), "hived signs its pods"
    sec = core.read_namespaced_secret(SECRET, svc.launcher.own_namespace)
    assert sec.data and "key" in sec.data              # the key lives in a Secret in hived's namespace
    sandbox = f"team-sandbox-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": sandbox}})
    vcb = hv.vc_namespaces["vcb"]
    forged = [(sandbox, forge(hv, real, sandbox, "j77", "bob", "vcb")),
              (vcb, forge(hv, real, vcb, "j78", "bob", "vcb")),
              (hv.vca, forge(hv, real, hv.vca, "j79", "alice", "vca", gpus=[2, 3],
                             signature=real.metadata.annotations[A_SIGNATURE]))]
    before = {o: list(g.cells) for o, g in svc.eng.alloc.grants().items()}
    svc.close()

    svc2 = hv.service()
    rec = svc2.recovered
    assert rec["adopted"] == [a]
    assert rec["cluster"]["rebuilt"] == [] and rec["cluster"]["gangs"] == 1
    assert [j["id"] for j in svc2.list_jobs()] == [a]
    assert {o: list(g.cells) for o, g in svc2.eng.alloc.grants().items()} == before
    svc2.eng.alloc.check_invariants()
    for _ in range(3):
        assert svc2.tick() == []
    assert svc2.launcher.events.flush()
    for ns, name in forged:
        assert untrusted_events(core, ns, name), f"no UntrustedPod Event for {ns}/{name}"
        pod = core.read_namespaced_pod(name, ns)       # left alone: neither adopted nor deleted
        assert pod.metadata.deletion_timestamp is None


def test_a_stolen_signature_does_not_move_a_pod(hv, core):
    """A signature copied onto a pod saying other things (namespace, GPUs, user) does not verify."""
    svc = hv.service()
    (a,) = hv.start_jobs(svc, JOB)
    real = hv.pods(a)[0]
    pod = json.loads(json.dumps(svc.launcher.api.sanitize_for_serialization(real)))
    signer = svc.launcher.signer
    assert signer.problem(pod) is None
    for change in (lambda p: p["metadata"].update(namespace=hv.vc_namespaces["vcb"]),
                   lambda p: p["metadata"]["annotations"].update({pb.A_JOB: "j99"}),
                   lambda p: p["metadata"]["annotations"].update({pb.A_REQUEST: json.dumps(
                       {**json.loads(p["metadata"]["annotations"][pb.A_REQUEST]), "user": "bob"})})):
        bad = copy.deepcopy(pod)
        bad["metadata"]["uid"] = str(uuid.uuid4())
        change(bad)
        assert signer.problem(bad) is not None


def test_the_signing_key_is_made_once_and_shared(core):
    """The first instance creates the key (and, on a bare cluster, hived's namespace); every other
    one, a standby taking over included, reads the same key."""
    own = f"hived-{uuid.uuid4().hex[:6]}"
    first = PodSigner(core, own, lambda vc: f"x-{vc}")
    key = first.key()
    assert len(key) == 32
    assert PodSigner(core, own, lambda vc: f"x-{vc}").key() == key
    sec = core.read_namespaced_secret(SECRET, own)
    assert sec.type == "Opaque" and set(sec.data) == {"key"}
