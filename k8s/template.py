"""The job template: what a pod of a hived job looks like besides its GPUs.

A template holds the container image, command, environment, extra resources,
volumes, service account, image pull secrets, node selector, tolerations and
security settings (``security_context``, ``pod_security_context``, host
namespaces, ports). hived validates it completely *before* any pod is created, so a
bad field is refused with its path (``template.volumes[0].hostPath``) and the
cluster never sees a half-built gang.

GPUs are deliberately absent: hived picks the GPU indices itself and hands
them to the container through ``NVIDIA_VISIBLE_DEVICES`` (see pod_builder).
Asking for ``nvidia.com/gpu`` here would make the device plugin pick GPUs too,
and the two choices would disagree, so such a template is refused.

CPU and memory come from the job's ``cpus``/``memory_gb`` (what hived accounts
for on the node); a template's own ``cpu``/``memory`` apply only where the
job says nothing (pod_builder), so a template adds resources, never overrides.

The pass-through pieces (volumes, tolerations, security contexts ...) are
checked against the official client's typed models (pydantic, extra fields
forbidden), so a misspelled key fails here rather than being silently dropped.
What a template may *ask for* (host paths, privileges, images, service
accounts) is the admin's policy: ``policy.check_template`` (k8s/policy.py),
run by ``check_for_vc`` below before anything is created.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client import models as m
from pydantic import BaseModel, ValidationError

# RFC 1123 label (namespaces, container names, secret names) and DNS subdomain.
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
# Kubernetes resource.Quantity syntax (the server uses the same expression).
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")

# Device plugins' resources: hived picks GPUs itself, so none of them may be requested. By
# vendor domain (every resource of it, MIG slices and shared GPUs included) and by name.
DEVICE_PLUGIN_DOMAINS = ("nvidia.com", "amd.com", "gpu.intel.com")
DEVICE_PLUGIN_WORDS = ("gpu", "mig")
# Resources a template may ask for besides a domain-qualified extended resource.
PLAIN_RESOURCES = ("cpu", "memory", "ephemeral-storage")
# Environment names hived sets itself; a template may not override them.
# MASTER_*/WORLD_SIZE/RANK: the gang's rendezvous (torchrun's names), from the placement.
RESERVED_ENV = ("NVIDIA_VISIBLE_DEVICES", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")
RESERVED_ENV_PREFIX = "HIVED_"

FIELDS = ("image", "command", "args", "env", "resources", "volumes", "volume_mounts",
          "service_account", "image_pull_secrets", "node_selector", "tolerations",
          "namespace", "image_pull_policy", "working_dir", "labels", "annotations",
          "restart_policy", "security_context", "pod_security_context", "host_network", "host_pid",
          "host_ipc", "ports")


class TemplateError(ValueError):
    """A template field is wrong: ``where`` is its path, ``problem`` says why."""

    def __init__(self, where: str, problem: str):
        super().__init__(f"{where}: {problem}")
        self.where = where
        self.problem = problem
        self.field = where  # RequestError-compatible name


@dataclass(frozen=True)
class JobTemplate:
    """A validated job template. Build with :meth:`from_dict`."""

    image: str
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: dict = field(default_factory=dict)            # name -> value
    resources: dict = field(default_factory=dict)      # {"requests": {...}, "limits": {...}}
    volumes: tuple[dict, ...] = ()                     # core/v1 Volume, camelCase
    volume_mounts: tuple[dict, ...] = ()               # core/v1 VolumeMount
    service_account: str | None = None
    image_pull_secrets: tuple[str, ...] = ()
    node_selector: dict = field(default_factory=dict)
    tolerations: tuple[dict, ...] = ()
    namespace: str | None = None
    image_pull_policy: str | None = None
    working_dir: str | None = None
    labels: dict = field(default_factory=dict)         # extra pod labels
    annotations: dict = field(default_factory=dict)    # extra pod annotations
    restart_policy: str = "Never"                      # a gang member is not restarted in place
    security_context: dict = field(default_factory=dict)      # core/v1 SecurityContext (the container's)
    pod_security_context: dict = field(default_factory=dict)  # core/v1 PodSecurityContext
    host_network: bool = False
    host_pid: bool = False
    host_ipc: bool = False
    ports: tuple[dict, ...] = ()                       # core/v1 ContainerPort

    @classmethod
    def from_dict(cls, d: Any, where: str = "template") -> JobTemplate:
        """Validate ``d`` (snake_case keys) and build the template; raises TemplateError."""
        if isinstance(d, JobTemplate):
            return d
        if not isinstance(d, dict):
            raise TemplateError(where, f"must be a mapping, got {type(d).__name__}")
        unknown = sorted(set(d) - set(FIELDS))
        if unknown:
            raise TemplateError(f"{where}.{unknown[0]}", f"unknown field; allowed: {', '.join(FIELDS)}")
        image = d.get("image")
        if not isinstance(image, str) or not image.strip() or any(c.isspace() for c in image):
            raise TemplateError(f"{where}.image", "required: a container image reference without spaces")
        kw: dict[str, Any] = {"image": image}
        for name in ("command", "args"):
            if d.get(name) is not None:
                kw[name] = _str_list(d[name], f"{where}.{name}")
        if d.get("env") is not None:
            kw["env"] = _env(d["env"], f"{where}.env")
        if d.get("resources") is not None:
            kw["resources"] = _resources(d["resources"], f"{where}.resources")
        if d.get("volumes") is not None:
            kw["volumes"] = _volumes(d["volumes"], f"{where}.volumes")
        if d.get("volume_mounts") is not None:
            kw["volume_mounts"] = _typed_list(d["volume_mounts"], m.V1VolumeMount, f"{where}.volume_mounts")
            known = {v["name"] for v in kw.get("volumes", ())}
            for i, vm in enumerate(kw["volume_mounts"]):
                if vm["name"] not in known:
                    raise TemplateError(f"{where}.volume_mounts[{i}].name",
                                        f"no volume named {vm['name']!r} in template.volumes")
        if d.get("service_account") is not None:
            kw["service_account"] = _name(d["service_account"], f"{where}.service_account", _DNS_SUBDOMAIN)
        if d.get("image_pull_secrets") is not None:
            secrets = _str_list(d["image_pull_secrets"], f"{where}.image_pull_secrets")
            for i, s in enumerate(secrets):
                _name(s, f"{where}.image_pull_secrets[{i}]", _DNS_SUBDOMAIN)
            kw["image_pull_secrets"] = secrets
        if d.get("node_selector") is not None:
            kw["node_selector"] = _labels(d["node_selector"], f"{where}.node_selector")
        if d.get("tolerations") is not None:
            kw["tolerations"] = _typed_list(d["tolerations"], m.V1Toleration, f"{where}.tolerations")
        if d.get("namespace") is not None:
            kw["namespace"] = _name(d["namespace"], f"{where}.namespace", _DNS_LABEL)
        if d.get("image_pull_policy") is not None:
            if d["image_pull_policy"] not in ("Always", "IfNotPresent", "Never"):
                raise TemplateError(f"{where}.image_pull_policy", "must be Always, IfNotPresent or Never")
            kw["image_pull_policy"] = d["image_pull_policy"]
        if d.get("working_dir") is not None:
            if not isinstance(d["working_dir"], str) or not d["working_dir"].startswith("/"):
                raise TemplateError(f"{where}.working_dir", "must be an absolute path")
            kw["working_dir"] = d["working_dir"]
        if d.get("labels") is not None:
            kw["labels"] = _labels(d["labels"], f"{where}.labels")
            hived = [k for k in kw["labels"] if k.startswith("hived.io/")]
            if hived:
                raise TemplateError(f"{where}.labels.{hived[0]}", "the hived.io/ prefix is reserved for hived")
        if d.get("annotations") is not None:
            ann = d["annotations"]
            if not isinstance(ann, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in ann.items()):
                raise TemplateError(f"{where}.annotations", "must map strings to strings")
            hived = [k for k in ann if k.startswith("hived.io/")]
            if hived:
                raise TemplateError(f"{where}.annotations.{hived[0]}", "the hived.io/ prefix is reserved for hived")
            kw["annotations"] = dict(ann)
        if d.get("restart_policy") is not None:
            if d["restart_policy"] not in ("Never", "OnFailure"):
                raise TemplateError(f"{where}.restart_policy",
                                    "must be Never or OnFailure (Always would restart a finished gang member)")
            kw["restart_policy"] = d["restart_policy"]
        for name, model in (("security_context", m.V1SecurityContext),
                            ("pod_security_context", m.V1PodSecurityContext)):
            if d.get(name) is not None:
                kw[name] = _typed(d[name], model, f"{where}.{name}")
        for name in ("host_network", "host_pid", "host_ipc"):
            if d.get(name) is not None:
                if not isinstance(d[name], bool):
                    raise TemplateError(f"{where}.{name}", f"must be true or false, got {d[name]!r}")
                kw[name] = d[name]
        if d.get("ports") is not None:
            kw["ports"] = _typed_list(d["ports"], m.V1ContainerPort, f"{where}.ports")
        return cls(**kw)

    def merged(self, overrides: dict | None) -> JobTemplate:
        """This template with a job's ``overrides`` on top, validated as a whole."""
        if not overrides:
            return self
        if not isinstance(overrides, dict):
            raise TemplateError("template", f"must be a mapping, got {type(overrides).__name__}")
        base = self.to_dict()
        for key, value in overrides.items():
            if key in ("env", "node_selector", "labels", "annotations", "security_context",
                       "pod_security_context") and isinstance(value, dict) \
                    and isinstance(base.get(key), dict):
                base[key] = {**base[key], **value}
            else:
                base[key] = value
        return JobTemplate.from_dict(base)

    def to_dict(self) -> dict:
        out: dict[str, Any] = {}
        for name in FIELDS:
            v = getattr(self, name)
            out[name] = list(v) if isinstance(v, tuple) else (dict(v) if isinstance(v, dict) else v)
        return out


