"""k8s/deploy: typed validation, server-side dry run on the real API server, and RBAC that
allows exactly the API calls hived makes."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))   # k8s_helpers (pytest runs with --import-mode=importlib)

import copy  # noqa: E402
from urllib.parse import parse_qs, urlparse  # noqa: E402

import pytest  # noqa: E402
import yaml  # noqa: E402
import requests  # noqa: E402
from kubernetes import utils  # noqa: E402
from kubernetes.client import models as m  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

from hived.core.spec import load_spec  # noqa: E402
from hived.k8s.launcher import KubernetesLauncher  # noqa: E402
from hived.k8s.template import JobTemplate  # noqa: E402

from k8s_helpers import gang_placement, request  # noqa: E402

DEPLOY = Path(__file__).resolve().parents[2] / "k8s" / "deploy"
MODELS = {"Namespace": m.V1Namespace, "ServiceAccount": m.V1ServiceAccount, "Role": m.V1Role,
          "RoleBinding": m.V1RoleBinding, "ClusterRole": m.V1ClusterRole,
          "ClusterRoleBinding": m.V1ClusterRoleBinding, "ConfigMap": m.V1ConfigMap, "Service": m.V1Service,
          "StatefulSet": m.V1StatefulSet}


def manifests() -> list[dict]:
    kust = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    docs = []
    for name in kust["resources"]:
        docs += [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]
    return docs


def by_kind(kind: str) -> list[dict]:
    return [d for d in manifests() if d["kind"] == kind]


def test_kustomization_lists_every_manifest():
    kust = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    files = sorted(p.name for p in DEPLOY.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(kust["resources"]) == files


@pytest.mark.parametrize("doc", manifests(), ids=lambda d: f"{d['kind']}-{d['metadata']['name']}")
def test_manifest_matches_the_typed_api_model(doc):
    """Every field known to the official client's model of its kind (a typo fails here)."""
    MODELS[doc["kind"]].model_validate(doc)


def test_what_the_deploy_runs():
    (sts,) = by_kind("StatefulSet")
    assert sts["spec"]["replicas"] == 1                     # one scheduler, as HiveD
    pod = sts["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "hived"
    mounts = {v["name"]: v["mountPath"] for v in pod["containers"][0]["volumeMounts"]}
    assert mounts["data"] == "/var/lib/hived" and [c["metadata"]["name"] for c in
                                                   sts["spec"]["volumeClaimTemplates"]] == ["data"]
    args = pod["containers"][0]["args"]
    assert args[args.index("--data-dir") + 1] == mounts["data"]
    assert args[args.index("--launcher") + 1] == "kubernetes"
    (cm,) = by_kind("ConfigMap")
    spec = load_spec(cm["data"]["spec.yaml"])                # the shipped spec and template are valid
    assert spec.vcs and spec.chains
    JobTemplate.from_dict(yaml.safe_load(cm["data"]["template.yaml"]))
    assert "KubernetesSchedulerService" in cm["data"]["jupyter_server_config.json"]
    svc = [s for s in by_kind("Service") if s["spec"].get("clusterIP") != "None"][0]
    assert svc["spec"]["selector"].items() <= sts["spec"]["template"]["metadata"]["labels"].items()


def _served(kube) -> set:
    """(apiVersion, kind) pairs the API server serves (discovery, read with plain HTTP: this
    server's router wants /api/v1 without the trailing slash the client adds)."""
    token = yaml.safe_load(Path(kube.kubeconfig).read_text())["users"][0]["user"]["token"]

    def get(path):
        r = requests.get(f"{kube.server}{path}", headers={"Authorization": f"Bearer {token}"},
                         verify=str(kube.state / "certs" / "minikas.crt"),
                         timeout=5)
        return r.json() if r.ok else {}
    out = {("v1", r["kind"]) for r in get("/api/v1")["resources"] if "/" not in r["name"]}
    for g in get("/apis").get("groups") or []:      # minikas: the core group only
        for v in g["versions"]:
            out |= {(v["groupVersion"], r["kind"]) for r in get(f"/apis/{v['groupVersion']}")["resources"]
                    if "/" not in r["name"]}
    return out


def test_manifests_dry_run_on_the_api_server(kube, core, ns):
    """Server-side dry run (nothing stored) of every manifest whose kind the server serves; the
    StatefulSet's pod template also as a Pod. minikas serves only Namespaces, Nodes and Pods, so
    the other kinds are checked by the typed models above (a real cluster dry-runs them all)."""
    api = kube.api_client()
    served = _served(kube)
    checked, skipped = [], []
    for doc in manifests():
        if (doc["apiVersion"], doc["kind"]) in served:
            utils.create_from_dict(api, copy.deepcopy(doc), namespace=ns, dry_run="All")
            checked.append(doc["kind"])
        else:
            skipped.append(doc["kind"])
    (sts,) = by_kind("StatefulSet")
    tmpl = copy.deepcopy(sts["spec"]["template"])
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {**tmpl["metadata"], "name": "hived-0"},
           "spec": tmpl["spec"]}
    pod["spec"]["volumes"].append({"name": "data", "emptyDir": {}})     # what the claim template adds
    core.create_namespaced_pod(ns, pod, dry_run="All")
    checked.append("StatefulSet pod template")
    assert "Namespace" in checked, (checked, skipped)
    assert core.list_namespaced_pod(ns).items == []                      # dry run stored nothing
    assert "hived" not in [n.metadata.name for n in core.list_namespace().items]
    # and the dry run does validate: the same pod without an image is refused
    del pod["spec"]["containers"][0]["image"]
    with pytest.raises(ApiException) as e:
        core.create_namespaced_pod(ns, pod, dry_run="All")
    assert e.value.status == 422


