"""Pod manifests for one gang: the GPUs hived chose, written where the pod can see them.

Each gang member becomes one pod. Two ways to put it on its node (``bind``):

- ``"node_name"``: the pod is created with ``spec.nodeName`` already set. One
  API call per pod; no scheduler ever looks at it. Use this when hived is the
  only thing deciding where GPU pods go (the default).
- ``"binding"``: the pod is created with ``spec.schedulerName: hived`` and no
  node, then bound through its ``pods/{name}/binding`` subresource, exactly as
  a scheduler does. The default scheduler ignores pods that name another
  scheduler, so the pod waits unbound until hived binds it; admission
  webhooks and quota see an ordinary pending pod first. Two calls per pod.

Either way the pod carries, as hivedscheduler's pods do:

- annotation ``hived.io/gpu-isolation`` = this pod's GPU indices ("0,1"), and
  ``NVIDIA_VISIBLE_DEVICES`` taken from it through the downward API, so the
  NVIDIA container runtime exposes exactly those GPUs;
- annotation ``hived.io/gang-binding`` = the binding of the *whole* gang
  (chain, per pod: rank, node, GPU indices, cells) so that any one surviving
  pod tells a restarted hived where all its siblings belong (HiveD, OSDI '20, §4);
- annotations with the job id, the request, the spec version and the attempt
  (kept small: each byte is paid on every create and every watch event; user,
  VC and class are in the request);
- labels for selection: managed-by, instance, job, attempt, VC, user, priority class;
- CPU and memory requests and limits from the job's ``cpus``/``memory_gb`` (or
  the node-share ``demands`` the engine resolved): what hived accounted for on
  the node, so a template's own values apply only where the job says nothing;
- a container security context that the ``restricted`` Pod Security profile
  accepts (``RuntimeDefault`` seccomp, no privilege escalation, every
  capability dropped, non-root), which a template may relax only as far as
  its VC's policy allows (k8s/policy.py checks the result), and no API token
  unless the template names a service account;
- the gang's rendezvous in torchrun's names: ``MASTER_ADDR`` (rank 0's DNS
  name), ``MASTER_PORT``, ``WORLD_SIZE``, ``RANK``, plus ``HIVED_PEERS`` (every
  member's DNS name, by rank). The names resolve through the headless Service
  of a multi-pod gang (``service_manifest``; the launcher creates it with the
  pods) and each pod's ``hostname``/``subdomain``.
"""
from __future__ import annotations

import functools
import hashlib
import json
import re
from typing import Any

from hived.core.jobs import JobRequest, Placement

from .template import JobTemplate

PREFIX = "hived.io/"
A_JOB = PREFIX + "job-id"
A_RANK = PREFIX + "rank"
A_ATTEMPT = PREFIX + "attempt"
A_GPUS = PREFIX + "gpu-isolation"
A_BINDING = PREFIX + "gang-binding"
A_SPEC_VERSION = PREFIX + "spec-version"
A_REQUEST = PREFIX + "request"

L_MANAGED = "app.kubernetes.io/managed-by"
L_INSTANCE = PREFIX + "instance"
L_JOB = PREFIX + "job"
L_VC = PREFIX + "vc"
L_USER = PREFIX + "user"
L_PRIORITY = PREFIX + "priority-class"
L_RANK = PREFIX + "rank"
L_ATTEMPT = PREFIX + "attempt"

MASTER_PORT = 29500           # torchrun's default rendezvous port
# What the restricted Pod Security profile asks of every pod and container.
POD_SECURITY_DEFAULTS = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_SECURITY_DEFAULTS = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}

BIND_MODES = ("node_name", "binding")
CONTAINER = "main"
SCHEDULER_NAME = "hived"

_BAD = re.compile(r"[^a-z0-9-]+")
_LABEL_BAD = re.compile(r"[^A-Za-z0-9_.-]+")


def slug(text: str, limit: int = 40) -> str:
    """A DNS-label-safe form of ``text``; a hash keeps distinct ids distinct."""
    s = _BAD.sub("-", text.lower()).strip("-")
    if s != text or len(s) > limit:
        h = hashlib.sha1(text.encode()).hexdigest()[:8]
        s = f"{s[: limit - 9].strip('-')}-{h}".strip("-")
    return s or "x"


