"""The scheduler service on Kubernetes: the usual service, recovering from the cluster first.

``KubernetesSchedulerService`` is ``SchedulerService`` with three things added:

- its launcher is a ``KubernetesLauncher`` (given, or built from the
  environment by ``launcher_from_env``);
- before the engine is restored from the SQLite journal, ``recovery.reconcile``
  makes the journal agree with the pods in the cluster (the cluster wins), so
  the restore re-binds exactly what runs and adopts it;
- node health comes from the cluster (``NodeHealth``: a cordoned node takes
  no new gangs, a node NotReady past its toleration has its gangs moved)
  unless another health monitor is given;
- with ``leader=`` (or ``$HIVED_K8S_LEASE``) only the instance holding the
  coordination.k8s.io Lease acts (k8s/leader.py): a standby reads nothing,
  adopts nothing and refuses writes until it leads; then it recovers from the
  cluster as on a restart. Job ids continue after the highest id found in the
  journal *and* on any hived pod in the cluster, so they never repeat across
  instances or a lost journal.

The jupyter-server extension hosts it with
``c.HivedExtension.service_class = "hived.k8s.service.KubernetesSchedulerService"``
(k8s/deploy does this through a config file).
"""
from __future__ import annotations

import json
import logging
import os
import re
import threading
from typing import Any, cast

from hived.core.engine_records import JobRecord, request_from_dict, request_to_dict
from hived.core.jobs import HOLDING, DecisionKind, JobState
from hived.service.degraded import ServiceDegraded
from hived.service.scheduler import SchedulerService

from .durable import ClusterJobs
from .launcher import KubernetesLauncher
from .leader import Elector
from .nodes import NodeHealth
from .policy import load_policy
from .recovery import RecoveryReport, reconcile

log = logging.getLogger("hived.k8s.service")

ENV = {
    "HIVED_K8S_NAMESPACE": "hived's own namespace, where its Lease and pod signing key live (default: the pod's "
                           "own namespace, else the policy's schedulerNamespace); "
                           "jobs never run there: each VC's run in the namespace the pod policy names",
    "HIVED_K8S_TEMPLATE": "path of the default job template (JSON or YAML)",
    "HIVED_K8S_BIND": "node_name (default) or binding",
    "HIVED_K8S_INSTANCE": "name of this hived instance in pod labels (default 'hived')",
    "HIVED_K8S_KUBECONFIG": "kubeconfig path (default: in-cluster config, else $KUBECONFIG)",
    "HIVED_K8S_WATCH_NAMESPACE": "watch pods in this namespace only (default: every namespace, by label; "
                                 "only when all VCs run in one namespace)",
    "HIVED_SPEC_VERSION": "spec version written on pods (default: a hash of the spec)",
    "HIVED_K8S_POLICY": "pod policy file (YAML, k8s/policy.py): each VC's namespace and what its templates may "
                        "ask for (default: VC v runs in hived-v; a job's own template fields must meet the "
                        "restricted profile and name no service account)",
    "HIVED_K8S_LEASE": "name of the coordination.k8s.io Lease for leader election (default: none, "
                       "this instance acts alone)",
    "HIVED_K8S_LEASE_NAMESPACE": "namespace of that Lease (default: HIVED_K8S_NAMESPACE)",
    "HIVED_K8S_NOTREADY_TOLERATION": "seconds a node may be NotReady before its gangs are moved (default 60)",
    "HIVED_K8S_DEFAULT_GRACE": "grace period (s) of jobs that give none (default 30; never a force delete)",
    "HIVED_K8S_PENDING_TIMEOUT": "seconds a gang's pods may stay Pending before it is torn down and retried "
                                 "(default 600)",
    "HIVED_K8S_FINISHED_POD_TTL": "seconds after which pods of ended jobs are deleted (default 3600)",
    "HIVED_K8S_TEARDOWN_MARGIN": "seconds past the grace period after which pods never confirmed gone "
                                 "(a lost node) no longer hold their cells (default 30)",
    "HIVED_KERNEL_REPORT_URL": "hived's URL as Jupyter kernel pods reach it (their connection reports go there; "
                               "unset: kernel jobs are refused on Kubernetes)",
    "HIVED_K8S_KERNEL_PYTHON": "the Python that runs a kernel in the job image (default 'python')",
}
_JOB_ID = re.compile(r"j(\d+)")
LEAD_TAKEOVER_WAIT = 30.0   # seconds a request waits for a takeover under way (a LIST, the recovery)