def check_for_vc(template: JobTemplate, vc: str, policy, own: dict | None = None) -> JobTemplate:
    """``template`` (the default with the job's ``own`` fields on top) if the admin's ``policy``
    (policy.AdminPolicy) lets VC ``vc`` run it; else PolicyError (a TemplateError) naming the
    field and the rule. Without a policy of the admin's, the default one (restricted, no
    service account) still applies to what the job asks for itself: the default template is
    the admin's own word, a job's fields are not."""
    from .policy import AdminPolicy, check_template
    if policy is not None:
        check_template(template, policy.for_vc(vc))
    elif own:
        check_template(template, AdminPolicy().for_vc(vc), only=set(own))
    return template


def _str_list(v: Any, where: str) -> tuple[str, ...]:
    if isinstance(v, str) or not isinstance(v, (list, tuple)) or not all(isinstance(x, str) for x in v):
        raise TemplateError(where, "must be a list of strings")
    return tuple(v)


def _name(v: Any, where: str, rx: re.Pattern) -> str:
    if not isinstance(v, str) or len(v) > 253 or not rx.match(v):
        raise TemplateError(where, f"{v!r} is not a valid Kubernetes name (lower case alphanumerics and '-')")
    return v


def _env(v: Any, where: str) -> dict:
    if not isinstance(v, dict):
        raise TemplateError(where, "must map variable names to string values")
    for k, val in v.items():
        if not isinstance(k, str) or not _ENV_NAME.match(k):
            raise TemplateError(f"{where}.{k}", "not a valid environment variable name")
        if k in RESERVED_ENV or k.startswith(RESERVED_ENV_PREFIX):
            raise TemplateError(f"{where}.{k}", "set by hived from the GPUs it chose; a template may not set it")
        if not isinstance(val, str):
            raise TemplateError(f"{where}.{k}", f"value must be a string, got {type(val).__name__}")
    return dict(v)