def label_value(text: str) -> str:
    """A label-safe form of ``text`` (<= 63 chars); the exact value goes in an annotation."""
    s = _LABEL_BAD.sub("_", text).strip("_.-")
    if s != text or len(s) > 63:
        h = hashlib.sha1(text.encode()).hexdigest()[:8]
        s = f"{s[:54].strip('_.-')}_{h}".strip("_.-")
    return s


def pod_name(job_id: str, attempt: int, rank: int) -> str:
    return f"hived-{slug(job_id)}-a{attempt}-r{rank}"


def service_name(job_id: str) -> str:
    """The headless Service of a multi-pod gang (a DNS-1035 label: it starts with a letter)."""
    return f"hived-{slug(job_id)}"


def pod_dns(job_id: str, attempt: int, rank: int, namespace: str, cluster_domain: str = "") -> str:
    """A gang member's DNS name through its gang's headless Service. Without ``cluster_domain``
    the name ends in ``.svc`` and the pod's DNS search path completes it (any cluster domain)."""
    name = f"{pod_name(job_id, attempt, rank)}.{service_name(job_id)}.{namespace}.svc"
    return f"{name}.{cluster_domain}" if cluster_domain else name


def service_manifest(job_id: str, namespace: str, *, instance: str = "hived", vc: str = "",
                     port: int = MASTER_PORT) -> dict:
    """The headless Service that gives a multi-pod gang's pods their DNS names (create it with the
    pods, delete it with the job). ``publishNotReadyAddresses``: peers must resolve before any
    member is ready, or the rendezvous waits for ever."""
    labels = {L_MANAGED: "hived", L_INSTANCE: label_value(instance), L_JOB: label_value(job_id)}
    if vc:
        labels[L_VC] = label_value(vc)
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": service_name(job_id), "namespace": namespace, "labels": labels,
                         "annotations": {A_JOB: job_id}},
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "type": "ClusterIP",
                     "selector": {L_MANAGED: "hived", L_INSTANCE: label_value(instance),
                                  L_JOB: label_value(job_id)},
                     "ports": [{"name": "rendezvous", "port": port, "targetPort": port, "protocol": "TCP"}]}}


def _overlay(defaults: dict, own: dict) -> dict:
    """``own`` on top of ``defaults``, one level into nested mappings (capabilities, seccompProfile)."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in defaults.items()}
    for k, v in own.items():
        out[k] = {**out[k], **v} if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def pod_security_context(template: JobTemplate) -> dict:
    """The pod's securityContext: restricted defaults with the template's settings on top."""
    return _overlay(POD_SECURITY_DEFAULTS, template.pod_security_context)


def container_security_context(template: JobTemplate) -> dict:
    """The container's securityContext: restricted defaults with the template's on top. A template
    that asks for privileges (privileged, CAP_SYS_ADMIN) and says nothing of privilege escalation
    gets none of the default: the API refuses that pair."""
    sc = _overlay(CONTAINER_SECURITY_DEFAULTS, template.security_context)
    own = template.security_context
    adds = {str(c).upper().removeprefix("CAP_") for c in (own.get("capabilities") or {}).get("add") or []}
    if "allowPrivilegeEscalation" not in own and (own.get("privileged") or "SYS_ADMIN" in adds):
        del sc["allowPrivilegeEscalation"]
    return sc


def resources_of(template: JobTemplate, cpus: float | None, memory_gb: float | None) -> dict:
    """Requests and limits: the job's CPU and memory (requests = limits: the share hived accounted
    for, no more) over the template's, which only adds other resources or fills what the job leaves."""
    resources = {k: dict(v) for k, v in template.resources.items()}
    for key, amount in (("cpu", None if cpus is None else _fmt_quantity(cpus)),
                        ("memory", None if memory_gb is None else f"{int(round(memory_gb * 1024))}Mi")):
        if amount is not None:
            resources.setdefault("requests", {})[key] = amount
            resources.setdefault("limits", {})[key] = amount
    return {k: v for k, v in resources.items() if v}


def gang_binding(placement: Placement, priority: int | None = None) -> dict:
    """The whole gang's binding as stored in every pod (and read back by recovery)."""
    out = {"chain": placement.chain, "opportunistic": placement.opportunistic,
           "pods": [{"rank": p.rank, "node": p.node, "gpus": list(p.gpus), "cells": list(p.cells)}
                    for p in placement.pods]}
    if priority is not None:
        out["priority"] = priority
    return out