def leader_from_env() -> dict | None:
    """The ``leader=`` argument that HIVED_K8S_LEASE / HIVED_K8S_LEASE_NAMESPACE ask for (None: no election)."""
    name = os.environ.get("HIVED_K8S_LEASE")
    if not name:
        return None
    ns = (os.environ.get("HIVED_K8S_LEASE_NAMESPACE") or os.environ.get("HIVED_K8S_NAMESPACE")
          or _own_namespace() or "default")
    return {"name": name, "namespace": ns}


def _own_namespace() -> str | None:
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _load_template(path: str | None) -> Any:
    if not path:
        return None
    with open(path) as f:
        text = f.read()
    if path.endswith(".json"):
        return json.loads(text)
    import yaml
    return yaml.safe_load(text)


def timestamped_logs() -> None:
    """Give hived's loggers a timestamped handler when nothing else would print them (in a pod, the
    jupyter-server host configures only its own logger: Python's last-resort handler has no time)."""
    import time as _time
    hived_log = logging.getLogger("hived")
    if hived_log.handlers or logging.getLogger().handlers:
        return
    h = logging.StreamHandler()
    fmt = logging.Formatter("%(asctime)s.%(msecs)03dZ %(levelname)s %(name)s: %(message)s", "%Y-%m-%dT%H:%M:%S")
    fmt.converter = _time.gmtime
    h.setFormatter(fmt)
    hived_log.addHandler(h)
    if hived_log.level == logging.NOTSET:
        hived_log.setLevel(logging.INFO)


def launcher_from_env(nodes=None, **kw) -> KubernetesLauncher:
    """A KubernetesLauncher configured by the HIVED_K8S_* variables (see ENV)."""
    env = os.environ
    return KubernetesLauncher(
        env.get("HIVED_K8S_KUBECONFIG") or None,
        template=_load_template(env.get("HIVED_K8S_TEMPLATE")),
        instance=env.get("HIVED_K8S_INSTANCE") or "hived",
        bind=env.get("HIVED_K8S_BIND") or "node_name",
        spec_version=env.get("HIVED_SPEC_VERSION", ""),
        watch_namespace=env.get("HIVED_K8S_WATCH_NAMESPACE") or None,
        policy=load_policy(env["HIVED_K8S_POLICY"]) if env.get("HIVED_K8S_POLICY") else None,
        default_grace=_env_seconds("HIVED_K8S_DEFAULT_GRACE", 30.0),
        pending_timeout=_env_seconds("HIVED_K8S_PENDING_TIMEOUT", 600.0),
        teardown_margin=_env_seconds("HIVED_K8S_TEARDOWN_MARGIN", 30.0),
        finished_pod_ttl=_env_seconds("HIVED_K8S_FINISHED_POD_TTL", 3600.0),
        namespace=env.get("HIVED_K8S_NAMESPACE") or _own_namespace(),
        kernel_report_url=env.get("HIVED_KERNEL_REPORT_URL") or "",
        kernel_python=env.get("HIVED_K8S_KERNEL_PYTHON") or "python",
        nodes=nodes, **{"pipeline": True, **kw})


def _env_seconds(name: str, default: float) -> float:
    text = os.environ.get(name)
    if not text:
        return default
    try:
        v = float(text)
    except ValueError:
        raise ValueError(f"${name}: must be a number of seconds, got {text!r}") from None
    if not v > 0:
        raise ValueError(f"${name}: must be > 0 seconds, got {text!r}")
    return v


def spec_nodes(spec) -> list[str]:
    """The node names of a spec (the cells of each chain's node level)."""
    from hived.core.allocator import Allocator
    from hived.core.spec import load_spec
    spec = spec if hasattr(spec, "chains") else load_spec(spec)
    return sorted(Allocator(spec).tree.nodes)


def _spec_version(spec) -> str:
    """A short hash of the spec's text (what pods record as hived.io/spec-version)."""
    import hashlib
    from pathlib import Path
    text = spec if isinstance(spec, str) and "\n" in spec else None
    if text is None:
        try:
            text = Path(spec).read_text() if isinstance(spec, (str, os.PathLike)) else json.dumps(spec, sort_keys=True,
                                                                                                  default=str)
        except OSError:
            text = str(spec)
    return hashlib.sha1(text.encode()).hexdigest()[:12]


