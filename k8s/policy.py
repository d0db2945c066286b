"""The admin's pod policy: where each VC's jobs run and what their templates may ask for.

Jobs never run in the scheduler's namespace: each VC has its own namespace
(``vc_namespace``: the prefix and the VC's name, DNS-safe and stable), labelled
for Pod Security Admission with the VC's level (``namespace_manifest``), and
every job template is checked before anything is created (``check_template``)
against that level's Pod Security profile (pod_security.py) and the VC's
allow-lists of images, service accounts and volume types.

The policy is a YAML (or JSON) document, a file or a ConfigMap key::

    namespacePrefix: hived-            # VC "research" runs in namespace hived-research
    schedulerServiceAccount: hived     # hived's own identity: never usable by a job
    schedulerNamespace: hived
    defaults:                          # every VC not listed below, and what a listed one leaves out
      podSecurity: restricted          # privileged | baseline | restricted
      images: ["nvcr.io/nvidia/*"]     # shell-style patterns on the image reference
      serviceAccounts: []              # names a template may use; [] = none (no API token)
      volumeTypes: [configMap, secret, emptyDir, persistentVolumeClaim, projected, downwardAPI]
    virtualClusters:
      research:
        podSecurity: baseline
        namespace: research-jobs       # instead of namespacePrefix + name
        serviceAccounts: [trainer]

A refusal is a ``PolicyError`` (a TemplateError): ``where`` is the template
field (``template.volumes[0].hostPath``), ``problem`` names the rule.
"""
from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from kubernetes.client import models as m

from . import pod_builder as pb
from .pod_security import LEVELS, RESTRICTED_VOLUMES, violations, volume_sources
from .template import JobTemplate, TemplateError

PSA = "pod-security.kubernetes.io/"
DEFAULT_PREFIX = "hived-"
DEFAULT_SCHEDULER_SA = "hived"
DEFAULT_SCHEDULER_NAMESPACE = "hived"
JOBS_CLUSTER_ROLE = "hived-jobs"          # k8s/deploy/rbac.yaml: what hived may do in a VC namespace
# Namespaces no VC may map to: the cluster's own and (checked separately) the scheduler's.
SYSTEM_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})
# Projected sources that carry no identity of the pod: allowed whatever the VC's accounts.
PROJECTED_SOURCES = ("configMap", "secret", "downwardAPI")
VOLUME_TYPES = sorted(f.serialization_alias or n for n, f in m.V1Volume.model_fields.items() if n != "name")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

_VC_PROPS = {
    "podSecurity": {"enum": list(LEVELS)},
    "images": {"type": "array", "items": {"type": "string", "minLength": 1}, "uniqueItems": True},
    "serviceAccounts": {"type": "array", "uniqueItems": True,
                        "items": {"type": "string", "pattern": _DNS_LABEL.pattern, "maxLength": 253}},
    "volumeTypes": {"type": "array", "uniqueItems": True, "items": {"enum": VOLUME_TYPES}},
}
SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "hived pod policy",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "namespacePrefix": {"type": "string", "pattern": r"^[a-z0-9][-a-z0-9]*$", "maxLength": 30},
        "schedulerServiceAccount": {"type": "string", "pattern": _DNS_LABEL.pattern},
        "schedulerNamespace": {"type": "string", "pattern": _DNS_LABEL.pattern, "maxLength": 63},
        "defaults": {"type": "object", "additionalProperties": False, "properties": _VC_PROPS},
        "virtualClusters": {
            "type": "object",
            "additionalProperties": {
                "type": "object", "additionalProperties": False,
                "properties": {**_VC_PROPS,
                               "namespace": {"type": "string", "pattern": _DNS_LABEL.pattern, "maxLength": 63}}}},
    },
}
_VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


class PolicyError(TemplateError):
    """A template the VC's policy refuses (``where`` = the field, ``problem`` = the rule)."""


