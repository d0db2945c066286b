"""After a restart: which pods are hived's, and how their gangs are taken up again.

``Adoption`` is a part of ``KubernetesLauncher`` (launcher.py): the launcher builds it
(``launcher.adoption``) and hands its methods on, so recovery (recovery.py) and the
service's start-up call them on the launcher. It holds the pods of this instance
(``owned_pods``, only those hived signed, trust.py), the gangs adopted from them
(``adopt``), the repairs of an interrupted launch (``create_members``, ``bind_unbound``),
the teardown of what the journal already ended (``delete_gang``, ``drain``), and the
relabelling of a downgraded gang (``mark_opportunistic``). It keeps its own state (the
draining jobs, the cache grouped by job) and reaches the launcher only through
``LauncherHost``: public members of the launcher, nothing else.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from kubernetes.client.rest import ApiException

from hived.core.jobs import KERNEL_LABEL, JobRequest, Placement

from . import kernel_pod as kp
from . import pod_builder as pb
from .events import EventRecorder
from .gang import Gang
from .rest_raw import RawApi, api_message, send
from .template import JobTemplate
from .trust import PodSigner
from .watch import DELETED, EXIT_DELETED, PENDING, RUNNING, SUCCEEDED, ListWatch, PodState, pod_key, pod_state

log = logging.getLogger("hived.k8s.launcher")

FRESH_LIST_S = 2.0               # a full list younger than this is as fresh as a new one


class LauncherHost(Protocol):
    """What ``KubernetesLauncher`` lends its adoption part: public members only."""

    core: Any                        # the client's CoreV1Api
    raw: RawApi
    events: EventRecorder
    watch: ListWatch
    signer: PodSigner
    instance: str
    bind: str
    spec_version: str
    watch_namespace: str | None
    teardown_margin: float
    # the gang book (under ``lock``): job -> its gang, and the gang's headless Service and kernel Secret
    gangs: dict[str, Gang]
    services: dict[str, tuple[str, str]]
    secrets: dict[str, tuple[str, str]]

    @property
    def lock(self) -> threading.RLock: ...

    def start(self) -> Any: ...
    def validate(self, request: JobRequest) -> JobTemplate: ...
    def namespace_for(self, vc: str) -> str: ...
    def grace_of(self, requested: float) -> float: ...
    def evaluate(self, gang: Gang) -> None: ...
    def node_is_ready(self, node: str) -> bool: ...

    # the steps that create and delete
    def sealed(self, pods: list[dict]) -> list[dict]: ...
    def create_all(self, job_id: str, ns: str, pods: list[dict]) -> None: ...
    def delete_pods(self, ns: str, names: list[str], grace_period: float, what: str,
                    on_deleted: Callable[[str, int], None] | None = None, job_id: str = "") -> bool: ...
    def force_delete(self, ns: str, names: list[str], job_id: str) -> None: ...
    def delete_service(self, ns: str, name: str) -> None: ...
    def delete_secret(self, ns: str, name: str) -> None: ...


class Adoption:
    """Recovery's part of KubernetesLauncher, which builds it with itself as the host (see the module's docstring)."""

    def __init__(self, host: LauncherHost):
        self.host = host
        self._draining: dict[str, tuple[str, set, float]] = {}   # job -> (ns, pod names, give-up time)
        self._drain_forced: set = set()      # (ns, pod) force-deleted while draining
        self._by_job: dict[str, list[dict]] = {}
        self._by_job_key: tuple | None = None

    def create_members(self, job_id: str, request: JobRequest, placement: Placement, attempt: int,
                       ranks: list[int]) -> None:
        """Create the gang members ``ranks`` at their recorded cells (finishing an interrupted launch);
        all or none of them, like ``launch``."""
        host = self.host
        template = host.validate(request)
        ns = host.namespace_for(request.vc)
        pods = [p for p in host.sealed(pb.build_pods(job_id, request, placement, attempt, template, namespace=ns,
                                                     instance=host.instance, bind=host.bind,
                                                     spec_version=host.spec_version))
                if int(p["metadata"]["annotations"][pb.A_RANK]) in set(ranks)]
        host.create_all(job_id, ns, pods)


    def bind_unbound(self, pods: list[dict]) -> list[str]:
        """Binding mode: bind the pods a crash left created but unbound (their node is in their
        gang-binding annotation); returns their names. Nothing to do in node_name mode."""
        if self.host.bind != "binding":
            return []
        done = []
        for pod in pods:
            md = pod["metadata"]
            if (pod.get("spec") or {}).get("nodeName") or md.get("deletionTimestamp"):
                continue
            self.host.raw.bind_pod(md["namespace"], md["name"], pb.binding_body(pod))
            done.append(md["name"])
        return done


    def drain(self, job_id: str, ns: str, names: list[str], grace_period: float) -> None:
        """Follow pods of a job hived no longer tracks until they are gone (see ``drained``)."""
        self.host.start()
        with self.host.lock:
            self._draining[job_id] = (ns, set(names),
                                      time.monotonic() + self.host.grace_of(grace_period) + self.host.teardown_margin)


    def drained(self) -> list[str]:
        """Jobs given to ``drain`` whose pods are all gone (or ended). Past grace period + margin, a pod
        on a node that is not Ready is force-deleted; one on a Ready node is waited for, however long."""
        if not self._draining:
            return []
        present = {pod_key(p): p for p in self.host.watch.snapshot()}
        now, out, force = time.monotonic(), [], []
        with self.host.lock:
            for jid, (ns, names, give_up) in list(self._draining.items()):
                live = [n for n in names if (ns, n) in present and not pod_state(present[(ns, n)]).terminal]
                if not live:
                    del self._draining[jid]
                    out.append(jid)
                elif now >= give_up:
                    nodes = {n: (present[(ns, n)].get("spec") or {}).get("nodeName") or "" for n in live}
                    force += [(ns, n, jid) for n in live if (ns, n) not in self._drain_forced
                              and not (nodes[n] and self.host.node_is_ready(nodes[n]))]
            self._drain_forced.update((ns, n) for ns, n, _ in force)
        for ns, n, jid in force:
            self.host.force_delete(ns, [n], jid)
        return out

    def delete_gang(self, job_id: str, ns: str, names: list[str], grace_period: float) -> None:
        """Delete pods hived no longer tracks (recovery: leftovers of a job that ended), with the job's grace,
        and the gang's headless Service (if it had one)."""
        self.host.delete_pods(ns, names, self.host.grace_of(grace_period), f"delete {job_id}")
        self.host.delete_service(ns, pb.service_name(job_id))
        self.host.delete_secret(ns, kp.secret_name(job_id))     # a kernel job's (k8s/kernel_pod.py), if any


    def relabel_opportunistic(self, job_id: str) -> None:
        """A tracked gang was downgraded (spec reload): relabel its pods."""
        with self.host.lock:
            gang = self.host.gangs.get(job_id)
        pods = [p for p in self.host.watch.snapshot()
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
                send(self.host.core.patch_namespaced_pod, name, ns, body)
            except ApiException as e:
                log.error("relabel %s/%s as opportunistic: %s", ns, name, api_message(e))


    def adopt(self, job_id: str, placement: Placement) -> bool:
        """After a restart: track the job's pods again. True when its pods exist in the cluster
        (a gang that ended while hived was down is adopted too; its ``exited`` follows in poll)."""
        self.host.start()

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
            pods = [p for p in of_job(self.trusted(self.host.watch.list_now()[0]))
                    if int(p["metadata"]["annotations"].get(pb.A_ATTEMPT, 0)) == attempt]
        names = [pb.pod_name(job_id, attempt, q["rank"]) for q in binding["pods"]]
        gang = Gang(job_id, attempt, ns, names, self.host.grace_of(float(request.get("grace_period", 0.0))),
                    nodes=[q["node"] for q in sorted(binding["pods"], key=lambda q: q["rank"])])
        present = {p["metadata"]["name"]: p for p in pods}
        with self.host.lock:
            self.host.gangs[job_id] = gang
            if len(names) > 1:     # created before the restart: deleted when the gang ends
                self.host.services[job_id] = (ns, pb.service_name(job_id))
            if KERNEL_LABEL in (request.get("labels") or {}):     # likewise its kernel Secret
                self.host.secrets[job_id] = (ns, kp.secret_name(job_id))
            for rank, name in enumerate(names):
                pod = present.get(name)
                gang.states[rank] = pod_state(pod) if pod else PodState(DELETED, "missing after restart",
                                                                        EXIT_DELETED)
            # A gang already running when hived went down was reported started then.
            gang.started = all(s.state in (RUNNING, SUCCEEDED) or s.terminal for s in gang.states.values()) \
                and any(s.state != PENDING for s in gang.states.values())
            gang.pending_since = time.monotonic()    # not started yet: the Pending timeout counts from now
            self.host.evaluate(gang)
        return True


    def has_live_gang(self, job_id: str) -> bool:
        """hived follows pods of ``job_id`` that have not ended (launched, or adopted after a restart)."""
        with self.host.lock:
            gang = self.host.gangs.get(job_id)
            return gang is not None and not gang.ended

    def gang_started(self, job_id: str) -> bool:
        """The gang of ``job_id`` has been seen with every member Running (an adopted gang still
        Pending has not: its ``started`` event comes when it has)."""
        with self.host.lock:
            gang = self.host.gangs.get(job_id)
            return gang is not None and gang.started

    def _cache_by_job(self) -> dict[str, list[dict]]:
        """The pod cache grouped by job, rebuilt only when the cache changed: a restart adopts every
        gang in turn, and scanning all pods for each would cost O(pods^2)."""
        key = (self.host.watch.resource_version, self.host.watch.relists, len(self.host.watch.pods))
        if self._by_job_key != key:
            index: dict[str, list[dict]] = {}
            for p in self.trusted(self.host.watch.snapshot()):
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
            why = self.host.signer.problem(p)
            if why is None:
                out.append(p)
            elif self.host.signer.first_report(p):
                md = p["metadata"]
                job = (md.get("annotations") or {}).get(pb.A_JOB)
                log.warning("pod %s/%s carries hived's labels (job %s) but is not hived's: %s; left alone",
                            md.get("namespace"), md.get("name"), job, why)
                self.host.events.pod(md.get("namespace", ""), md.get("name", ""), "UntrustedPod",
                                     f"carries hived's labels (job {job}) but hived did not make it: {why}; "
                                     "hived neither adopts nor deletes it", warning=True)
        return out

    def owned_pods(self, fresh: bool = False) -> list[dict]:
        """The pods of this hived instance: as the watch cache holds them, or (``fresh``) as a
        new list returns them (recovery wants the latest word, not the cache's). A cache that was
        listed in full a moment ago (the watch just started) is that word already, with the watch's
        events since on top: listing thousands of pods twice would double a restart's cost."""
        self.host.start()
        if fresh and time.monotonic() - self.host.watch.listed_at > FRESH_LIST_S:
            return self.trusted(self.host.watch.list_now()[0])
        return self.trusted(self.host.watch.snapshot())


    def cluster_job_ids(self) -> list[str]:
        """The job ids on every hived pod in the watched namespaces, of *any* hived instance:
        a new job id must not name an old pod (pod names derive from it)."""
        # this instance's pods are in the watch cache; the list fetches only other instances'
        sel = f"{pb.L_MANAGED}=hived,{pb.L_INSTANCE}!={pb.label_value(self.host.instance)}"
        own = [a[pb.A_JOB] for p in self.owned_pods() if pb.A_JOB in (a := (p["metadata"].get("annotations") or {}))]
        resp: Any   # with _preload_content=False: the raw urllib3 response, not a V1PodList
        if self.host.watch_namespace is None:
            resp = self.host.core.list_pod_for_all_namespaces(label_selector=sel, _preload_content=False)
        else:
            resp = self.host.core.list_namespaced_pod(self.host.watch_namespace, label_selector=sel,
                                                      _preload_content=False)
        try:
            items = json.loads(resp.read()).get("items") or []
        finally:
            resp.release_conn()
        return own + [a[pb.A_JOB] for p in items if pb.A_JOB in (a := (p["metadata"].get("annotations") or {}))]