class KubernetesSchedulerService(SchedulerService):
    """SchedulerService whose restart starts from the cluster's pods (k8s/recovery.py)."""

    def __init__(self, spec_path, data_dir, launcher: Any = "kubernetes", *, health=None,
                 leader: Any = "env", **kw):
        timestamped_logs()
        if not isinstance(launcher, KubernetesLauncher):
            if launcher not in ("kubernetes", "local"):   # "local": hived serve's default flag
                raise ValueError(f"launcher: the Kubernetes service needs a KubernetesLauncher, got {launcher!r}")
            launcher = launcher_from_env()
        if health is None:
            tol = _env_seconds("HIVED_K8S_NOTREADY_TOLERATION", 60.0)
            health = NodeHealth(launcher.core, spec_nodes(spec_path), timeout_seconds=launcher.watch.timeout_seconds,
                                notready_toleration=tol)
        # kernel pods read their job's kernel secret (service/kernel_connect.py, made by the base constructor)
        launcher.kernel_secret = lambda job_id: self.kernel_secret(job_id)
        if isinstance(health, NodeHealth) and launcher.node_ready is None:
            launcher.node_ready = health.ready       # lingering pods: force-deleted only off Ready nodes
        # accepted jobs and job ids live in the API server (durable.py); the journal is a cache
        self.cluster_jobs = ClusterJobs(launcher.core, launcher.own_namespace, launcher.instance, launcher.signer)
        self._durable: set[str] = set()          # jobs with a record in the cluster, deleted when they end
        self._submit_lock = threading.Lock()
        self._not_launched: set[str] = set()     # START decisions for gangs whose pods exist (see execute)
        self.cluster_recovery: RecoveryReport | None = None
        self._allocatable: dict[str, tuple[float, float]] = {}   # node -> (cpus, memory GB) its kubelet admits
        if leader == "env":
            leader = leader_from_env()
        # Standby until the Lease is ours: _recover (called by the base constructor) then waits.
        self._standby = leader is not None
        self._taking_lead = threading.Event()   # the Lease is ours, the takeover is under way
        self._lead_taken = threading.Event()    # ... and done (requests that came meanwhile go on)
        self._cluster_read: tuple[RecoveryReport, list[str], int] | None = None   # _read_cluster's, for _recover
        self._closing = False
        self.elector: Elector | None = None
        super().__init__(spec_path, data_dir, launcher=launcher, health=health, **kw)
        self._own_version = not launcher.spec_version
        if self._own_version:
            launcher.spec_version = _spec_version(spec_path)
        if leader is not None:
            self.elector = Elector(launcher.api, on_lead=self._on_lead, on_lose=self._on_lose, **leader)

    # -- one active scheduler ---------------------------------------------
    @property
    def leading(self) -> bool:
        return not self._standby

    def at_rest(self) -> bool:
        # a standby's engine is empty or stale (it lost the Lease): never a snapshot
        return not self._standby and super().at_rest()

    def _require_leader(self) -> None:
        if self._standby and self._taking_lead.is_set():
            # the Lease is ours and the cluster is being read: a request waits for that, not a 503
            self._lead_taken.wait(LEAD_TAKEOVER_WAIT)
        if self._standby:
            holder = self.elector.holder() if self.elector else None
            raise ServiceDegraded(f"this hived instance ({self.elector.identity if self.elector else '?'}) "
                                  f"is a standby; the leader is {holder or 'not known yet'}: send requests there")

    def start(self) -> KubernetesSchedulerService:
        if self.elector is not None and self._standby:
            self.elector.start()      # the timer starts when the Lease is ours (_on_lead)
            return self
        super().start()
        return self

    def _on_lead(self) -> None:
        with self._lock:
            if not self._standby or self._closing:
                return
        self._taking_lead.set()
        try:
            # The cluster's word first, read off the lock (a LIST of the pods, the jobs recorded in the
            # cluster, the highest job id): while this instance stands by nothing else uses its journal.
            self._cluster_read = self._read_cluster()
            with self._lock:
                if not self._standby or self._closing:
                    return
                self._standby = False
                self.recovered = self._recover()
                SchedulerService.start(self)
        finally:
            self._taking_lead.clear()
            self._lead_taken.set()

    def _on_lose(self) -> None:
        # Another instance may lead already: stop acting now. This instance's memory of the
        # jobs is stale from here on; a restart makes it a standby again.
        self._standby = True
        self.last_error = "lost the leader Lease: stopped scheduling (restart this instance to stand by again)"
        self._stop.set()
        self._wake.set()

    def tick(self) -> list[dict]:
        if self._standby:
            return []
        out = super().tick()
        with self._lock:
            again, self._not_launched = self._not_launched, set()
        return [d for d in out if not (d["kind"] == "start" and d["job_id"] in again)]

    def submit(self, user: str, payload: dict, groups=()) -> dict:
        """Accepted only once the cluster holds it: its id is reserved from the cluster's counter and
        the job recorded in its VC's namespace before the answer (durable.py); a standby that takes
        over finds it there, under the same id."""
        self._require_leader()
        with self._submit_lock:
            ids = self.job_ids
            try:
                n = self.cluster_jobs.reserve(ids.upcoming)
                ids.skip_to(n)
            except Exception as e:
                raise ServiceDegraded(f"cannot reserve a job id in the cluster: {e}") from None
            out = super().submit(user, payload, groups)
            if int(out["id"][1:]) != n:               # n was taken here: the counter moves past the one used
                self.cluster_jobs.reserve(int(out["id"][1:]))
        with self._lock:
            rec = self.eng.find(out["id"])
            req = request_to_dict(rec.request) if rec is not None else None
        try:
            if req is not None:
                self.cluster_jobs.put(out["id"], req, out["submitted"])
        except Exception as e:      # not recorded = not accepted: it is taken back
            SchedulerService.cancel(self, out["id"], user, groups)
            raise ServiceDegraded(f"job {out['id']} was not accepted: {e}") from None
        with self._lock:
            self._durable.add(out["id"])
        return out

    def write(self, ids, now: float, meta: dict | None = None, **kw: Any) -> Any:
        out = cast(Any, super().write)(ids, now, meta, **kw)     # **kw: the service's own options (sync=...)
        for jid in [j for j in ids if j in self._durable]:
            rec = self.eng.find(jid)
            if rec is not None and rec.state.terminal:     # ended: its record in the cluster goes
                self._durable.discard(jid)
                threading.Thread(target=self.cluster_jobs.delete, args=(jid,),
                                 name="hived-k8s-forget", daemon=True).start()
        return out

    def _queue_accepted(self, now: float) -> list[str]:
        """Jobs accepted by any leader and recorded in the cluster that neither the journal nor the
        pods know (the leader that accepted them died): queued here, under the same id."""
        recorded = self.cluster_jobs.load()
        if not recorded:
            return []
        journal = {d["job_id"]: d for d, _ in self.store.load_jobs_with_keys()}
        with_pods = {(p["metadata"].get("annotations") or {}).get("hived.io/job-id")
                     for p in self.launcher.owned_pods()}
        added = []
        for jid, (req, submitted) in sorted(recorded.items(), key=lambda kv: kv[1][1]):
            d = journal.get(jid)
            if (d is not None and JobState(d["state"]).terminal) or (d is None and jid in with_pods):
                # ended here, or its pods ended with no journal to say how: never run it again
                threading.Thread(target=self.cluster_jobs.delete, args=(jid,),
                                 daemon=True).start()
                continue
            self._durable.add(jid)
            if d is not None:
                continue
            rec = JobRecord(job_id=jid, request=request_from_dict(req), state=JobState.QUEUED, submitted=submitted)
            rec.note(now, "accepted by a hived instance that stopped; recorded in the cluster, "
                          "queued here under the same id")
            self.store.add_job(rec.to_dict(), now)
            added.append(jid)
            log.warning("recovery: job %s was accepted before the last leader stopped and is in no journal; "
                        "queued from its record in the cluster", jid)
        return added

    def cancel(self, job_id: str, user: str, groups=()) -> dict:
        self._require_leader()
        return super().cancel(job_id, user, groups)

    def report_progress(self, job_id: str, done: float, total: float) -> dict:
        self._require_leader()
        return super().report_progress(job_id, done, total)

    def set_health(self, node, gpu, healthy, reason="", _now=None) -> dict:
        self._require_leader()
        return super().set_health(node, gpu, healthy, reason, _now)

    # -- node states (k8s/nodes.py) ----------------------------------------
    def _poll_health(self) -> None:
        if isinstance(self.health, NodeHealth):
            return   # the Node watch keeps its states in memory: _health reads them in the round
        super()._poll_health()

    def _health(self, now: float) -> list[str]:
        self._release_drained(now)
        if not isinstance(self.health, NodeHealth):
            return super()._health(now)
        for node, state, reason in self.health.poll_states():
            self._node_state(node, state, reason, now)
        changed = self.health.poll_capacity()
        if changed:
            with self._lock:
                for node, cpus, mem in changed:
                    self._allocatable[node] = (cpus, mem)
                self._apply_allocatable([n for n, _, _ in changed], now)
        return []

    def _apply_allocatable(self, nodes, now: float) -> None:
        """A node's CPUs/memory for placement: the spec's, capped by what its kubelet admits."""
        view = self.eng.view
        for node in nodes:
            st = view.nodes.get(node)
            if st is None or node not in self._allocatable:
                continue
            chain = self.spec.chains[st.chain]
            cpus, mem = self._allocatable[node]
            cpus, mem = min(cpus, chain.node_cpus), min(mem, chain.node_memory_gb)
            st.cpus_free += cpus - st.cpus_total
            st.memory_free_gb += mem - st.memory_total_gb
            st.cpus_total, st.memory_total_gb = cpus, mem
        self.eng.on_capacity_changed(list(self.spec.vcs), [], now)   # queued jobs are tried again

    def _node_state(self, node: str, state: str, reason: str, now: float) -> None:
        """ok: cells usable; cordoned: no new placements, running gangs stay; lost: gangs move."""
        from .nodes import LOST, OK
        with self._lock:
            if state == LOST and (node, None) in self.unhealthy:
                # already marked (cordoned): clear it first so the allocator names the gangs to move
                self.eng.set_health(node, None, True, now)
            if state == OK:
                decisions = self.eng.set_health(node, None, True, now)
                self.unhealthy.pop((node, None), None)
            else:
                decisions = self.eng.set_health(node, None, False, now, move=(state == LOST))
                self.unhealthy[(node, None)] = reason
            if state != OK:
                log.warning("node %s: %s (%s)%s", node, state, reason,
                            f"; moving {[d.job_id for d in decisions]}" if decisions else "")
            self.write_live(now, also=[d.job_id for d in decisions])
            self.execute(decisions, now)

    # -- what REST shows: the cluster's word on launched gangs --------------
    def _events(self, now: float) -> list[str]:
        """As the service's, and a launch the cluster refused before any pod existed says why in its
        reason (the namespace missing and the command that creates it), not only in ``last_error``."""
        with self._inbox_lock:
            refused = {ev.job_id: ev.log_tail for ev in self._inbox if not getattr(ev, "ran", True)}
        touched = super()._events(now)
        for jid, tail in refused.items():
            rec = self.eng.find(jid)
            if rec is None or not rec.history:
                continue
            detail = tail.split("launch failed: ", 1)[-1]
            t, st, why = rec.history[-1]
            rec.history[-1] = (t, st, f"{why}; {detail}")
            if rec.reason:
                rec.reason = f"{rec.reason}; {detail}"
        return touched

    def execute(self, decisions, now: float) -> None:
        """As the service's, but no second launch of a gang whose pods exist: a gang adopted while its
        pods are still Pending stays ``placed`` (the engine restores it as to be started) and becomes
        running when the pod watch reports every member Running."""
        again = {d.job_id for d in decisions if d.kind is DecisionKind.START and self.launcher.has_live_gang(d.job_id)}
        self._not_launched |= again
        super().execute([d for d in decisions if not (d.kind is DecisionKind.START and d.job_id in again)], now)

    def _shown(self, d: dict) -> dict:
        """A REST job dict with the pods' truth: ``starting`` while a launched gang's pods are not all
        Running, ``terminating (stuck)`` while a pod outlives its grace period on a Ready node."""
        note = self.launcher.gang_note(d["id"]) if JobState(d["state"]) in HOLDING else None
        if note:
            d["reason"] = note
            if d["state"] == "placed":
                d["wait_reason"] = note          # what a placed job waits for (the dashboards show it)
        return d

    def get_job(self, job_id: str) -> dict:
        return self._shown(super().get_job(job_id))

    def list_jobs(self, vc: str | None = None, state: str | None = None, user: str | None = None) -> list[dict]:
        return [self._shown(d) for d in super().list_jobs(vc, state, user)]

    def status(self) -> dict:
        out = super().status()
        if self.elector is not None:
            out["leader"] = {"leading": not self._standby, "identity": self.elector.identity,
                             "lease": f"{self.elector.namespace}/{self.elector.name}", "lost": self.elector.lost}
        return out

    def _cluster_next_id(self) -> int:
        """Off the lock (API reads): the lowest job id number no hived pod and no instance has used."""
        top = max((int(m.group(1)) for m in map(_JOB_ID.fullmatch, self.launcher.cluster_job_ids()) if m),
                  default=0)
        return max(top + 1, self.cluster_jobs.peek())

    def _continue_job_ids(self, cluster_next: int) -> None:
        """Job ids go on after the highest one the journal or any hived pod in the cluster holds
        (``cluster_next``: ``_cluster_next_id()``, read before the lock was taken)."""
        seen = self.eng.job_ids() + list(self.extra)
        top = max((int(m.group(1)) for m in map(_JOB_ID.fullmatch, seen) if m), default=0)
        # the service hands out ids from its JobIds (data directory); the cluster's pods bound it too
        self.job_ids.skip_to(max(top + 1, cluster_next))

    def reload_spec(self, path_or_text) -> dict:
        """The service's one reconfiguration (see ``SchedulerService.reload_spec``), on the leader
        only; the pods of gangs it downgraded to opportunistic are relabelled to match."""
        self._require_leader()
        out = super().reload_spec(path_or_text)
        for jid in out["downgraded"]:
            self.launcher.relabel_opportunistic(jid)
        if self._own_version:
            self.launcher.spec_version = _spec_version(path_or_text)
        cluster_next = self._cluster_next_id()   # API reads, before the lock
        with self._lock:
            self._continue_job_ids(cluster_next)     # the new engine counts from 1 again
            self._apply_allocatable(list(self._allocatable), self.clock())
        return out

    def _read_cluster(self) -> tuple[RecoveryReport, list[str], int]:
        """The cluster's word made the journal's, before the engine is rebuilt from the journal:
        recovery (k8s/recovery.py: a LIST of this instance's pods, the repairs of interrupted
        launches), the accepted jobs recorded in the cluster only, and the next free job id.
        API calls: run off the service lock (at start, or by a standby that takes the lead)."""
        self.launcher.start()
        report = reconcile(self.store, self.launcher, lambda: self.new_engine(self.spec), self.clock())
        accepted = self._queue_accepted(self.clock())
        return report, accepted, self._cluster_next_id()

    snapshot_early = False   # the cluster's word is journaled first (_read_cluster): then the snapshot is read

    def _recover(self) -> dict:
        if self._standby:      # nothing is read or adopted before this instance leads
            return {"jobs": 0, "adopted": [], "lost": [], "relaunch": [], "unrestorable": [], "standby": True}
        # The journal is open, the spec loaded, nothing restored yet: the cluster goes first.
        read, self._cluster_read = self._cluster_read or self._read_cluster(), None
        report, accepted, cluster_next = read
        self.cluster_recovery = report
        summary = super()._recover()
        summary["cluster"] = report.to_dict()
        summary["cluster"]["accepted"] = accepted
        self._continue_job_ids(cluster_next)
        self._hold_draining(report.draining, self.clock())
        return summary

    def _hold_draining(self, draining: list, now: float) -> None:
        """GPUs of gangs that recovery ended take no new job until their pods are gone."""
        self._held = getattr(self, "_held", {})
        for d in draining:
            held = []
            for node, gpu in d["gpus"]:
                if node not in self.eng.view.nodes or (node, gpu) in self.unhealthy:   # either allocator
                    continue
                self.eng.set_health(node, gpu, False, now, move=False)
                self.unhealthy[(node, gpu)] = f"pods of ended job {d['job']} still stopping"
                held.append((node, gpu))
            if held:
                self._held[d["job"]] = held
                self.launcher.drain(d["job"], d["namespace"], d["pods"], d["grace"])

    def _release_drained(self, now: float) -> None:
        for jid in self.launcher.drained():
            for node, gpu in getattr(self, "_held", {}).pop(jid, []):
                if self.unhealthy.get((node, gpu), "").startswith("pods of ended job"):
                    self.eng.set_health(node, gpu, True, now)
                    self.unhealthy.pop((node, gpu), None)
                    log.info("GPU %s/%s: the pods of ended job %s are gone; it takes jobs again", node, gpu, jid)

    def close(self) -> None:
        with self._lock:
            self._closing = True      # leadership won from now on starts nothing
        super().close()
        if self.elector is not None:
            self.elector.stop(release=True)    # after the timer stopped: a standby may act at once
        self.launcher.stop()
        if isinstance(self.health, NodeHealth):
            self.health.stop()
