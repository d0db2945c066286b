"""After a restart: which pods are hived's, and how their gangs are taken up again.

The part of ``KubernetesLauncher`` (launcher.py) that recovery (recovery.py) and
the service's start-up call: the pods of this instance (``owned_pods``, only
those hived signed, trust.py), the gangs adopted from them (``adopt``), the
repairs of an interrupted launch (``create_members``, ``bind_unbound``), the
teardown of what the journal already ended (``delete_gang``, ``drain``), and
the relabelling of a downgraded gang (``mark_opportunistic``). A mixin: it
works on the launcher's own state (``_gangs``, the watch, the API clients).
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.rest import ApiException

from hived.core.jobs import KERNEL_LABEL, JobRequest, Placement

from . import kernel_pod as kp
from . import pod_builder as pb
from .watch import DELETED, EXIT_DELETED, PENDING, RUNNING, SUCCEEDED, PodState, pod_key, pod_state

log = logging.getLogger("hived.k8s.launcher")

FRESH_LIST_S = 2.0               # a full list younger than this is as fresh as a new one


@dataclass(eq=False)            # identity: gangs sit in sets
class _Gang:
    job_id: str
    attempt: int
    namespace: str
    names: list
    grace: float
    states: dict = field(default_factory=dict)     # rank -> PodState
    started: bool = False
    ended: bool = False
    terminating: bool = False
    launching: bool = False
    skipped: bool = False          # terminated before its pods were created (pipeline mode)
    failing: tuple | None = None    # (rank, PodState) of the member that ended the gang badly
    release_at: float = 0.0        # monotonic time after which a failing gang is over regardless
    pending_since: float = 0.0     # monotonic time its pods were created (or adopted), for the Pending timeout
    nodes: list = field(default_factory=list)     # rank -> the node its pod is bound to
    forced: set = field(default_factory=set)      # pod names force-deleted (their node is not Ready)
    stuck: str = ""                # why a member outlives its grace period on a Ready node (REST shows it)


def _send(call, *args, **kw) -> bytes:
    """One API call without the client's model decoding; the body is read and the connection
    handed back to the pool (an unread response would cost a new TLS handshake per call)."""
    resp = call(*args, _preload_content=False, **kw)
    try:
        return resp.read()
    finally:
        resp.release_conn()


def _api_message(e: ApiException) -> str:
    try:
        return json.loads(e.body or "").get("message") or str(e.reason)
    except Exception:
        return str(e.reason)


class Adoption:
    """Recovery's half of KubernetesLauncher (see the module's docstring)."""

    # provided by KubernetesLauncher
    _gangs: dict
    _lock: Any
    _services: dict
    _secrets: dict
    _delete_secret: Any
    _draining: dict
    _by_job: dict
    _by_job_key: tuple | None
    signer: Any
    _drain_forced: set
    core: Any
    raw: Any
    instance: str
    bind: str
    spec_version: str
    watch_namespace: str | None
    teardown_margin: float
    validate: Any
    namespace_for: Any
    start: Any
    grace_of: Any
    _sealed: Any
    _create_all: Any
    _node_ready: Any
    _force_delete: Any
    _delete_pods: Any
    _delete_service: Any
    _evaluate: Any
    events: Any
    watch: Any

    def create_members(self, job_id: str, request: JobRequest, placement: Placement, attempt: int,
                       ranks: list[int]) -> None:
        """Create the gang members ``ranks`` at their recorded cells (finishing an interrupted launch);
        all or none of them, like ``launch``."""
        template = self.validate(request)
        ns = self.namespace_for(request.vc)
        pods = [p for p in self._sealed(pb.build_pods(job_id, request, placement, attempt, template, namespace=ns,
                                                          instance=self.instance, bind=self.bind,
                                                          spec_version=self.spec_version))
                if int(p["metadata"]["annotations"][pb.A_RANK]) in set(ranks)]
        self._create_all(job_id, ns, pods)


    def bind_unbound(self, pods: list[dict]) -> list[str]:
        """Binding mode: bind the pods a crash left created but unbound (their node is in their
        gang-binding annotation); returns their names. Nothing to do in node_name mode."""
        if self.bind != "binding":
            return []
        done = []
        for pod in pods:
            md = pod["metadata"]
            if (pod.get("spec") or {}).get("nodeName") or md.get("deletionTimestamp"):
                continue
            self.raw.bind_pod(md["namespace"], md["name"], pb.binding_body(pod))
            done.append(md["name"])
        return done


    def drain(self, job_id: str, ns: str, names: list[str], grace_period: float) -> None:
        """Follow pods of a job hived no longer tracks until they are gone (see ``drained``)."""
        self.start()
        with self._lock:
            self._draining[job_id] = (ns, set(names),
                                      time.monotonic() + self.grace_of(grace_period) + self.teardown_margin)


    def drained(self) -> list[str]:
        """Jobs given to ``drain`` whose pods are all gone (or ended). Past grace period + margin, a pod
        on a node that is not Ready is force-deleted; one on a Ready node is waited for, however long."""
        if not self._draining:
            return []
        present = {pod_key(p): p for p in self.watch.snapshot()}
        now, out, force = time.monotonic(), [], []
        with self._lock:
            for jid, (ns, names, give_up) in list(self._draining.items()):
                live = [n for n in names if (ns, n) in present and not pod_state(present[(ns, n)]).terminal]
                if not live:
                    del self._draining[jid]
                    out.append(jid)
                elif now >= give_up:
                    nodes = {n: (present[(ns, n)].get("spec") or {}).get("nodeName") or "" for n in live}
                    force += [(ns, n, jid) for n in live if (ns, n) not in self._drain_forced
                              and not (nodes[n] and self._node_ready(nodes[n]))]
            self._drain_forced.update((ns, n) for ns, n, _ in force)
        for ns, n, jid in force:
            self._force_delete(ns, [n], jid)
        return out

    def delete_gang(self, job_id: str, ns: str, names: list[str], grace_period: float) -> None:
        """Delete pods hived no longer tracks (recovery: leftovers of a job that ended), with the job's grace,
        and the gang's headless Service (if it had one)."""
        self._delete_pods(ns, names, self.grace_of(grace_period), f"delete {job_id}")
        self._delete_service(ns, pb.service_name(job_id))
        self._delete_secret(ns, kp.secret_name(job_id))     # a kernel job's (k8s/kernel_pod.py), if any


    def relabel_opportunistic(self, job_id: str) -> None:
        """A tracked gang was downgraded (spec reload): relabel its pods."""
        with self._lock:
            gang = self._gangs.get(job_id)
        pods = [p for p in self.watch.snapshot()
                if (p["metadata"].get("annotations") or {}).get(pb.A_JOB) == job_id
                and gang is not None and p["metadata"]["name"] in gang.names]
        if pods and gang is not None:
            binding = json.loads(pods[0]["metadata"]["annotations"][pb.A_BINDING])
            self.mark_opportunistic(gang.namespace, [p["metadata"]["name"] for p in pods], binding)


    def mark_opportunistic(self, ns: str, names: list[str], placement: dict) -> None:
        """Relabel a downgraded gang's pods: priority class and binding say opportunistic now."""
        binding = json.dumps({**placement, "opportunistic": True}, separators=(",", ":"), sort_keys=True)
        body = {"metadata": {"labels": {pb.L_PRIORITY: "opportunistic"},
                             "annotations": {pb.A_BINDING: binding}}}
        for name in names:
            try:
                _send(self.core.patch_namespaced_pod, name, ns, body)
            except ApiException as e:
                log.error("relabel %s/%s as opportunistic: %s", ns, name, _api_message(e))


    def adopt(self, job_id: str, placement: Placement) -> bool:
        """After a restart: track the job's pods again. True when its pods exist in the cluster
        (a gang that ended while hived was down is adopted too; its ``exited`` follows in poll)."""
        self.start()

        def of_job(items):
            return [p for p in items if (p["metadata"].get("annotations") or {}).get(pb.A_JOB) == job_id]
        pods = self._cache_by_job().get(job_id, [])
        if not pods:
            return False
        attempt = max(int(p["metadata"]["annotations"].get(pb.A_ATTEMPT, 0)) for p in pods)
        pods = [p for p in pods if int(p["metadata"]["annotations"].get(pb.A_ATTEMPT, 0)) == attempt]
        binding = json.loads(pods[0]["metadata"]["annotations"][pb.A_BINDING])
        ns = pods[0]["metadata"]["namespace"]
        request = json.loads(pods[0]["metadata"]["annotations"].get(pb.A_REQUEST, "{}"))
        if len(pods) < len(binding["pods"]):
            # The cache may lag behind members created a moment ago (recovery completing a
            # gang): ask the server before calling a member missing.
            pods = [p for p in of_job(self.trusted(self.watch.list_now()[0]))
                    if int(p["metadata"]["annotations"].get(pb.A_ATTEMPT, 0)) == attempt]
        names = [pb.pod_name(job_id, attempt, q["rank"]) for q in binding["pods"]]
        gang = _Gang(job_id, attempt, ns, names, self.grace_of(float(request.get("grace_period", 0.0))),
                     nodes=[q["node"] for q in sorted(binding["pods"], key=lambda q: q["rank"])])
        present = {p["metadata"]["name"]: p for p in pods}
        with self._lock:
            self._gangs[job_id] = gang
            if len(names) > 1:     # created before the restart: deleted when the gang ends
                self._services[job_id] = (ns, pb.service_name(job_id))
            if KERNEL_LABEL in (request.get("labels") or {}):     # likewise its kernel Secret
                self._secrets[job_id] = (ns, kp.secret_name(job_id))
            for rank, name in enumerate(names):
                pod = present.get(name)
                gang.states[rank] = pod_state(pod) if pod else PodState(DELETED, "missing after restart",
                                                                        EXIT_DELETED)
            # A gang already running when hived went down was reported started then.
            gang.started = all(s.state in (RUNNING, SUCCEEDED) or s.terminal for s in gang.states.values()) \
                and any(s.state != PENDING for s in gang.states.values())
            gang.pending_since = time.monotonic()    # not started yet: the Pending timeout counts from now
            self._evaluate(gang)
        return True


    def has_live_gang(self, job_id: str) -> bool:
        """hived follows pods of ``job_id`` that have not ended (launched, or adopted after a restart)."""
        with self._lock:
            gang = self._gangs.get(job_id)
            return gang is not None and not gang.ended

    def gang_started(self, job_id: str) -> bool:
        """The gang of ``job_id`` has been seen with every member Running (an adopted gang still
        Pending has not: its ``started`` event comes when it has)."""
        with self._lock:
            gang = self._gangs.get(job_id)
            return gang is not None and gang.started

    def _cache_by_job(self) -> dict[str, list[dict]]:
        """The pod cache grouped by job, rebuilt only when the cache changed: a restart adopts every
        gang in turn, and scanning all pods for each would cost O(pods^2)."""
        key = (self.watch.resource_version, self.watch.relists, len(self.watch.pods))
        if self._by_job_key != key:
            index: dict[str, list[dict]] = {}
            for p in self.trusted(self.watch.snapshot()):
                jid = (p["metadata"].get("annotations") or {}).get(pb.A_JOB)
                if jid is not None:
                    index.setdefault(jid, []).append(p)
            self._by_job, self._by_job_key = index, key
        return self._by_job


    def trusted(self, pods: list[dict]) -> list[dict]:
        """The pods of ``pods`` that hived made (trust.py); every other one is left alone, reported
        once (log and a Warning Event on it)."""
        out = []
        for p in pods:
            why = self.signer.problem(p)
            if why is None:
                out.append(p)
            elif self.signer.first_report(p):
                md = p["metadata"]
                job = (md.get("annotations") or {}).get(pb.A_JOB)
                log.warning("pod %s/%s carries hived's labels (job %s) but is not hived's: %s; left alone",
                            md.get("namespace"), md.get("name"), job, why)
                self.events.pod(md.get("namespace", ""), md.get("name", ""), "UntrustedPod",
                                f"carries hived's labels (job {job}) but hived did not make it: {why}; "
                                "hived neither adopts nor deletes it", warning=True)
        return out

    def owned_pods(self, fresh: bool = False) -> list[dict]:
        """The pods of this hived instance: as the watch cache holds them, or (``fresh``) as a
        new list returns them (recovery wants the latest word, not the cache's). A cache that was
        listed in full a moment ago (the watch just started) is that word already, with the watch's
        events since on top: listing thousands of pods twice would double a restart's cost."""
        self.start()
        if fresh and time.monotonic() - self.watch.listed_at > FRESH_LIST_S:
            return self.trusted(self.watch.list_now()[0])
        return self.trusted(self.watch.snapshot())


    def cluster_job_ids(self) -> list[str]:
        """The job ids on every hived pod in the watched namespaces, of *any* hived instance:
        a new job id must not name an old pod (pod names derive from it)."""
        # this instance's pods are in the watch cache; the list fetches only other instances'
        sel = f"{pb.L_MANAGED}=hived,{pb.L_INSTANCE}!={pb.label_value(self.instance)}"
        own = [a[pb.A_JOB] for p in self.owned_pods() if pb.A_JOB in (a := (p["metadata"].get("annotations") or {}))]
        resp: Any   # with _preload_content=False: the raw urllib3 response, not a V1PodList
        if self.watch_namespace is None:
            resp = self.core.list_pod_for_all_namespaces(label_selector=sel, _preload_content=False)
        else:
            resp = self.core.list_namespaced_pod(self.watch_namespace, label_selector=sel, _preload_content=False)
        try:
            items = json.loads(resp.read()).get("items") or []
        finally:
            resp.release_conn()
        return own + [a[pb.A_JOB] for p in items if pb.A_JOB in (a := (p["metadata"].get("annotations") or {}))]
