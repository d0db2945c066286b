"""What a Jupyter kernel job's pod gets on top of an ordinary job's (docs/kernels.md, "On Kubernetes").

A kernel job (one with the ``kernel`` label: hived.kernels' provisioner submits it) runs
``python -m hived.kernels.host -- <kernelspec argv>``. In a pod the host picks its own ports and
signing key and reports them to hived (hived.kernels.report), so its pod gets:

- ``HIVED_KERNEL_REPORT_URL``: where hived is reached from the pods (the launcher's
  ``kernel_report_url``, ``$HIVED_KERNEL_REPORT_URL``);
- ``HIVED_KERNEL_SECRET``: the job's kernel secret (service/kernel_connect.py), from a Secret of the
  job (``secret_manifest``, created with the pods, deleted with the job), never as a literal in the
  pod spec: who may read pods of the namespace does not read it;
- ``HIVED_POD_NAME`` and ``HIVED_POD_IP`` from the downward API (the report names its pod, and the
  kernel is reached at the pod's IP);
- the kernelspec's Python (a path on the Jupyter server's machine) replaced by the launcher's
  ``kernel_python`` (``python`` unless set: the image's own);
- no ``JUPYTER_KERNEL_CONNECTION``: the provisioner's local ports and key are not the pod's.
"""
from __future__ import annotations

from collections.abc import Callable

from hived.core.jobs import KERNEL_LABEL, JobRequest

from . import pod_builder as pb

SECRET_KEY = "secret"
HOST_MODULE = ["-m", "hived.kernels.host", "--"]
DROPPED_ENV = ("JUPYTER_KERNEL_CONNECTION",)


def is_kernel(request: JobRequest) -> bool:
    return KERNEL_LABEL in (request.labels or {})


def secret_name(job_id: str) -> str:
    return f"hived-{pb.slug(job_id)}-kernel"


def _field(name: str, path: str) -> dict:
    return {"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}}


def prepare(pods: list[dict], job_id: str, request: JobRequest, report_url: str, python: str) -> None:
    """Turn ``pods`` (pod_builder's manifests, before they are signed) into kernel pods."""
    if not is_kernel(request):
        return
    env = [{"name": "HIVED_KERNEL_REPORT_URL", "value": report_url},
           {"name": "HIVED_KERNEL_SECRET",
            "valueFrom": {"secretKeyRef": {"name": secret_name(job_id), "key": SECRET_KEY}}},
           _field("HIVED_POD_NAME", "metadata.name"), _field("HIVED_POD_IP", "status.podIP")]
    for pod in pods:
        container = pod["spec"]["containers"][0]
        container["env"] = [e for e in container["env"] if e["name"] not in DROPPED_ENV] + env
        command = container.get("command") or []
        if len(command) > 4 and command[1:4] == HOST_MODULE:
            own = command[0]
            container["command"] = [python, *HOST_MODULE, *(python if a == own else a for a in command[4:5]),
                                    *command[5:]]


def secret_manifest(job_id: str, namespace: str, pods: list[dict], secret_of: Callable[[str], str] | None,
                    instance: str) -> dict | None:
    """The Secret the kernel pods among ``pods`` read their kernel secret from; None for other pods."""
    wanted = any(e.get("name") == "HIVED_KERNEL_SECRET" for p in pods for e in p["spec"]["containers"][0]["env"])
    if not wanted:
        return None
    if secret_of is None:
        raise RuntimeError("kernel pods need the service's kernel secrets (launcher.kernel_secret is not set)")
    labels = {pb.L_MANAGED: "hived", pb.L_INSTANCE: pb.label_value(instance), pb.L_JOB: pb.label_value(job_id)}
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": secret_name(job_id), "namespace": namespace, "labels": labels,
                         "annotations": {pb.A_JOB: job_id}},
            "stringData": {SECRET_KEY: secret_of(job_id)}}