# ---------------------------------------------------------------- RBAC

def _rules():
    role = [r for d in by_kind("Role") for r in d["rules"]]
    cluster = [r for d in by_kind("ClusterRole") for r in d["rules"]]
    return role, cluster


def _request_to_rbac(method: str, url: str) -> tuple[str, str, bool]:
    """(verb, resource[/subresource], namespaced) of one core/v1 API call, as RBAC names them."""
    u = urlparse(url)
    parts = u.path.split("/")[3:]               # after /api/v1
    namespaced = len(parts) >= 2 and parts[0] == "namespaces" and len(parts) > 2
    if namespaced:
        parts = parts[2:]
    resource = parts[0] + (f"/{parts[2]}" if len(parts) > 2 else "")
    named = len(parts) > 1
    q = parse_qs(u.query)
    verb = {"GET": "get" if named else ("watch" if q.get("watch") == ["true"] else "list"),
            "POST": "create", "DELETE": "delete", "PATCH": "patch", "PUT": "update"}[method]
    return verb, resource, namespaced


def _allowed(rules, verb, resource) -> bool:
    return any("" in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] for r in rules)


def test_rbac_allows_every_call_hived_makes_and_nothing_unused(kube, core, ns, uid, nodes, kubelet):
    n1, n2 = f"{uid}-n1", f"{uid}-n2"
    nodes.add(n1), nodes.add(n2)
    calls = []
    lau = KubernetesLauncher(kube.kubeconfig, template={"image": "img"}, namespace=ns, instance=uid,
                             bind="binding", nodes=[n1, n2], watch_timeout=1)
    # Every call, generated or raw (k8s/rest_raw.py), goes through the client's urllib3 pool.
    pool = lau.api.rest_client.pool_manager
    real = pool.request

    def record(method, url, *a, **kw):
        calls.append((method, url))
        return real(method, url, *a, **kw)
    pool.request = record
    try:
        lau.start()
        placement = gang_placement(n1, n2)
        lau.launch("j1", request(), placement, attempt=1)             # create + bind
        names = [p["metadata"]["name"] for p in lau.owned_pods(fresh=True)]   # list
        core.delete_namespaced_pod(names[0], ns, grace_period_seconds=0)
        lau.create_members("j1", request(), placement, 1, [0])        # recovery: complete a gang
        lau.mark_opportunistic(ns, names, {"chain": "V100", "pods": []})   # recovery: downgrade
        lau.logs("j1", 0)                                              # pods/log
        for n in names:
            kubelet.run(ns, n)
        lau.terminate("j1", 30)                                        # delete with grace + events
        lau.delete_gang("j1", ns, names, 0)
        lau.health_changes()
    finally:
        lau.stop()
    used = {_request_to_rbac(meth, url) for meth, url in calls}
    role, cluster = _rules()
    for verb, resource, namespaced in sorted(used):
        rules = role if namespaced else cluster
        assert _allowed(rules, verb, resource), \
            f"hived calls {verb} {resource} ({'namespaced' if namespaced else 'cluster-wide'}); not in k8s/deploy/rbac.yaml"
    granted = {(v, res, True) for r in role for res in r["resources"] for v in r["verbs"]} | \
              {(v, res, False) for r in cluster for res in r["resources"] for v in r["verbs"]}
    # 'get nodes' is granted for operators' tools (kubectl describe) but hived itself lists/watches
    unused = granted - used - {("get", "nodes", False)}
    assert not unused, f"rbac.yaml grants what hived never uses: {sorted(unused)}"
    assert not any(res == "pods" and not ns_ for _, res, ns_ in used), "pods are read in one namespace only"