def _resources(v: Any, where: str) -> dict:
    if not isinstance(v, dict):
        raise TemplateError(where, "must be a mapping with 'requests' and/or 'limits'")
    extra = sorted(set(v) - {"requests", "limits"})
    if extra:
        raise TemplateError(f"{where}.{extra[0]}", "unknown field; allowed: requests, limits")
    out = {}
    for part in ("requests", "limits"):
        if v.get(part) is None:
            continue
        q = v[part]
        if not isinstance(q, dict):
            raise TemplateError(f"{where}.{part}", "must map resource names to quantities")
        for res, amount in q.items():
            if is_device_plugin_resource(str(res)):
                raise TemplateError(f"{where}.{part}.{res}",
                                    "hived chooses the GPUs itself (rule 'No device plugin resources': nothing of "
                                    f"{', '.join(DEVICE_PLUGIN_DOMAINS)}, no name with gpu or mig); do not request "
                                    "them through the device plugin")
            if res not in PLAIN_RESOURCES and not str(res).startswith("hugepages-") and "/" not in str(res):
                raise TemplateError(f"{where}.{part}.{res}", "unknown resource; use cpu, memory, ephemeral-storage, "
                                                             "hugepages-<size> or a domain/name resource")
            s = str(amount) if isinstance(amount, (int, float)) and not isinstance(amount, bool) else amount
            if not isinstance(s, str) or not _QUANTITY.match(s):
                raise TemplateError(f"{where}.{part}.{res}", f"{amount!r} is not a quantity (e.g. 4, 500m, 16Gi)")
        out[part] = {k: str(x) for k, x in q.items()}
    return out


