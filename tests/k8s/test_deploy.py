"""k8s/deploy: typed validation, server-side dry run on the real API server, RBAC that allows
exactly the API calls hived makes (and only where it needs them), the security settings the
restricted Pod Security profile asks for, the overlay, and the Dockerfile read statically."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))   # k8s_helpers (pytest runs with --import-mode=importlib)

import copy  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
from urllib.parse import parse_qs, urlparse  # noqa: E402

import jsonpatch  # noqa: E402
import pytest  # noqa: E402
import requests  # noqa: E402
import yaml  # noqa: E402
from k8s_helpers import gang_placement, request, vc_ns, vc_prefix  # noqa: E402
from kubernetes import client, utils  # noqa: E402
from kubernetes.client import models as m  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

from hived.core.jobs import Placement, PodGroup  # noqa: E402
from hived.core.spec import load_spec  # noqa: E402
from hived.k8s import pod_builder as pb  # noqa: E402
from hived.k8s.launcher import KubernetesLauncher  # noqa: E402
from hived.k8s.policy import load_policy, vc_manifests  # noqa: E402
from hived.k8s.template import JobTemplate  # noqa: E402

DEPLOY = Path(__file__).resolve().parents[2] / "k8s" / "deploy"
BASE = DEPLOY / "base"
OVERLAY = DEPLOY / "overlays" / "example"
MODELS = {"Namespace": m.V1Namespace, "ServiceAccount": m.V1ServiceAccount, "Role": m.V1Role,
          "RoleBinding": m.V1RoleBinding, "ClusterRole": m.V1ClusterRole,
          "ClusterRoleBinding": m.V1ClusterRoleBinding, "ConfigMap": m.V1ConfigMap, "Service": m.V1Service,
          "StatefulSet": m.V1StatefulSet}
HIVED_NS = "hived"


def render(folder: Path) -> list[dict]:
    """The kustomization in ``folder`` as `kubectl kustomize` renders it, for the features these
    manifests use: resources (files and kustomizations), images, JSON 6902 patches."""
    kust = yaml.safe_load((folder / "kustomization.yaml").read_text())
    assert set(kust) <= {"apiVersion", "kind", "resources", "images", "patches"}, sorted(kust)
    docs: list[dict] = []
    for name in kust.get("resources", []):
        path = (folder / name).resolve()
        docs += render(path) if path.is_dir() else [d for d in yaml.safe_load_all(path.read_text()) if d]
    for img in kust.get("images", []):
        for d in docs:
            for c in _containers(d):
                if c["image"].split(":")[0].split("@")[0] == img["name"]:
                    c["image"] = f"{img.get('newName', img['name'])}:{img['newTag']}"
    for p in kust.get("patches", []):
        target = p["target"]
        hits = [i for i, d in enumerate(docs) if d["kind"] == target["kind"]
                and d["metadata"]["name"] == target["name"]]
        assert len(hits) == 1, p
        docs[hits[0]] = jsonpatch.apply_patch(docs[hits[0]], yaml.safe_load(p["patch"]))
    return docs


def _containers(doc: dict) -> list[dict]:
    spec = (doc.get("spec") or {}).get("template", {}).get("spec") or {}
    return spec.get("containers", [])


def manifests() -> list[dict]:
    return render(BASE)


def by_kind(kind: str, docs=None) -> list[dict]:
    return [d for d in (docs or manifests()) if d["kind"] == kind]


def test_kustomization_lists_every_manifest():
    kust = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    files = sorted(p.name for p in BASE.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(kust["resources"]) == files


@pytest.mark.parametrize("doc", manifests() + render(OVERLAY),
                         ids=lambda d: f"{d['kind']}-{d['metadata'].get('namespace', '')}-{d['metadata']['name']}")
def test_manifest_matches_the_typed_api_model(doc):
    """Every field known to the official client's model of its kind (a typo fails here)."""
    MODELS[doc["kind"]].model_validate(doc)