@functools.lru_cache(maxsize=1)
def _request_defaults() -> dict:
    """A request's fields at their defaults (user and VC are always kept): built once, read per pod."""
    from hived.core.engine_records import request_to_dict
    return request_to_dict(JobRequest(user="", vc=""))


def request_summary(request: JobRequest) -> dict:
    """The request as stored on the pods: request_to_dict without empty fields (request_from_dict
    fills the defaults back in). Every byte is paid on each pod create and watch event."""
    from hived.core.engine_records import request_to_dict
    defaults = _request_defaults()
    d = {k: v for k, v in request_to_dict(request).items()
         if k in ("user", "vc", "groups") or (v not in (None, {}, [], "") and v != defaults.get(k))}
    d["groups"] = [{k: v for k, v in g.items() if v is not None} for g in d.get("groups", [])]
    return d


def command_of(request: JobRequest, template: JobTemplate) -> tuple[list, list]:
    """(command, args): the request's command wins over the template's."""
    cmd = request.command
    if isinstance(cmd, str) and cmd.strip():
        return ["/bin/sh", "-c", cmd], []
    if isinstance(cmd, (list, tuple)) and cmd:
        return [str(c) for c in cmd], []
    return list(template.command), list(template.args)


def _group_of(request: JobRequest, rank: int):
    i = rank
    for g in request.groups:
        if i < g.pods:
            return g
        i -= g.pods
    return request.groups[-1] if request.groups else None


def _fmt_quantity(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{int(round(x * 1000))}m"


def build_pods(job_id: str, request: JobRequest, placement: Placement, attempt: int,
               template: JobTemplate, *, namespace: str, instance: str = "hived",
               bind: str = "node_name", spec_version: str = "", priority: int | None = None,
               scheduler_name: str = SCHEDULER_NAME, demands: list | None = None,
               master_port: int = MASTER_PORT, cluster_domain: str = "") -> list[dict]:
    """One manifest (a plain dict, camelCase as the API takes it) per pod of the gang.

    ``demands``: (cpus, memory_gb[, gpus]) per rank as the engine resolved them (node-share defaults
    filled in); without it a group's own ``cpus``/``memory_gb`` are used where set."""
    if bind not in BIND_MODES:
        raise ValueError(f"bind: {bind!r} is not one of {BIND_MODES}")
    binding_json = json.dumps(gang_binding(placement, priority), separators=(",", ":"), sort_keys=True)
    request_json = json.dumps(request_summary(request), separators=(",", ":"), sort_keys=True)
    command, args = command_of(request, template)
    size = len(placement.pods)
    gang = size > 1
    peers = [pod_dns(job_id, attempt, p.rank, namespace, cluster_domain) if gang else "localhost"
             for p in sorted(placement.pods, key=lambda p: p.rank)]
    pod_sc = pod_security_context(template)
    container_sc = container_security_context(template)
    pods = []
    for pp in placement.pods:
        gpus = ",".join(str(g) for g in pp.gpus)
        labels = {**template.labels,
                  L_MANAGED: "hived", L_INSTANCE: label_value(instance), L_JOB: label_value(job_id),
                  L_VC: label_value(request.vc), L_USER: label_value(request.user),
                  L_PRIORITY: "opportunistic" if placement.opportunistic else request.job_class.value,
                  L_RANK: str(pp.rank), L_ATTEMPT: str(attempt)}
        annotations = {**template.annotations,
                       A_JOB: job_id, A_RANK: str(pp.rank),
                       A_ATTEMPT: str(attempt), A_GPUS: gpus if gpus else "none",
                       A_BINDING: binding_json, A_REQUEST: request_json}
        if spec_version:
            annotations[A_SPEC_VERSION] = str(spec_version)
        env = [{"name": "NVIDIA_VISIBLE_DEVICES",
                "valueFrom": {"fieldRef": {"apiVersion": "v1",
                                           "fieldPath": f"metadata.annotations['{A_GPUS}']"}}}]
        hived_env = {"HIVED_JOB_ID": job_id, "HIVED_RANK": str(pp.rank), "HIVED_WORLD_SIZE": str(size),
                     "HIVED_ATTEMPT": str(attempt), "HIVED_NODE": pp.node, "HIVED_GPUS": gpus,
                     "HIVED_VC": request.vc, "HIVED_USER": request.user, "HIVED_PEERS": ",".join(peers),
                     "MASTER_ADDR": peers[0], "MASTER_PORT": str(master_port), "WORLD_SIZE": str(size),
                     "RANK": str(pp.rank)}
        # Template env first, then the job's own, then hived's (which nothing overrides).
        merged = {**template.env, **{k: str(v) for k, v in request.env.items()}, **hived_env}
        env += [{"name": k, "value": v} for k, v in merged.items() if k != "NVIDIA_VISIBLE_DEVICES"]
        if demands is not None:
            cpus, memory_gb = demands[pp.rank][:2]     # JobRecord.pod_demands: (cpus, memory_gb, gpus)
        else:
            group = _group_of(request, pp.rank)
            cpus, memory_gb = (group.cpus, group.memory_gb) if group is not None else (None, None)
        container = _container(request, template, env, command, args, container_sc, cpus, memory_gb)
        spec = _pod_spec(request, template, container, pod_sc, pod_name(job_id, attempt, pp.rank),
                         service_name(job_id) if gang else None, pp.node if bind == "node_name" else None,
                         scheduler_name)
        pods.append({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": pod_name(job_id, attempt, pp.rank), "namespace": namespace,
                                  "labels": labels, "annotations": annotations},
                     "spec": spec})
    return pods