class PolicyFileError(ValueError):
    """The admin's policy document itself is wrong (one line: where and why)."""


def vc_namespace(vc: str, prefix: str = DEFAULT_PREFIX) -> str:
    """The namespace of VC ``vc``'s jobs: ``prefix`` + the VC name made DNS-safe. A name that had to
    change (case, characters, length) gets a hash of the original, so two VCs never share one."""
    return prefix + pb.slug(vc, 63 - len(prefix))


@dataclass(frozen=True)
class VCPolicy:
    """What one VC's templates may ask for (``AdminPolicy.for_vc``)."""

    vc: str
    namespace: str
    pod_security: str = "restricted"
    images: tuple[str, ...] = ("*",)
    service_accounts: tuple[str, ...] = ()
    volume_types: tuple[str, ...] = RESTRICTED_VOLUMES
    scheduler_service_account: str = DEFAULT_SCHEDULER_SA

    def image_allowed(self, image: str) -> bool:
        names = {image, _full_image(image)}
        return any(fnmatch.fnmatchcase(n, pat) for pat in self.images for n in names)


@dataclass(frozen=True)
class AdminPolicy:
    namespace_prefix: str = DEFAULT_PREFIX
    scheduler_service_account: str = DEFAULT_SCHEDULER_SA
    scheduler_namespace: str = DEFAULT_SCHEDULER_NAMESPACE
    defaults: dict = field(default_factory=dict)
    vcs: dict = field(default_factory=dict)          # vc -> its own settings (schema keys)

    def for_vc(self, vc: str) -> VCPolicy:
        own = {**self.defaults, **self.vcs.get(vc, {})}
        ns = own.get("namespace") or vc_namespace(vc, self.namespace_prefix)
        if ns == self.scheduler_namespace or ns in SYSTEM_NAMESPACES:
            # Loading checks explicit names; a computed one can only collide through an odd prefix.
            raise PolicyFileError(f"virtualClusters.{vc}: its namespace {ns!r} is the scheduler's or the "
                                  "cluster's own; jobs must run elsewhere")
        kw: dict[str, Any] = {"vc": vc, "namespace": ns,
                              "scheduler_service_account": self.scheduler_service_account}
        for key, attr in (("podSecurity", "pod_security"), ("images", "images"),
                          ("serviceAccounts", "service_accounts"), ("volumeTypes", "volume_types")):
            if key in own:
                kw[attr] = own[key] if isinstance(own[key], str) else tuple(own[key])
        return VCPolicy(**kw)

    def namespaces(self, vcs: Iterable[str]) -> dict[str, str]:
        """VC -> namespace for ``vcs``; PolicyFileError when two VCs would share a namespace."""
        out: dict[str, str] = {}
        for vc in sorted(vcs):
            ns = self.for_vc(vc).namespace
            other = next((o for o, n in out.items() if n == ns), None)
            if other is not None:
                raise PolicyFileError(f"virtualClusters: VCs {other!r} and {vc!r} would share namespace {ns!r}")
            out[vc] = ns
        return out