def test_the_overlay_turns_the_usual_knobs():
    base, over = manifests(), render(OVERLAY)
    (sts,) = by_kind("StatefulSet", over)
    c = sts["spec"]["template"]["spec"]["containers"][0]
    assert c["image"] == "registry.example/hived:0.1.0"
    assert c["resources"]["limits"]["memory"] == "4Gi"
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"] == "standard"
    assert len(over) > len(base) and by_kind("StatefulSet", base)[0] != sts


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed: compared with the "
                    "renderer above only where it is")
def test_the_renderer_agrees_with_kubectl_kustomize():
    for folder in (BASE, OVERLAY):
        out = subprocess.run(["kubectl", "kustomize", str(folder)], capture_output=True, text=True, check=True)
        key = lambda d: (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"])  # noqa: E731
        assert sorted(map(key, yaml.safe_load_all(out.stdout))) == sorted(map(key, render(folder)))
        theirs = {key(d): d for d in yaml.safe_load_all(out.stdout)}
        for d in render(folder):
            assert theirs[key(d)] == d, key(d)


def test_the_vc_namespaces_match_the_shipped_spec_and_policy():
    """vc-namespaces.yaml is what `python -m hived.k8s.policy` makes of the ConfigMap's spec and
    policy: one namespace per VC, at its Pod Security level, with hived's RoleBinding."""
    (cm,) = by_kind("ConfigMap")
    spec = load_spec(cm["data"]["spec.yaml"])
    want = vc_manifests(spec.vcs, load_policy(cm["data"]["policy.yaml"]))
    got = [d for d in yaml.safe_load_all((OVERLAY / "vc-namespaces.yaml").read_text()) if d]
    assert got == want
    levels = {d["metadata"]["name"]: d["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]
              for d in got if d["kind"] == "Namespace"}
    assert levels == {"hived-research": "baseline", "hived-product": "restricted"}


def test_what_the_deploy_runs():
    (sts,) = by_kind("StatefulSet")
    assert sts["spec"]["replicas"] == 1                     # one scheduler, as HiveD
    pod = sts["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "hived"
    c = pod["containers"][0]
    mounts = {v["name"]: v["mountPath"] for v in c["volumeMounts"]}
    assert mounts["data"] == "/var/lib/hived" and [t["metadata"]["name"] for t in
                                                   sts["spec"]["volumeClaimTemplates"]] == ["data"]
    args = c["args"]
    assert args[args.index("--data-dir") + 1] == mounts["data"]
    assert args[args.index("--launcher") + 1] == "kubernetes"
    (cm,) = by_kind("ConfigMap")
    spec = load_spec(cm["data"]["spec.yaml"])                # the shipped spec, template and policy are valid
    assert spec.vcs and spec.chains
    template = JobTemplate.from_dict(yaml.safe_load(cm["data"]["template.yaml"]))
    policy = load_policy(cm["data"]["policy.yaml"])
    from hived.k8s.policy import check_template
    for vc in spec.vcs:                                      # and the default template runs in every VC
        check_template(template, policy.for_vc(vc))
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["HIVED_K8S_POLICY"].startswith(mounts["config"] + "/")
    assert "KubernetesSchedulerService" in cm["data"]["jupyter_server_config.json"]
    svc = [s for s in by_kind("Service") if s["spec"].get("clusterIP") != "None"][0]
    assert svc["spec"]["selector"].items() <= sts["spec"]["template"]["metadata"]["labels"].items()


def test_per_user_identity_comes_from_a_mounted_tokens_file():
    """Each user is known by their own token (the spec's VC members), read from a Secret mounted as
    a file: no shared token that acts as a user in no VC, and no token on the command line."""
    (sts,) = by_kind("StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    c = pod["containers"][0]
    args = c["args"]
    tokens_file = args[args.index("--user-tokens") + 1]
    mount = next(v for v in c["volumeMounts"] if tokens_file.startswith(v["mountPath"] + "/"))
    vol = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert vol["secret"]["secretName"] == "hived-tokens" and mount.get("readOnly") is True
    assert vol["secret"]["defaultMode"] & 0o007 == 0                     # not world-readable
    assert not any(e["name"] == "HIVED_TOKEN" for e in c.get("env", []))
    assert not any(re.fullmatch(r"[0-9a-f]{32,}", a) for a in args)
    # every other mount leaves room for it (no mount nested inside a read-only ConfigMap volume)
    others = [v["mountPath"] for v in c["volumeMounts"] if v is not mount]
    assert not any(mount["mountPath"].startswith(o + "/") for o in others)


def test_the_scheduler_pod_passes_the_restricted_profile_and_probes_health():
    (sts,) = by_kind("StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    c = pod["containers"][0]
    psc, csc = pod["securityContext"], c["securityContext"]
    assert psc["runAsNonRoot"] is True and psc["runAsUser"] != 0
    assert psc["seccompProfile"]["type"] == "RuntimeDefault"
    assert csc["allowPrivilegeEscalation"] is False and csc["capabilities"]["drop"] == ["ALL"]
    assert csc["readOnlyRootFilesystem"] is True
    writable = {v["mountPath"] for v in c["volumeMounts"] if not v.get("readOnly")}
    assert writable == {"/var/lib/hived", "/tmp"}                  # the journal and scratch only
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["HOME"] in writable and env["MPLCONFIGDIR"].startswith("/tmp/")
    for kind in ("hostPath", "hostNetwork", "hostPID", "hostIPC"):
        assert kind not in json.dumps(pod)
    assert c["livenessProbe"]["httpGet"]["path"] == "/hived/api/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/hived/api/readyz"
    assert c["startupProbe"]["httpGet"]["path"] == "/hived/api/healthz"
    assert c["resources"]["requests"]["cpu"] and c["resources"]["limits"]["memory"]
    (ns,) = [d for d in by_kind("Namespace") if d["metadata"]["name"] == HIVED_NS]
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def _served(kube) -> set:
    """(apiVersion, kind) pairs the API server serves (discovery, read with plain HTTP: this
    server's router wants /api/v1 without the trailing slash the client adds)."""
    token = yaml.safe_load(Path(kube.kubeconfig).read_text())["users"][0]["user"]["token"]

    def get(path):
        r = requests.get(f"{kube.server}{path}", headers={"Authorization": f"Bearer {token}"},
                         verify=str(kube.state / "certs" / "minikas.crt"), timeout=5)
        return r.json() if r.ok else {}
    out = {("v1", r["kind"]) for r in get("/api/v1")["resources"] if "/" not in r["name"]}
    for g in get("/apis").get("groups") or []:
        for v in g["versions"]:
            out |= {(v["groupVersion"], r["kind"]) for r in get(f"/apis/{v['groupVersion']}")["resources"]
                    if "/" not in r["name"]}
    return out


def _into(doc: dict, ns: str) -> dict:
    """``doc`` moved into the test's namespace (the dry run must name one that exists), and a
    Namespace renamed so that it cannot clash with the session's others."""
    doc = copy.deepcopy(doc)
    if doc["kind"] == "Namespace":
        doc["metadata"]["name"] = f"{ns}-{doc['metadata']['name']}"
    elif "namespace" in doc["metadata"]:
        doc["metadata"]["namespace"] = ns
    return doc


def test_manifests_dry_run_on_the_api_server(kube, core, ns):
    """Server-side dry run (nothing stored) of every manifest whose kind the server serves, in a
    namespace that exists; the StatefulSet's pod template also as a Pod. The kinds the test server
    does not serve (RBAC, StatefulSet) are checked by the typed models above."""
    api = kube.api_client()
    served = _served(kube)
    checked, skipped = [], []
    for doc in manifests() + render(OVERLAY):
        if (doc["apiVersion"], doc["kind"]) in served:
            utils.create_from_dict(api, _into(doc, ns), namespace=ns, dry_run="All")
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
    assert {"Namespace", "ServiceAccount", "ConfigMap", "Service"} <= set(checked), (checked, skipped)
    assert set(skipped) <= {"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "StatefulSet"}, skipped
    assert core.list_namespaced_pod(ns).items == []                      # dry run stored nothing
    assert core.list_namespaced_config_map(ns).items == []
    assert not any(n.metadata.name.startswith(f"{ns}-") for n in core.list_namespace().items)
    # and the dry run does validate: the same pod without an image is refused
    del pod["spec"]["containers"][0]["image"]
    with pytest.raises(ApiException) as e:
        core.create_namespaced_pod(ns, pod, dry_run="All")
    assert e.value.status == 422


# ---------------------------------------------------------------- RBAC

def _request_to_rbac(method: str, url: str) -> tuple[str, str, str, str]:
    """(verb, apiGroup, resource[/subresource], namespace or "") of one API call, as RBAC names them."""
    u = urlparse(url)
    parts = u.path.strip("/").split("/")
    if parts[0] == "api":
        group, parts = "", parts[2:]                 # /api/v1/...
    else:
        group, parts = parts[1], parts[3:]           # /apis/GROUP/VERSION/...
    namespace = ""
    if len(parts) > 2 and parts[0] == "namespaces":
        namespace, parts = parts[1], parts[2:]
    resource = parts[0] + (f"/{parts[2]}" if len(parts) > 2 else "")
    named = len(parts) > 1
    q = parse_qs(u.query)
    verb = {"GET": "get" if named else ("watch" if q.get("watch") == ["true"] else "list"),
            "POST": "create", "DELETE": "delete", "PATCH": "patch", "PUT": "update"}[method]
    return verb, group, resource, namespace


def _allows(rules, verb, group, resource) -> bool:
    return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] for r in rules)


def _grants():
    """Rules by where they apply: hived's namespace (its Role), a VC namespace (the ClusterRole that
    the VCs' RoleBindings bind), cluster-wide (ClusterRoleBindings)."""
    docs = manifests()
    roles = {d["metadata"]["name"]: d["rules"] for d in by_kind("Role", docs)}
    croles = {d["metadata"]["name"]: d["rules"] for d in by_kind("ClusterRole", docs)}
    own = [r for b in by_kind("RoleBinding", docs) if b["metadata"]["namespace"] == HIVED_NS
           for r in roles[b["roleRef"]["name"]]]
    cluster = [r for b in by_kind("ClusterRoleBinding", docs) for r in croles[b["roleRef"]["name"]]]
    vc_bindings = [d for d in yaml.safe_load_all((OVERLAY / "vc-namespaces.yaml").read_text())
                   if d and d["kind"] == "RoleBinding"]
    assert vc_bindings and {b["roleRef"]["name"] for b in vc_bindings} == {"hived-jobs"}
    for b in vc_bindings:
        assert b["subjects"] == [{"kind": "ServiceAccount", "name": "hived", "namespace": HIVED_NS}]
    vc = croles["hived-jobs"]
    assert not any(b["roleRef"]["name"] == "hived-jobs" for b in by_kind("ClusterRoleBinding", docs)), \
        "hived-jobs must be bound per VC namespace, never cluster-wide"
    return own, vc, cluster


# Granted for what the calls recorded below do not reach: 'get nodes' for operators' tools
# (kubectl describe).
NOT_RECORDED = {("get", "", "nodes", "cluster")}


def test_rbac_allows_every_call_hived_makes_and_nothing_unused(kube, core, ns, uid, nodes, kubelet):
    """Every API call of the launcher (pods, the gang's Service and Events in the job's VC
    namespace; its pods listed and watched, and nodes read, cluster-wide) and of the official leader
    election (the Lease in hived's namespace) is allowed exactly where it is made; every granted
    rule is used. ``ns`` is VC vc-a's namespace, ``lease_ns`` hived's."""
    from kubernetes.leaderelection.leaderelectionrecord import LeaderElectionRecord
    from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock
    n1, n2 = f"{uid}-n1", f"{uid}-n2"
    nodes.add(n1), nodes.add(n2)
    lease_ns = f"{ns}-hived"
    core.create_namespace({"metadata": {"name": lease_ns}})
    calls = []
    lau = KubernetesLauncher(kube.kubeconfig, template={"image": "img"}, namespace_prefix=vc_prefix(ns), instance=uid,
                             bind="binding", nodes=[n1, n2], watch_timeout=1, namespace=lease_ns)
    lock = LeaseLock("hived-scheduler", lease_ns, "me")
    lock.api_instance = client.CoordinationV1Api(lau.api)           # the same recorded pool
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
        lau.launch("j1", request(), placement, attempt=1)             # Service, create + bind
        names = [p["metadata"]["name"] for p in lau.owned_pods(fresh=True)]   # list, every namespace
        assert {p["metadata"]["namespace"] for p in lau.owned_pods()} == {ns}
        assert "j1" in lau.cluster_job_ids()                          # job ids: every namespace
        core.delete_namespaced_pod(names[0], ns, grace_period_seconds=0)
        lau.create_members("j1", request(), placement, 1, [0])        # recovery: complete a gang
        lau.mark_opportunistic(ns, names, {"chain": "V100", "pods": []})   # recovery: downgrade
        lau.logs("j1", 0)                                              # pods/log
        for n in names:
            kubelet.run(ns, n)
        lau.terminate("j1", 30)                                        # delete with grace + events
        lau.delete_gang("j1", ns, names, 0)                           # pods and the gang's Service
        # a Jupyter kernel job: its Secret, created with its pod, deleted with it (k8s/kernel_pod.py)
        lau.kernel_report_url, lau.kernel_secret = "http://hived.example/", lambda job_id: "s" * 64
        one = Placement("V100", (placement.pods[0],), False)
        lau.launch("j2", request(labels={"kernel": "k"}, groups=[PodGroup(pods=1, gpus=2)]), one, attempt=1)
        lau.delete_gang("j2", ns, [pb.pod_name("j2", 1, 0)], 0)
        lau.health_changes()
        assert lau.events.flush()
        # accepted jobs and the job id counter, in hived's namespace (k8s/durable.py)
        from hived.k8s.durable import ClusterJobs
        jobs = ClusterJobs(lau.core, lease_ns, uid, lau.signer)
        assert jobs.reserve(1) == 1 and jobs.reserve(1) == 2          # create, then read + update
        jobs.put("j1", {"user": "alice", "vc": "vc-a", "groups": [{"pods": 1, "gpus": 2}]}, 1.0)
        assert list(jobs.load()) == ["j1"]                             # list
        jobs.delete("j1")
        # leader election: read (none yet), create, read, renew
        assert lock.get("hived-scheduler", lease_ns)[0] is False
        rec = LeaderElectionRecord("me", "15", "2026-01-01 00:00:00.123456", "2026-01-01 00:00:00.123456")
        assert lock.create("hived-scheduler", lease_ns, rec)
        assert lock.get("hived-scheduler", lease_ns)[0] is True
        assert lock.update("hived-scheduler", lease_ns, rec)
    finally:
        lau.stop()
        core.delete_namespace(lease_ns)
    where = {ns: "vc", lease_ns: "own", "": "cluster"}
    used = {(verb, group, res, where[nsp]) for verb, group, res, nsp in map(lambda c: _request_to_rbac(*c), calls)}
    own, vc, cluster = _grants()
    rules = {"own": own, "vc": vc, "cluster": cluster}
    for verb, group, res, scope in sorted(used):
        assert _allows(rules[scope], verb, group, res), \
            f"hived calls {verb} {group or 'core'}/{res} in the {scope} scope; " \
            "k8s/deploy/base/rbac.yaml does not allow it"
    granted = {(v, g, res, scope) for scope, rs in rules.items() for r in rs for g in r["apiGroups"]
               for res in r["resources"] for v in r["verbs"]}
    unused = granted - used - NOT_RECORDED
    assert not unused, f"rbac.yaml grants what hived never uses: {sorted(unused)}"
    assert {(v, res) for v, _, res, scope in used if res.startswith("pods") and scope != "vc"} == \
        {("list", "pods"), ("watch", "pods")}, "pods are written in VC namespaces only, and read everywhere"
    assert not any(res in ("services", "events") and scope != "vc" for _, _, res, scope in used)
    assert not any(g == "coordination.k8s.io" and scope != "own" for _, g, _, scope in used)
    assert not any(res == "configmaps" and scope != "own" for _, _, res, scope in used)
    # Secrets outside hived's namespace: a kernel job's own, created and deleted, never read
    assert {(v, scope) for v, _, res, scope in used if res == "secrets" and scope != "own"} == \
        {("create", "vc"), ("delete", "vc")}


# ---------------------------------------------------------------- the image

def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of k8s/deploy/Dockerfile: comments dropped, continuations joined."""
    out, buf = [], ""
    for line in (DEPLOY / "Dockerfile").read_text().splitlines():
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        buf += line.rstrip()
        if buf.endswith("\\"):
            buf = buf[:-1] + " "
            continue
        word, _, rest = buf.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    assert not buf, "a continuation runs off the end of the Dockerfile"
    return out


def stages() -> list[list[tuple[str, str]]]:
    out: list = []
    for ins, args in dockerfile():
        if ins == "FROM":
            out.append([])
        out[-1].append((ins, args))
    return out


def test_the_image_is_a_pinned_slim_base_running_as_a_user_without_privileges():
    st = stages()
    assert len(st) >= 2, "build tools stay in a build stage"
    for s in st:
        base = s[0][1].split()[0]
        name, _, tag = base.partition(":")
        assert name == "python" and re.fullmatch(r"\d+\.\d+\.\d+-slim-\w+(@sha256:[0-9a-f]{64})?", tag), base
    final = st[-1]
    users = [a for i, a in final if i == "USER"]
    assert users, "the final stage names its user"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, "numeric and not root: runAsNonRoot can verify it"
    (sts,) = by_kind("StatefulSet")
    assert str(sts["spec"]["template"]["spec"]["securityContext"]["runAsUser"]) == uid
    run = " ".join(a for i, a in final if i == "RUN")
    assert "pip uninstall -y pip setuptools wheel" in run                   # no installer left
    assert not re.search(r"apt-get install|gcc|build-essential", run)
    assert "--no-index" in run                                              # offline, from the build stage
    assert not any(i == "ADD" for s in st for i, _ in s)                    # nothing fetched at build time
    entry = json.loads(next(a for i, a in final if i == "ENTRYPOINT"))
    cmd = json.loads(next(a for i, a in final if i == "CMD"))
    assert entry == ["hived"] and cmd[:1] == ["serve"]
    expose = [a for i, a in final if i == "EXPOSE"]
    ports = {p["containerPort"] for p in sts["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert {int(p) for e in expose for p in e.split()} == ports


def test_the_build_context_holds_only_what_the_image_installs():
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    rules = [r.strip() for r in ignore if r.strip() and not r.startswith("#")]
    assert rules[0] == "*"                                      # everything out, then only the sources in
    copied = {src for s in stages() for i, a in s if i == "COPY" and "--from" not in a for src in a.split()[:-1]}
    kept = {r[1:].rstrip("/") for r in rules if r.startswith("!")}
    assert copied <= kept, copied - kept


def dockerignore_excludes(rules: list[str], path: str) -> bool:
    """Whether the build context leaves out ``path`` (relative, '/'-separated), by Docker's documented
    .dockerignore rules: patterns rooted at the context, ``*``/``?`` within one path element, ``**``
    across any number of them, ``!`` re-includes, the last matching rule wins, and a rule matching a
    parent folder matches everything under it."""
    def rx(pat: str) -> re.Pattern:
        out, i = "", 0
        pat = pat.strip("/")
        while i < len(pat):
            if pat.startswith("**/", i):
                out, i = out + "(?:.*/)?", i + 3
            elif pat.startswith("**", i):
                out, i = out + ".*", i + 2
            else:
                out += {"*": "[^/]*", "?": "[^/]"}.get(pat[i], re.escape(pat[i]))
                i += 1
        return re.compile(out)
    parts = path.split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    excluded = False
    for rule in rules:
        negate = rule.startswith("!")
        pattern = rx(rule[1:] if negate else rule)
        if any(pattern.fullmatch(p) for p in prefixes):
            excluded = not negate
    return excluded


def build_context_of_the_dockerfile(dest: Path) -> Path:
    """What the build stage's COPY lines put into its WORKDIR, from the context the .dockerignore leaves."""
    root = DEPLOY.parents[1]
    lines = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    rules = [r.strip() for r in lines if r.strip() and not r.lstrip().startswith("#")]
    context = sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                     if p.is_file() and ".git" not in p.relative_to(root).parts[:1]
                     and not p.relative_to(root).parts[0].startswith(".venv"))
    context = [p for p in context if not dockerignore_excludes(rules, p)]
    build = stages()[0]
    assert "pip wheel" in " ".join(a for i, a in build if i == "RUN")
    for ins, args in build:
        if ins != "COPY":
            continue
        assert not args.startswith("--"), f"COPY {args}: flags are not modelled here"
        *srcs, target = args.split()
        for src in srcs:
            src = src.rstrip("/")
            files = [p for p in context if p == src or p.startswith(src + "/")]
            assert files, f"COPY {src}: nothing of it is in the build context (.dockerignore)"
            for f in files:
                rel = Path(f).name if f == src else Path(f).relative_to(src)
                out = dest / target / rel if (target.endswith("/") or f != src) else dest / target
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(root / f, out)
    return dest


def test_the_dockerignore_rules_are_read_as_docker_reads_them():
    rules = ["*", "!core/", "**/__pycache__", "k8s/deploy/", "!k8s/", "k8s/deploy/"]
    assert dockerignore_excludes(rules, "service/app.py")
    assert not dockerignore_excludes(rules, "core/engine.py")
    assert dockerignore_excludes(rules, "core/__pycache__/engine.pyc")
    assert dockerignore_excludes(rules, "k8s/deploy/Dockerfile") and not dockerignore_excludes(rules, "k8s/nodes.py")


def test_the_wheel_builds_from_exactly_what_the_dockerfile_copies_and_serves(tmp_path):
    """Finding 8: the build stage's `pip wheel .` over its COPY lines, as the image builds it (offline:
    no build isolation, no dependencies), then `hived serve --help` from that wheel alone."""
    src = build_context_of_the_dockerfile(tmp_path / "src")
    wheels = tmp_path / "wheels"
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                        "--wheel-dir", str(wheels), str(src)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (wheel,) = wheels.glob("hived-*.whl")
    target = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target", str(target),
                        str(wheel)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    # -S: no .pth file runs, so the editable install of this checkout is not on the path; the wheel is,
    # ahead of the dependencies installed beside the interpreter.
    deps = [p for p in sys.path if p.endswith("site-packages")]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join([str(target), *deps]), "HOME": str(tmp_path)}
    where = subprocess.run([sys.executable, "-S", "-c", "import hived.cli.main, hived.service, hived.k8s.service,"
                            " hived.reports, hived.testing; print(hived.cli.main.__file__)"],
                           capture_output=True, text=True, env=env, timeout=120)
    assert where.returncode == 0, where.stderr[-3000:]
    assert where.stdout.strip().startswith(str(target)), where.stdout
    r = subprocess.run([sys.executable, "-S", str(target / "bin" / "hived"), "serve", "--help"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "--launcher" in r.stdout and "--spec" in r.stdout


# ---------------------------------------------------------------- the deployment, run

def test_the_shipped_deployment_runs_with_per_user_identity(kube, core, ns, uid, nodes, tmp_path):
    """The StatefulSet's command and environment, run as a process against the test API server
    with the ConfigMap's files and a tokens file where the pod mounts them: each user is known by
    their own token (sees their VC, may submit to it; no 403), the shipped template and policy
    launch a pod, and a template with hostPath / is refused naming the field."""
    import os
    import socket
    import time
    (sts,) = by_kind("StatefulSet")
    (cm,) = by_kind("ConfigMap")
    c = sts["spec"]["template"]["spec"]["containers"][0]
    mounts = {v["name"]: v["mountPath"] for v in c["volumeMounts"]}
    # the pod's paths, moved under tmp_path
    remap = {mounts["config"]: tmp_path / "config", mounts["tokens"]: tmp_path / "tokens",
             mounts["data"]: tmp_path / "data", mounts["tmp"]: tmp_path / "tmp"}

    def local(path: str) -> str:
        for mp, here in remap.items():
            if path == mp or path.startswith(mp + "/"):
                return str(here) + path[len(mp):]
        return path
    for d in remap.values():
        d.mkdir()
    for key, text in cm["data"].items():
        if key == "spec.yaml":      # node names are cluster-wide: this test's own
            text = text.replace("cellAddress: gpu-node-", f"cellAddress: {uid}-gpu-node-")
        if key == "policy.yaml":    # and so are namespaces
            assert "namespacePrefix: hived-\n" in text
            text = text.replace("namespacePrefix: hived-\n", f"namespacePrefix: {vc_prefix(ns)}\n")
        (remap[mounts["config"]] / key).write_text(text)
    for i in range(2):
        nodes.add(f"{uid}-gpu-node-{i}")
    research = vc_ns(core, ns, "research")      # applied by the admin; product's is not
    tokens = {"tok-alice-0123456789": "alice", "tok-bob-0123456789": "bob"}
    args = [local(a) for a in c["args"]]
    (Path(args[args.index("--user-tokens") + 1])).write_text(json.dumps(tokens))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args[args.index("--ip") + 1], args[args.index("--port") + 1] = "127.0.0.1", str(port)
    if os.geteuid() == 0:    # the pod runs as user 10001; a test machine may run its tests as root
        args.append("--allow-root")
    env = {**os.environ, **{e["name"]: local(e["value"]) for e in c["env"] if "value" in e},
           "HIVED_K8S_KUBECONFIG": kube.kubeconfig, "HIVED_K8S_NAMESPACE": ns, "HIVED_K8S_INSTANCE": uid}
    env.pop("HIVED_TOKEN", None)
    exe = Path(sys.executable).with_name("hived")
    proc = subprocess.Popen([str(exe), *c["command"][1:], *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}/hived/api"
    try:
        def call(method, path, token, body=None):
            return requests.request(method, f"{base}/{path}", json=body, timeout=10,
                                    headers={"Authorization": f"token {token}"})
        end = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stdout.read()
            try:
                r = call("GET", "status", "tok-alice-0123456789")
                if r.ok and r.json().get("ok"):
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < end, "hived serve did not come up"
            time.sleep(0.3)
        assert r.json()["user"] == "alice" and r.json()["vcs"] == ["research"]
        assert call("GET", "status", "tok-bob-0123456789").json()["vcs"] == ["product"]
        assert call("GET", "status", "not-a-token").status_code in (401, 403)
        ok = call("POST", "jobs", "tok-alice-0123456789",
                  {"vc": "research", "command": "nvidia-smi -L", "gpus": 2, "job_class": "be"})
        assert ok.status_code == 201, ok.text
        bad = call("POST", "jobs", "tok-alice-0123456789",
                   {"vc": "research", "command": "x", "gpus": 2,
                    "k8s_template": {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}})
        assert bad.status_code == 400 and "k8s_template.volumes[0].hostPath" in bad.text, bad.text
        end = time.monotonic() + 30
        while not core.list_namespaced_pod(research).items:
            assert time.monotonic() < end, "the job's pod was not created"
            time.sleep(0.2)
        pod = core.list_namespaced_pod(research).items[0]
        assert pod.spec.containers[0].image.startswith("nvcr.io/nvidia/")
        assert pod.spec.containers[0].security_context.run_as_user == 1000
        assert pod.metadata.labels["hived.io/user"] == "alice"
        assert core.list_namespaced_pod(ns).items == []         # hived's own namespace: no job
        # a VC whose namespace the admin has not applied: refused, saying which and how
        job = call("POST", "jobs", "tok-bob-0123456789", {"vc": "product", "command": "x", "gpus": 2})
        assert job.status_code == 201, job.text
        jid, end = job.json()["id"], time.monotonic() + 30
        while not (view := call("GET", f"jobs/{jid}", "tok-bob-0123456789").json()).get("last_error"):
            assert time.monotonic() < end, view
            time.sleep(0.2)
        missing = f"{vc_prefix(ns)}product"
        assert f"namespace '{missing}' does not exist" in view["last_error"], view
        assert "python -m hived.k8s.policy SPEC POLICY | kubectl apply -f -" in view["last_error"]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
