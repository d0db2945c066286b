"""The Kubernetes Pod Security Standards, checked on a job template before any pod exists.

Pod Security Admission (PSA) enforces the same profiles in the cluster, per
namespace (hived labels each VC's namespace, see policy.namespace_manifest).
hived checks them itself as well, for two reasons: a refused gang must be
refused *before* its first pod is created (PSA refuses pod by pod), and the
refusal must name the template field the user wrote, not a pod's.

Profiles (https://kubernetes.io/docs/concepts/security/pod-security-standards/):
``privileged`` (no rule), ``baseline`` (no known privilege escalation) and
``restricted`` (baseline plus hardening). ``violations`` returns every broken
rule as ``(field path, rule, what)``; the path is the template's
(``template.volumes[0].hostPath``).

The values checked are the *effective* ones: hived's own restricted defaults
(pod_builder.pod_security_context / container_security_context) with the
template's settings on top, which is what the pod will carry.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

LEVELS = ("privileged", "baseline", "restricted")

# baseline: capabilities a container may add (the runtime's default set).
BASELINE_CAPABILITIES = frozenset({
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
    "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"})
RESTRICTED_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
# baseline: namespaced sysctls that cannot affect other pods on the node.
SAFE_SYSCTLS = frozenset({
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes"})
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
# restricted: the only volume types (everything else can reach the node or the network).
RESTRICTED_VOLUMES = ("configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret")
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"


def volume_sources(volume: dict) -> list[str]:
    """Every source key of a core/v1 Volume (``hostPath``, ``emptyDir`` ...). A valid volume has
    exactly one (template.py refuses more); every rule judges each key, never just the first."""
    keys = [k for k in volume if k != "name"]
    return keys or ["emptyDir"]                 # no source: the API defaults it to emptyDir


def violations(template: Any, level: str) -> Iterator[tuple[str, str, str]]:
    """Every rule of profile ``level`` that ``template`` (a JobTemplate) breaks, in field order."""
    if level not in LEVELS:
        raise ValueError(f"pod security level {level!r} is not one of {', '.join(LEVELS)}")
    if level == "privileged":
        return
    from .pod_builder import container_security_context, pod_security_context
    psc = pod_security_context(template)
    csc = container_security_context(template)
    restricted = level == "restricted"
    T = "template"

    def where(key: str) -> str:
        # A container's setting wins over the pod's: name the one that decided.
        return f"{T}.security_context.{key}" if key in csc else f"{T}.pod_security_context.{key}"

    def eff(key: str) -> Any:
        return csc.get(key, psc.get(key))

    # -- baseline ---------------------------------------------------------
    for name in ("host_network", "host_pid", "host_ipc"):
        if getattr(template, name):
            yield f"{T}.{name}", "baseline: Host Namespaces", "sharing the node's network/PID/IPC namespace"
    if csc.get("privileged"):
        yield f"{T}.security_context.privileged", "baseline: Privileged Containers", "a privileged container"
    for sc, path in ((csc, f"{T}.security_context"), (psc, f"{T}.pod_security_context")):
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            yield f"{path}.windowsOptions.hostProcess", "baseline: HostProcess", "a Windows HostProcess container"
    added = [str(c) for c in (csc.get("capabilities") or {}).get("add") or []]
    allowed_caps = RESTRICTED_CAPABILITIES if restricted else BASELINE_CAPABILITIES
    for i, cap in enumerate(added):
        if cap.upper().removeprefix("CAP_") not in allowed_caps:
            yield (f"{T}.security_context.capabilities.add[{i}]",
                   f"{level}: Capabilities", f"adding capability {cap} (allowed: {', '.join(sorted(allowed_caps))})")
    for i, v in enumerate(template.volumes):
        if "hostPath" in v:
            yield f"{T}.volumes[{i}].hostPath", "baseline: HostPath Volumes", "a hostPath volume (the node's files)"
    for i, p in enumerate(template.ports):
        if p.get("hostPort"):
            yield f"{T}.ports[{i}].hostPort", "baseline: Host Ports", f"host port {p['hostPort']}"
    for sc, path in ((psc, f"{T}.pod_security_context"), (csc, f"{T}.security_context")):
        if (sc.get("appArmorProfile") or {}).get("type") == "Unconfined":
            yield f"{path}.appArmorProfile.type", "baseline: AppArmor", "AppArmor profile Unconfined"
        se = sc.get("seLinuxOptions") or {}
        if se.get("type", "") not in SELINUX_TYPES:
            yield f"{path}.seLinuxOptions.type", "baseline: SELinux", f"SELinux type {se['type']!r}"
        for k in ("user", "role"):
            if se.get(k):
                yield f"{path}.seLinuxOptions.{k}", "baseline: SELinux", f"setting the SELinux {k}"
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            yield f"{path}.seccompProfile.type", "baseline: Seccomp", "seccomp profile Unconfined"
    for key, value in template.annotations.items():
        if key.startswith(APPARMOR_ANNOTATION) and not (value == "runtime/default" or value.startswith("localhost/")):
            yield f"{T}.annotations.{key}", "baseline: AppArmor", f"AppArmor profile {value!r}"
    if csc.get("procMount", "Default") != "Default":
        yield f"{T}.security_context.procMount", "baseline: /proc Mount Type", f"procMount {csc['procMount']}"
    for i, s in enumerate(psc.get("sysctls") or []):
        if s.get("name") not in SAFE_SYSCTLS:
            yield f"{T}.pod_security_context.sysctls[{i}].name", "baseline: Sysctls", f"sysctl {s.get('name')!r}"
    if not restricted:
        return
    # -- restricted -------------------------------------------------------
    for i, v in enumerate(template.volumes):
        for kind in volume_sources(v):
            if kind not in RESTRICTED_VOLUMES and kind != "hostPath":      # hostPath: said above
                yield f"{T}.volumes[{i}].{kind}", "restricted: Volume Types", f"a {kind} volume"
    if csc.get("allowPrivilegeEscalation") is not False:
        yield (f"{T}.security_context.allowPrivilegeEscalation", "restricted: Privilege Escalation",
               "allowPrivilegeEscalation must be false")
    if eff("runAsNonRoot") is not True:
        yield where("runAsNonRoot"), "restricted: Running as Non-root", "runAsNonRoot must be true"
    for sc, path in ((psc, f"{T}.pod_security_context"), (csc, f"{T}.security_context")):
        if sc.get("runAsUser") == 0:
            yield f"{path}.runAsUser", "restricted: Running as Non-root user", "runAsUser 0 (root)"
    seccomp = (eff("seccompProfile") or {}).get("type")
    if seccomp not in ("RuntimeDefault", "Localhost") and seccomp != "Unconfined":   # Unconfined: said above
        yield where("seccompProfile"), "restricted: Seccomp", "seccompProfile.type must be RuntimeDefault or Localhost"
    drop = [str(c).upper() for c in (csc.get("capabilities") or {}).get("drop") or []]
    if "ALL" not in drop:
        yield f"{T}.security_context.capabilities.drop", "restricted: Capabilities", "capabilities must drop ALL"