def load_policy(source: Any = None) -> AdminPolicy:
    """An AdminPolicy from a dict, a YAML/JSON file path, or YAML text; None: the defaults
    (restricted, any image, no service account, the restricted volume types)."""
    if source is None:
        return AdminPolicy()
    name = "policy"
    doc = source
    if isinstance(source, Path) or (isinstance(source, str) and "\n" not in source
                                    and not source.lstrip().startswith("{")):
        name = str(source)
        try:
            doc = yaml.safe_load(Path(source).read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as e:
            raise PolicyFileError(f"{name}: cannot read the policy: {str(e).splitlines()[0]}") from None
    elif isinstance(source, str):
        try:
            doc = yaml.safe_load(source)
        except yaml.YAMLError as e:
            raise PolicyFileError(f"{name}: not YAML: {str(e).splitlines()[0]}") from None
    doc = {} if doc is None else doc
    err = jsonschema.exceptions.best_match(_VALIDATOR.iter_errors(doc))
    if err is not None:
        at = ".".join(str(p) for p in err.absolute_path) or "(top)"
        raise PolicyFileError(f"{name}: {at}: {err.message}")
    pol = AdminPolicy(namespace_prefix=doc.get("namespacePrefix", DEFAULT_PREFIX),
                      scheduler_service_account=doc.get("schedulerServiceAccount", DEFAULT_SCHEDULER_SA),
                      scheduler_namespace=doc.get("schedulerNamespace", DEFAULT_SCHEDULER_NAMESPACE),
                      defaults=dict(doc.get("defaults") or {}),
                      vcs={k: dict(v) for k, v in (doc.get("virtualClusters") or {}).items()})
    for where, own in [("defaults", pol.defaults)] + [(f"virtualClusters.{k}", v) for k, v in pol.vcs.items()]:
        if pol.scheduler_service_account in own.get("serviceAccounts", ()):
            raise PolicyFileError(f"{name}: {where}.serviceAccounts: {pol.scheduler_service_account!r} is the "
                                  "scheduler's own service account; no job may use it")
        if own.get("namespace") in SYSTEM_NAMESPACES | {pol.scheduler_namespace}:
            raise PolicyFileError(f"{name}: {where}.namespace: {own['namespace']!r} is the scheduler's or the "
                                  "cluster's own namespace; jobs must run elsewhere")
    pol.namespaces(pol.vcs)          # explicit namespaces must not collide either
    return pol


def check_template(template: JobTemplate, vc_policy: VCPolicy, only: set | None = None) -> None:
    """Refuse (PolicyError) the first thing in ``template`` that VC ``vc_policy`` does not allow;
    ``only``: template fields (``volumes``, ``security_context`` ...) to check, the rest trusted."""
    for where, problem in refusals(template, vc_policy):
        if only is None or re.split(r"[.\[]", where)[1] in only:
            raise PolicyError(where, problem)


def refusals(template: JobTemplate, vp: VCPolicy) -> Iterator[tuple[str, str]]:
    """Every (field, rule) of ``template`` that VC ``vp`` does not allow, profile rules first."""
    for where, rule, what in violations(template, vp.pod_security):
        yield where, f"{what} is refused by the Pod Security rule '{rule}' (VC {vp.vc!r} enforces {vp.pod_security!r})"
    if not vp.image_allowed(template.image):
        yield "template.image", (f"image {template.image!r} is not allowed for VC {vp.vc!r} "
                                 f"(allowed: {', '.join(vp.images) or 'none'})")
    sa = template.service_account
    if sa is not None and sa == vp.scheduler_service_account:
        yield "template.service_account", f"{sa!r} is the scheduler's own service account; no job may use it"
    elif sa is not None and sa not in vp.service_accounts:
        yield "template.service_account", (f"service account {sa!r} is not allowed for VC {vp.vc!r} (allowed: "
                                           f"{', '.join(vp.service_accounts) or 'none; a job gets no API token'})")
    for i, v in enumerate(template.volumes):
        for kind in volume_sources(v):
            if kind not in vp.volume_types:
                yield f"template.volumes[{i}].{kind}", (f"volume type {kind!r} is not allowed for VC {vp.vc!r} "
                                                         f"(allowed: {', '.join(vp.volume_types)})")
        yield from _projected_refusals(template, vp, i, v)
    if template.namespace is not None and template.namespace != vp.namespace:
        yield "template.namespace", (f"VC {vp.vc!r} runs its jobs in namespace {vp.namespace!r} only, "
                                     f"not {template.namespace!r}")


def _projected_refusals(template: JobTemplate, vp: VCPolicy, i: int, volume: dict) -> Iterator[tuple[str, str]]:
    """A projected volume's sources beyond configMap/secret/downwardAPI (a service account token, a
    pod certificate, a trust bundle ...) speak for the pod's service account: the template's, else
    the namespace's ``default``. Allowed only when the VC allows that very account."""
    account = template.service_account or "default"
    if account in vp.service_accounts:
        return
    for j, src in enumerate((volume.get("projected") or {}).get("sources") or []):
        for key in sorted(set(src) - set(PROJECTED_SOURCES)):
            yield (f"template.volumes[{i}].projected.sources[{j}].{key}",
                   f"a projected {key} source acts as service account {account!r}, which VC {vp.vc!r} does not "
                   f"allow (rule 'Projected Sources': only {', '.join(PROJECTED_SOURCES)} without an allowed "
                   f"service account; allowed accounts: {', '.join(vp.service_accounts) or 'none'})")


def namespace_manifest(vc: str, policy: AdminPolicy | None = None) -> dict:
    """The Namespace of VC ``vc``'s jobs, labelled for Pod Security Admission at the VC's level
    (enforced, and also warned and audited so ``kubectl`` shows why a pod is refused)."""
    vp = (policy or AdminPolicy()).for_vc(vc)
    labels = {f"{PSA}{mode}": vp.pod_security for mode in ("enforce", "warn", "audit")}
    labels[f"{PSA}enforce-version"] = "latest"
    labels.update({pb.L_MANAGED: "hived", pb.L_VC: pb.label_value(vc)})
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": vp.namespace, "labels": labels, "annotations": {pb.L_VC: vc}}}


def rolebinding_manifest(vc: str, policy: AdminPolicy | None = None) -> dict:
    """What lets hived (and only it) manage pods in VC ``vc``'s namespace: the ClusterRole
    ``hived-jobs`` bound there to the scheduler's service account."""
    pol = policy or AdminPolicy()
    vp = pol.for_vc(vc)
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "hived-jobs", "namespace": vp.namespace, "labels": {pb.L_MANAGED: "hived"}},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": JOBS_CLUSTER_ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": pol.scheduler_service_account,
                          "namespace": pol.scheduler_namespace}]}