def is_device_plugin_resource(name: str) -> bool:
    """Whether resource ``name`` is a device plugin's (``nvidia.com/mig-1g.10gb``, ``gpu.intel.com/i915``)."""
    low = name.lower()
    domain = low.partition("/")[0] if "/" in low else ""
    return (any(domain == d or domain.endswith("." + d) for d in DEVICE_PLUGIN_DOMAINS)
            or any(w in low for w in DEVICE_PLUGIN_WORDS))


def _volumes(v: Any, where: str) -> tuple[dict, ...]:
    """The template's volumes, typed, uniquely named, each with exactly one source."""
    vols = _typed_list(v, m.V1Volume, where)
    for i, vol in enumerate(vols):
        sources = [k for k in vol if k != "name"]
        if len(sources) > 1:
            raise TemplateError(f"{where}[{i}]", f"has {len(sources)} sources ({', '.join(sources)}); a volume "
                                                 "has exactly one source (rule 'One source per volume')")
    names = [vol["name"] for vol in vols]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise TemplateError(where, f"duplicate volume name {sorted(dup)[0]!r}")
    return vols


def _labels(v: Any, where: str) -> dict:
    if not isinstance(v, dict):
        raise TemplateError(where, "must map label keys to values")
    for k, val in v.items():
        if not isinstance(k, str) or not _LABEL_KEY.match(k):
            raise TemplateError(f"{where}.{k}", "not a valid label key")
        if not isinstance(val, str) or not _LABEL_VALUE.match(val):
            raise TemplateError(f"{where}.{k}", f"{val!r} is not a valid label value (<= 63 chars, alphanumerics, -_.)")
    return dict(v)


def _typed_list(v: Any, model: type, where: str) -> tuple[dict, ...]:
    """Check each item against the official client's model; return camelCase dicts."""
    if not isinstance(v, (list, tuple)):
        raise TemplateError(where, "must be a list")
    return tuple(_typed(item, model, f"{where}[{i}]") for i, item in enumerate(v))


def _typed(item: Any, model: type[BaseModel], where: str) -> dict:
    if not isinstance(item, dict):
        raise TemplateError(where, "must be a mapping")
    try:
        obj = model.model_validate(item)
    except ValidationError as e:
        err = e.errors()[0]
        loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"])
        raise TemplateError(f"{where}{loc}", err["msg"]) from None
    # Re-dump by alias: snake_case input becomes the camelCase the server reads.
    return obj.model_dump(by_alias=True, exclude_none=True, mode="json")
