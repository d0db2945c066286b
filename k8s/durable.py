"""Accepted jobs kept in the cluster: what any leader finds, whatever happened to the last one's disk.

hived's SQLite journal lives on the leader's own volume; a standby that takes
over has a journal of its own that never saw the jobs the old leader accepted.
So in Kubernetes mode a job is durable *in the API server* before the submit
is answered: one ConfigMap per accepted job (``hived-job-<id>``) in hived's own
namespace (where the Lease is: every instance reads it, and a VC whose
namespace is missing can still have its job accepted and refused at launch
with that reason), holding the request, deleted when the job ends. A new
leader lists them (one list) and queues every job that neither its journal nor
the cluster's pods know, under the same id (recovery).

Job ids come from one counter object, the ConfigMap ``hived-job-ids`` in
hived's own namespace, updated with optimistic concurrency (the update names
the resourceVersion it read; a stale one is refused with 409 and read again),
so two instances can never hand out the same id. Each record carries an HMAC
under hived's pod signing key (trust.py): a ConfigMap someone else wrote is
not a job.
"""
from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from kubernetes.client.rest import ApiException

from . import pod_builder as pb

log = logging.getLogger("hived.k8s.durable")

COUNTER = "hived-job-ids"
L_KIND = pb.PREFIX + "kind"
KIND_JOB = "accepted-job"
_TRIES = 50


class ClusterJobsError(RuntimeError):
    """The API server did not take the write: the job is not accepted."""


def job_object_name(job_id: str) -> str:
    return f"hived-job-{pb.slug(job_id, 50)}"


class ClusterJobs:
    """The accepted jobs and the job id counter in the API server (see the module's docstring)."""

    def __init__(self, core, own_namespace: str, instance: str, signer):
        self.core = core
        self.signer = signer            # trust.PodSigner: a record hived did not write is not a job
        self.own_namespace = own_namespace
        self.instance = instance
        self.selector = (f"{pb.L_MANAGED}=hived,{pb.L_INSTANCE}={pb.label_value(instance)},"
                         f"{L_KIND}={KIND_JOB}")
        self._lock = threading.Lock()

    # -- job ids ------------------------------------------------------------
    def reserve(self, at_least: int) -> int:
        """An id number no instance has had, >= ``at_least``; the counter moves past it."""
        return self._advance(lambda nxt: max(nxt, at_least))

    def peek(self) -> int:
        """The next number the counter would hand out (1 when there is no counter yet)."""
        try:
            cm = self.core.read_namespaced_config_map(COUNTER, self.own_namespace)
        except ApiException as e:
            if e.status == 404:
                return 1
            raise
        return int((cm.data or {}).get("next", "1"))

    def _advance(self, pick: Callable[[int], int]) -> int:
        self.signer.key()           # the key's Secret first: on a bare cluster that makes hived's namespace
        for _ in range(_TRIES):
            try:
                cm = self.core.read_namespaced_config_map(COUNTER, self.own_namespace)
            except ApiException as e:
                if e.status != 404:
                    raise ClusterJobsError(f"job id counter {self.own_namespace}/{COUNTER}: {e.status} "
                                           f"{e.reason}") from None
                n = pick(1)
                body = {"metadata": {"name": COUNTER, "labels": {pb.L_MANAGED: "hived"}}, "data": {"next": str(n + 1)}}
                try:
                    self.core.create_namespaced_config_map(self.own_namespace, body)
                    return n
                except ApiException as e2:
                    if e2.status == 409:      # another instance created it first: read that one
                        continue
                    raise ClusterJobsError(f"cannot create the job id counter {self.own_namespace}/{COUNTER}: "
                                           f"{e2.status} {e2.reason}") from None
            n = pick(int((cm.data or {}).get("next", "1")))
            body = {"metadata": {"name": COUNTER, "resourceVersion": cm.metadata.resource_version,
                                 "labels": cm.metadata.labels or {}}, "data": {"next": str(n + 1)}}
            try:
                self.core.replace_namespaced_config_map(COUNTER, self.own_namespace, body)
                return n
            except ApiException as e:
                if e.status != 409:           # 409: someone moved it since we read it
                    raise ClusterJobsError(f"job id counter {self.own_namespace}/{COUNTER}: {e.status} "
                                           f"{e.reason}") from None
        raise ClusterJobsError(f"job id counter {self.own_namespace}/{COUNTER}: still contended after {_TRIES} tries")

    # -- accepted jobs ---------------------------------------------------------
    def put(self, job_id: str, request: dict, submitted: float) -> None:
        """Record accepted job ``job_id``; raises ClusterJobsError when the API server does not take it."""
        ns = self.own_namespace
        body: dict[str, Any] = {"metadata": {"name": job_object_name(job_id), "labels": {
                    pb.L_MANAGED: "hived", pb.L_INSTANCE: pb.label_value(self.instance), L_KIND: KIND_JOB,
                    pb.L_JOB: pb.label_value(job_id)}},
                "data": {"job-id": job_id, "request": json.dumps(request, separators=(",", ":")),
                         "submitted": repr(float(submitted))}}
        body["data"]["signature"] = self.signer.mac(["job", ns, job_id, body["data"]["request"],
                                                     body["data"]["submitted"]])
        try:
            self.core.create_namespaced_config_map(ns, body)
        except ApiException as e:
            raise ClusterJobsError(f"the API server did not record job {job_id} in namespace {ns!r}: "
                                   f"{e.status} {e.reason}") from None

    def delete(self, job_id: str) -> None:
        try:
            self.core.delete_namespaced_config_map(job_object_name(job_id), self.own_namespace)
        except ApiException as e:
            if e.status != 404:
                log.warning("could not delete the record of ended job %s: %s %s", job_id, e.status, e.reason)
        except Exception as e:      # retried at the next recovery: a leftover record of an ended job
            log.warning("could not delete the record of ended job %s: %s", job_id, e)

    def load(self) -> dict[str, tuple[dict, float]]:
        """job id -> (request dict, submitted) of every accepted job recorded for this instance."""
        out: dict[str, tuple[dict, float]] = {}
        for ns in [self.own_namespace]:
            try:
                items = self.core.list_namespaced_config_map(ns, label_selector=self.selector).items
            except ApiException as e:
                if e.status == 404:
                    continue
                raise
            for cm in items:
                d = cm.data or {}
                try:
                    want = self.signer.mac(["job", ns, d["job-id"], d["request"], d["submitted"]])
                    if d.get("signature") != want:
                        raise ValueError("its signature is not hived's")
                    out[d["job-id"]] = (json.loads(d["request"]), float(d["submitted"]))
                except (KeyError, ValueError) as e:
                    log.warning("ignoring job record %s/%s: %s", ns, cm.metadata.name, e)
        return out