def _container(request: JobRequest, template: JobTemplate, env: list, command, args,
               security: dict, cpus, memory_gb) -> dict[str, Any]:
    """The pod's one container: the image, env, command and what the template adds."""
    container: dict[str, Any] = {"name": CONTAINER, "image": template.image, "env": env,
                                 "securityContext": security}
    if command:
        container["command"] = command
    if args:
        container["args"] = args
    # The job's own template says it outright; else the job's workdir (hived submit sends the
    # current directory: right where home directories are mounted in the pods); else the default.
    workdir = (request.k8s_template or {}).get("working_dir") or request.workdir or template.working_dir
    if workdir:
        container["workingDir"] = workdir
    if template.image_pull_policy:
        container["imagePullPolicy"] = template.image_pull_policy
    if template.volume_mounts:
        container["volumeMounts"] = [dict(v) for v in template.volume_mounts]
    if template.ports:
        container["ports"] = [dict(p) for p in template.ports]
    resources = resources_of(template, cpus, memory_gb)
    if resources:
        container["resources"] = resources
    return container


def _pod_spec(request: JobRequest, template: JobTemplate, container: dict, pod_security: dict, name: str,
              subdomain: str | None, node: str | None, scheduler_name: str) -> dict[str, Any]:
    """The pod's spec: bound to ``node`` (None: left to ``scheduler_name``), named ``name`` in
    ``subdomain`` (a gang's), with what the template adds."""
    spec: dict[str, Any] = {
        "containers": [container],
        # Set explicitly: no server-side defaulting may be assumed.
        "restartPolicy": template.restart_policy,
        "terminationGracePeriodSeconds": int(round(request.grace_period)),
        "securityContext": pod_security,
        # A job gets an API token only through a service account its template names
        # (and its VC's policy allows): the namespace's "default" one is not handed out.
        "automountServiceAccountToken": template.service_account is not None,
        "enableServiceLinks": False,      # no env per Service in the namespace: peers are named above
    }
    if subdomain is not None:   # a gang: peers find each other by name
        spec["hostname"] = name
        spec["subdomain"] = subdomain
    for field, key in (("host_network", "hostNetwork"), ("host_pid", "hostPID"), ("host_ipc", "hostIPC")):
        if getattr(template, field):
            spec[key] = True
    if node is not None:
        spec["nodeName"] = node
    else:
        spec["schedulerName"] = scheduler_name
    if template.volumes:
        spec["volumes"] = [dict(v) for v in template.volumes]
    if template.service_account:
        spec["serviceAccountName"] = template.service_account
    if template.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": s} for s in template.image_pull_secrets]
    if template.node_selector:
        spec["nodeSelector"] = dict(template.node_selector)
    if template.tolerations:
        spec["tolerations"] = [dict(t) for t in template.tolerations]
    return spec


def binding_body(pod: dict) -> dict:
    """The Binding object that puts a ``bind="binding"`` pod on its node."""
    node = json.loads(pod["metadata"]["annotations"][A_BINDING])["pods"]
    rank = int(pod["metadata"]["annotations"][A_RANK])
    target = next(p["node"] for p in node if p["rank"] == rank)
    return {"apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": pod["metadata"]["name"], "namespace": pod["metadata"]["namespace"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": target}}