def vc_manifests(vcs: Iterable[str], policy: AdminPolicy | None = None) -> list[dict]:
    """Namespace and RoleBinding for every VC: what an admin applies when VCs are added."""
    pol = policy or AdminPolicy()
    pol.namespaces(vcs)
    out = []
    for vc in sorted(vcs):
        out += [namespace_manifest(vc, pol), rolebinding_manifest(vc, pol)]
    return out


def _full_image(image: str) -> str:
    """``ubuntu:22.04`` as the runtime pulls it: ``docker.io/library/ubuntu:22.04``."""
    first, sep, rest = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return image                                   # names its registry
    return f"docker.io/{image}" if sep else f"docker.io/library/{image}"


def main(argv: list | None = None) -> int:
    """``python -m hived.k8s.policy SPEC [POLICY]``: the VC namespaces and RoleBindings as YAML."""
    import argparse
    import sys

    from hived.core.spec import SpecError, load_spec
    p = argparse.ArgumentParser(prog="python -m hived.k8s.policy",
                                description="Print the Namespace and RoleBinding of every VC in SPEC "
                                            "(pipe to kubectl apply -f -).")
    p.add_argument("spec", help="cluster spec (YAML)")
    p.add_argument("policy", nargs="?", help="pod policy (YAML); default: restricted everywhere")
    args = p.parse_args(argv)
    try:
        spec = load_spec(args.spec)
        docs = vc_manifests(spec.vcs, load_policy(args.policy))
    except (SpecError, PolicyFileError) as e:
        print(f"hived policy: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(yaml.safe_dump_all(docs, sort_keys=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["AdminPolicy", "VCPolicy", "PolicyError", "PolicyFileError", "SCHEMA", "check_template",
           "load_policy", "namespace_manifest", "rolebinding_manifest", "vc_manifests", "vc_namespace"]
