"""KubernetesLauncher: the Launcher protocol (docs/architecture.md) on a Kubernetes cluster.

One pod per gang member, bound to the node of its physical cell with the GPU
indices hived chose (see pod_builder for the two ways of binding), in the
namespace of the job's VC (the admin policy's, else ``hived-<vc>``; never
hived's own). A namespace the admin has not applied refuses the launch with
that reason. One pod watch, across namespaces on hived's labels, turns pod
status into the protocol's events:

- ``started`` once every pod of the gang is running;
- ``exited`` once the gang is over: every pod succeeded (exit 0), or one pod
  ended badly (its exit code; the reason - Error, OOMKilled, Evicted, node
  lost, deleted - is in ``reason``/``log_tail``). A gang is all or nothing, so
  the first bad member makes the launcher delete its siblings.

``launch`` validates the job template before it creates anything, and a pod
the API server refuses (quota, admission, a name taken) makes it delete the
pods it already created: no half gang is left behind. With ``pipeline=True``
(what the service uses) ``launch`` and ``terminate`` return once the manifests
are built and queued: one sender thread makes the API calls in order, one at a
time, while the scheduler goes on deciding; a refused gang then comes back as
an ``exited`` event (exit 127, ``reason`` LaunchRefused) instead of a
``LaunchError``. ``flush()`` waits for the queue to drain. ``terminate`` deletes
the gang with the job's grace period (``default_grace`` when it has none; never
a force delete); the gang's ``exited`` comes when the pods are gone (or ended),
or ``teardown_margin`` after the grace period when a node confirms nothing.
``adopt`` after a restart finds the gang in the cluster. Node health comes
from ``NodeHealth`` (``health_changes()``).

Faults (docs/kubernetes.md, "Faults and failover"): pod writes are retried
through short API-server outages (rest_raw); deletions a long outage stopped
are retried from ``poll``; a gang not running ``pending_timeout`` after its
pods were created is torn down (exit 124, PendingTimeout). Events go to the
cluster from their own thread (events.py); finished pods of ended jobs are
collected after ``finished_pod_ttl`` (gc.py).
"""
from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException

from hived.core.jobs import JobRequest, Placement
from hived.service.host import HandOn

from . import kernel_pod as kp
from . import pod_builder as pb
from .adoption import Adoption
from .events import EventRecorder
from .gang import Gang
from .gc import FinishedPods
from .nodes import NodeHealth, node_ready
from .policy import DEFAULT_PREFIX, DEFAULT_SCHEDULER_NAMESPACE, AdminPolicy
from .rest_raw import TRANSIENT, RawApi, api_message, send
from .template import JobTemplate, TemplateError, check_for_vc
from .trust import PodSigner
from .watch import DELETED, EXIT_DELETED, FAILED, PENDING, RUNNING, SUCCEEDED, PodState, pod_state, pod_watch

log = logging.getLogger("hived.k8s.launcher")

TEMPLATE_ATTR = "k8s_template"   # a job's own template overrides (dict) on its JobRequest
RETIRED_KEPT = 10_000            # ended jobs whose pod names are remembered for their logs
EXIT_LAUNCH_REFUSED = 127        # what a gang the API server refused exits with (as a bad command)
DEFAULT_GRACE = 30.0             # a job without a grace period of its own gets Kubernetes' default
EXIT_PENDING_TIMEOUT = 124       # a gang whose pods never all started (timeout(1)'s code)
NODE_READ_EVERY = 5.0            # seconds a Node read answers "is it Ready?" for a lingering pod
APPLY_NAMESPACES = "python -m hived.k8s.policy SPEC POLICY | kubectl apply -f -"


@dataclass
class JobEvent:
    """A LauncherEvent (job_id, kind, exit_code, log_tail) with the Kubernetes detail added."""

    job_id: str
    kind: str                         # "started" | "exited"
    exit_code: int | None = None
    log_tail: str = ""
    state: str = ""                   # running | succeeded | failed | oom_killed | evicted | node_lost | deleted
    reason: str = ""
    rank: int | None = None        # the pod that decided it
    attempt: int = 0
    ran: bool = True                  # False: refused before any pod existed (nothing started)


class LaunchError(RuntimeError):
    """The API server refused a pod of the gang; the pods already created were removed."""

    def __init__(self, job_id: str, status: int | None, message: str):
        super().__init__(f"job {job_id}: the API server refused the gang ({status}): {message}")
        self.job_id = job_id
        self.status = status


def make_api_client(kubeconfig: str | None = None, context: str | None = None) -> client.ApiClient:
    """In-cluster config when running in a pod, else the kubeconfig (``$KUBECONFIG`` / ~/.kube/config)."""
    cfg = client.Configuration()
    if kubeconfig is None:
        try:
            config.load_incluster_config(client_configuration=cfg)
            return client.ApiClient(cfg)
        except config.ConfigException:
            pass
    config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
    return client.ApiClient(cfg)


def _namespace_missing(e: ApiException, ns: str) -> bool:
    """A create answered 404 because namespace ``ns`` itself does not exist."""
    if e.status != 404:
        return False
    try:
        details = json.loads(e.body or "").get("details") or {}
    except Exception:
        return False
    return details.get("kind") == "namespaces" and details.get("name") == ns


class KubernetesLauncher:
    """Launch gangs as pods. ``template`` is the default job template (dict or JobTemplate);
    a job may add overrides as ``request.k8s_template`` (validated the same way)."""

    kind = "kubernetes"   # what people are told runs the jobs (service/launcher.py)
    # recovery's part (adoption.py's Adoption, built in __init__): its methods are the launcher's
    adopt = HandOn("adoption", "adopt")
    has_live_gang = HandOn("adoption", "has_live_gang")
    gang_started = HandOn("adoption", "gang_started")
    owned_pods = HandOn("adoption", "owned_pods")
    trusted = HandOn("adoption", "trusted")
    cluster_job_ids = HandOn("adoption", "cluster_job_ids")
    create_members = HandOn("adoption", "create_members")
    bind_unbound = HandOn("adoption", "bind_unbound")
    delete_gang = HandOn("adoption", "delete_gang")
    drain = HandOn("adoption", "drain")
    drained = HandOn("adoption", "drained")
    relabel_opportunistic = HandOn("adoption", "relabel_opportunistic")
    mark_opportunistic = HandOn("adoption", "mark_opportunistic")

    def __init__(self, kubeconfig: str | None = None, *, api_client: client.ApiClient | None = None,
                 template: Any = None, namespace_prefix: str = DEFAULT_PREFIX, instance: str = "hived",
                 bind: str = "node_name", spec_version: str = "", context: str | None = None,
                 nodes: Iterable[str] | None = None, emit_events: bool = True,
                 priority_of: Callable[[JobRequest, Placement], int | None] | None = None,
                 watch_timeout: int = 5, watch_namespace: str | None = None, pipeline: bool = False,
                 teardown_margin: float = 30.0, default_grace: float = DEFAULT_GRACE,
                 api_retry_for: float = 30.0, pending_timeout: float = 600.0,
                 finished_pod_ttl: float = 3600.0, gc_every: float = 30.0, policy: Any = None,
                 namespace: str | None = None, kernel_report_url: str = "", kernel_python: str = "python"):
        if bind not in pb.BIND_MODES:
            raise ValueError(f"bind: {bind!r} is not one of {pb.BIND_MODES}")
        self.api = api_client or make_api_client(kubeconfig, context)
        self.core = client.CoreV1Api(self.api)
        # per-pod writes (see rest_raw for why not the generated calls), retried through short outages
        self.raw = RawApi(self.api, retry_for=api_retry_for)
        self.pipeline = pipeline
        # A failed gang's GPUs are released once its other members are gone, or this long after
        # their grace period when they linger (a dead node never confirms the deletion).
        self.teardown_margin = teardown_margin
        if not default_grace > 0:
            raise ValueError(f"default_grace: must be > 0 seconds, got {default_grace!r}")
        self.default_grace = float(default_grace)
        # A gang whose pods have not all started this long after creation (image never pulled, pod
        # never bound, node never admitting it) is torn down and reported, for the retry rules to decide.
        if not pending_timeout > 0:
            raise ValueError(f"pending_timeout: must be > 0 seconds, got {pending_timeout!r}")
        self.pending_timeout = float(pending_timeout)
        self._queue: queue.Queue = queue.Queue()
        self._sender: threading.Thread | None = None
        self.template = JobTemplate.from_dict(template) if template is not None else None
        # policy.AdminPolicy: what each VC's templates may ask for (None: the default policy, on
        # the fields a job sets itself; template.check_for_vc)
        self.policy = policy
        # Where each VC's jobs run: the policy's namespaces, or without one prefix + VC name. Never
        # hived's own namespace (the policy refuses that); the admin creates them (policy.py's tool).
        self._namespaces = policy if policy is not None else AdminPolicy(namespace_prefix=namespace_prefix)
        # hived's own namespace (its signing key's Secret; never a VC's): default the policy's
        self.own_namespace = str(namespace or getattr(policy, "scheduler_namespace", DEFAULT_SCHEDULER_NAMESPACE))
        self.signer = PodSigner(self.core, self.own_namespace, self.namespace_for)
        self.instance = instance
        self.bind = bind
        self.spec_version = spec_version
        self.priority_of = priority_of
        self.events = EventRecorder(self.raw, enabled=emit_events)
        self.selector = f"{pb.L_MANAGED}=hived,{pb.L_INSTANCE}={pb.label_value(instance)}"
        # Jobs of every VC, each in its own namespace: one list+watch across namespaces (by label),
        # or only ``watch_namespace`` when every VC the launcher serves runs there.
        self.watch_namespace = None if watch_namespace in (None, "*") else watch_namespace
        self.watch = pod_watch(self.core, self.selector, self._on_pod, timeout_seconds=watch_timeout,
                               namespace=self.watch_namespace)
        self.node_health = NodeHealth(self.core, nodes, timeout_seconds=watch_timeout) if nodes else None
        self.gangs: dict[str, Gang] = {}    # the gang book (under ``lock``): job -> the gang hived follows
        self._events: list[JobEvent] = []
        self._failing: set = set()       # gangs waiting for their other members to be gone
        self._retired: OrderedDict[str, tuple[str, list]] = OrderedDict()   # job -> (namespace, pod names)
        self.lock = threading.RLock()
        self._started = False
        # pods whose deletion failed even after retries (API server down): (ns, name) -> (grace, job id);
        # retried from poll() until done, so no half gang and no cancelled gang outlives an outage
        self._undeleted: dict[tuple[str, str], tuple[float, str]] = {}
        self._reaper: threading.Thread | None = None
        self.services: dict[str, tuple[str, str]] = {}   # job -> its gang's headless Service (ns, name)
        self.gc = FinishedPods(finished_pod_ttl, self._delete_finished, every=gc_every)
        # node -> Ready? (the service's node watch sets it; else node_is_ready reads the Node)
        self.node_ready: Callable[[str], bool | None] | None = None
        self._ready_cache: dict[str, tuple[bool, float]] = {}
        # Jupyter kernel jobs (kernel_pod.py): where their pods report to, the image's Python, and
        # job id -> kernel secret (the service sets it); job -> the Secret holding it (ns, name)
        self.kernel_report_url, self.kernel_python = kernel_report_url, kernel_python
        self.kernel_secret: Callable[[str], str] | None = None
        self.secrets: dict[str, tuple[str, str]] = {}
        self.adoption = Adoption(self)

    # -- lifecycle -------------------------------------------------------
    def start(self) -> KubernetesLauncher:
        if not self._started:
            self._started = True
            self.watch.start()
            if self.node_health:
                self.node_health.start()
        return self

    def stop(self) -> None:
        if self._sender is not None:
            self._queue.put(None)        # after what is queued: nothing accepted is dropped
            self._sender.join(timeout=60)
            self._sender = None
        if self._started:
            self.watch.stop()
            if self.node_health:
                self.node_health.stop()
            self._started = False

    # -- templates -------------------------------------------------------
    def template_for(self, request: JobRequest) -> JobTemplate:
        """The job's template: the default with the job's overrides on top; raises TemplateError."""
        own = getattr(request, TEMPLATE_ATTR, None)
        if self.template is None:
            if own is None:
                raise TemplateError("template", "no job template: give the launcher a default or the job its own")
            return JobTemplate.from_dict(own)
        return self.template.merged(own)

    def validate(self, request: JobRequest) -> JobTemplate:
        """Everything ``launch`` would refuse for this request, without touching the cluster."""
        t = self.template_for(request)
        if not request.user or not request.vc:
            raise TemplateError("request", "user and vc are required")
        if kp.is_kernel(request) and not self.kernel_report_url:
            raise TemplateError("labels.kernel", "a Jupyter kernel runs on Kubernetes only when hived knows the URL "
                                "its pods reach it at: set $HIVED_KERNEL_REPORT_URL for hived serve")
        check_for_vc(t, request.vc, self.policy, getattr(request, TEMPLATE_ATTR, None))
        ns = self.namespace_for(request.vc)
        if t.namespace is not None and t.namespace != ns:
            raise TemplateError("template.namespace", f"VC {request.vc!r} runs its jobs in namespace {ns!r} only, "
                                f"not {t.namespace!r}")
        if self.watch_namespace is not None and ns != self.watch_namespace:
            raise TemplateError("template.namespace", f"VC {request.vc!r} runs its jobs in namespace {ns!r}, but "
                                f"hived watches namespace {self.watch_namespace!r} only")
        return t

    def namespace_for(self, vc: str) -> str:
        """The namespace of VC ``vc``'s pods, gang Services and Events."""
        return self._namespaces.for_vc(vc).namespace

    def grace_of(self, requested: float) -> float:
        """The grace period pods get: the job's own, or ``default_grace`` when it has none (0 would be a
        force delete: the API object goes at once, while the container may still use the GPUs)."""
        return float(requested) if requested and requested > 0 else self.default_grace

    def sealed(self, pods: list[dict]) -> list[dict]:
        """``pods`` with their grace period set and hived's signature on them (trust.py)."""
        for pod in pods:
            spec = pod["spec"]
            spec["terminationGracePeriodSeconds"] = int(round(self.grace_of(spec.get("terminationGracePeriodSeconds")
                                                                            or 0)))
        return self.signer.sign(pods)

    # -- Launcher protocol ----------------------------------------------
    def launch(self, job_id: str, request: JobRequest, placement: Placement, attempt: int) -> None:
        self.start()
        template = self.validate(request)            # refused here: nothing was created
        ns = self.namespace_for(request.vc)
        priority = self.priority_of(request, placement) if self.priority_of else None

        def build() -> list[dict]:
            pods = pb.build_pods(job_id, request, placement, attempt, template, namespace=ns, instance=self.instance,
                                 bind=self.bind, spec_version=self.spec_version, priority=priority)
            kp.prepare(pods, job_id, request, self.kernel_report_url, self.kernel_python)
            return self.sealed(pods)
        names = [pb.pod_name(job_id, attempt, p.rank) for p in placement.pods]
        gang = Gang(job_id, attempt, ns, names, self.grace_of(request.grace_period), launching=True,
                    nodes=[p.node for p in placement.pods])
        with self.lock:
            self.gangs[job_id] = gang
        if self.pipeline:
            # Built on the sender too: launch stays O(1) for the scheduler, which decides on.
            self._submit(self._create_queued, gang, build)
        else:
            self._create_gang(gang, build())

    def _create_gang(self, gang: Gang, pods: list[dict]) -> None:
        try:
            self.create_all(gang.job_id, gang.namespace, pods)
        except LaunchError:
            with self.lock:
                self.gangs.pop(gang.job_id, None)
            raise
        with self.lock:
            gang.launching = False
            gang.pending_since = time.monotonic()
            self.evaluate(gang)

    # -- the sender (pipeline mode) --------------------------------------
    def _submit(self, fn: Callable, *args) -> None:
        if self._sender is None or not self._sender.is_alive():
            self._sender = threading.Thread(target=self._send_loop, name="hived-k8s-sender", daemon=True)
            self._sender.start()
        self._queue.put((fn, args))

    def _send_loop(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                fn, args = item
                fn(*args)
            except Exception:   # one bad call must not stop every later launch
                log.exception("sender: %s failed", getattr(item[0], "__name__", item[0]))
            finally:
                self._queue.task_done()

    def _create_queued(self, gang: Gang, build: Callable[[], list[dict]]) -> None:
        with self.lock:
            if gang.terminating:
                # Preempted or cancelled before its turn: nothing was created, so it is over now.
                gang.launching = False
                gang.ended = gang.skipped = True
                self._emit(gang, "exited", PodState(DELETED, "Deleted", EXIT_DELETED), None,
                           "terminated by hived before its pods were created")
                return
        try:
            pods = build()
        except Exception as e:    # a bug, not the job's fault: the job must not hang in "placed"
            log.exception("job %s: building its pods failed", gang.job_id)
            with self.lock:
                self.gangs.pop(gang.job_id, None)
            self._refused(gang, LaunchError(gang.job_id, None, f"building the pods failed: {e!r}"))
            return
        try:
            self._create_gang(gang, pods)
        except LaunchError as e:
            self._refused(gang, e)
        except Exception as e:   # never leave the job "placed" with a gang stuck half launched
            log.exception("job %s: launching its gang failed", gang.job_id)
            with self.lock:
                self.gangs.pop(gang.job_id, None)
            self._refused(gang, LaunchError(gang.job_id, None, f"{e.__class__.__name__}: {e}"))

    def _refused(self, gang: Gang, e: LaunchError) -> None:
        """What ``launch`` raises in sync mode, as the job's exited event (pipeline mode)."""
        self.events.job(gang.namespace, gang.job_id, "LaunchRefused", str(e), warning=True)
        with self.lock:
            self._events.append(JobEvent(gang.job_id, "exited", EXIT_LAUNCH_REFUSED,
                                         f"LaunchRefused: hived: launch failed: {e}", FAILED, "LaunchRefused",
                                         None, gang.attempt, ran=False))

    def flush(self, timeout: float = 60.0) -> bool:
        """Wait until every queued API call was made (pipeline mode); True when drained."""
        q = self._queue
        with q.all_tasks_done:      # Queue.join() with a timeout
            return q.all_tasks_done.wait_for(lambda: not q.unfinished_tasks, timeout)

    def _gang_service(self, job_id: str, ns: str, pods: list[dict]) -> dict | None:
        """The headless Service that gives a multi-pod gang's members their
        DNS names (``pod_builder.service_manifest``); None for one pod."""
        build = getattr(pb, "service_manifest", None)
        if build is None or len(pods) < 2:
            return None
        vc = (pods[0]["metadata"].get("labels") or {}).get(pb.L_VC, "")
        return build(job_id, ns, instance=self.instance, vc=vc)

    def create_all(self, job_id: str, ns: str, pods: list[dict]) -> None:
        """Create (and in binding mode bind) ``pods``; on any refusal delete the ones created."""
        created: list[str] = []
        try:
            secret = kp.secret_manifest(job_id, ns, pods, self.kernel_secret, self.instance)
            if secret is not None:   # before the pods, whose env reads it
                self.raw.create_secret(ns, secret)
                with self.lock:
                    self.secrets[job_id] = (ns, secret["metadata"]["name"])
            svc = self._gang_service(job_id, ns, pods)
            if svc is not None:      # before the pods: peers must resolve from their first moment
                self.raw.create_service(ns, svc)
                with self.lock:
                    self.services[job_id] = (ns, svc["metadata"]["name"])
            for pod in pods:
                self.raw.create_pod(ns, pod)
                created.append(pod["metadata"]["name"])
                if self.bind == "binding":
                    self.raw.bind_pod(ns, pod["metadata"]["name"], pb.binding_body(pod))
        except Exception as e:   # refused, or the connection broke: no half gang either way
            self._rollback(ns, created, job_id)
            if isinstance(e, ApiException) and _namespace_missing(e, ns):
                raise LaunchError(job_id, e.status, f"namespace {ns!r} does not exist; an admin creates each "
                                  f"VC's namespace: {APPLY_NAMESPACES}") from None
            if isinstance(e, ApiException):
                raise LaunchError(job_id, e.status, api_message(e)) from None
            raise LaunchError(job_id, None, f"{e.__class__.__name__}: {e}") from e
        self._scheduled_events(job_id, ns, pods)

    def _scheduled_events(self, job_id: str, ns: str, pods: list[dict]) -> None:
        """What the default scheduler's "Scheduled" Event says, for each member and the job."""
        if not pods or not self.events.enabled:
            return
        binding = json.loads(pods[0]["metadata"]["annotations"][pb.A_BINDING])
        where = {q["rank"]: q for q in binding["pods"]}
        for pod in pods:
            rank = int(pod["metadata"]["annotations"][pb.A_RANK])
            q = where.get(rank, {})
            self.events.pod(ns, pod["metadata"]["name"], "Scheduled",
                            f"hived bound rank {rank} of job {job_id} to {q.get('node')} GPUs {q.get('gpus')}")
        kind = "opportunistic" if binding.get("opportunistic") else "guaranteed"
        self.events.job(ns, job_id, "Scheduled", f"{len(pods)} pod(s) placed ({kind}) on "
                        f"{', '.join(sorted({str(q.get('node')) for q in binding['pods']}))}")

    # -- deleting pods ----------------------------------------------------
    def _rollback(self, ns: str, names: list[str], job_id: str = "") -> None:
        """Delete the pods of a gang that could not be created whole (grace 0: they never ran)."""
        self.delete_pods(ns, names, 0, "rollback", job_id=job_id)

    def delete_pods(self, ns: str, names: list[str], grace_period: float, what: str,
                     on_deleted: Callable[[str, int], None] | None = None, job_id: str = "") -> bool:
        """Delete ``names`` with the grace period (whole seconds); one already gone is fine. A pod that
        cannot be deleted now (API server unreachable past the retries) is retried from ``poll``.
        True when every deletion was accepted."""
        grace = max(0, int(round(grace_period)))
        ok, down = True, False
        for name in names:
            if down:       # unreachable past the retries: the rest waits for the reaper, not for timeouts
                with self.lock:
                    self._undeleted[(ns, name)] = (grace, job_id)
                continue
            try:
                self.raw.delete_pod(ns, name, grace)
            except ApiException as e:
                if e.status == 404:
                    continue
                log.error("%s: could not delete pod %s/%s: %s", what, ns, name, api_message(e))
                ok = False
                if e.status in TRANSIENT:
                    with self.lock:
                        self._undeleted[(ns, name)] = (grace, job_id)
                continue
            except Exception as e:    # connection refused/reset past the retries: try again later
                log.error("%s: could not delete pod %s/%s: %s; retrying later", what, ns, name,
                          e.__class__.__name__)
                ok, down = False, True
                with self.lock:
                    self._undeleted[(ns, name)] = (grace, job_id)
                continue
            with self.lock:
                self._undeleted.pop((ns, name), None)
            if on_deleted is not None:
                on_deleted(name, grace)
        return ok

    def _reap(self) -> None:
        """Retry the deletions an outage stopped (on its own thread: poll must not block)."""
        with self.lock:
            todo = dict(self._undeleted)
        for (ns, name), (grace, job_id) in todo.items():
            if self.delete_pods(ns, [name], grace, f"retry delete {job_id}", job_id=job_id):
                with self.lock:
                    gang = self.gangs.get(job_id)
                    if gang is not None and gang.terminating and not any(
                            j == job_id for _, j in self._undeleted.values()):
                        gang.release_at = time.monotonic() + grace + self.teardown_margin

    def terminate(self, job_id: str, grace_period: float) -> None:
        """Delete the gang's pods with ``grace_period`` (0: the job's own grace, as a cancel asks). Its
        ``exited`` comes once every pod is confirmed gone, or ``teardown_margin`` seconds after the grace
        period when some never is (a lost node's kubelet confirms nothing). A second call (the engine's
        KILL when the grace ran out) changes nothing: pods are never force-deleted under a live kubelet."""
        self.start()
        with self.lock:
            gang = self.gangs.get(job_id)
            if gang is None or gang.terminating or gang.ended:
                return
            grace_period = grace_period if grace_period and grace_period > 0 else gang.grace
            gang.terminating = True
            gang.release_at = float("inf")     # set once the deletions were accepted
            self._failing.add(gang)
        if self.pipeline:
            self._submit(self._delete_gang_pods, gang, grace_period)   # after its creates, in order
        else:
            self._delete_gang_pods(gang, grace_period)

    def _delete_gang_pods(self, gang: Gang, grace_period: float) -> None:
        with self.lock:
            if gang.skipped:
                return
            names, ns = list(gang.names), gang.namespace

        self.events.job(ns, gang.job_id, "Preempting", f"hived deletes the gang's {len(names)} pod(s) "
                        f"(grace period {int(round(grace_period))}s)")

        def record(name: str, grace: int) -> None:
            self.events.pod(ns, name, "Preempting" if grace else "Killing",
                            f"hived deletes the gang of job {gang.job_id} (grace period {grace}s)")
        accepted = self.delete_pods(ns, names, grace_period, f"terminate {gang.job_id}", record,
                                     job_id=gang.job_id)
        with self.lock:
            if accepted:
                gang.release_at = time.monotonic() + grace_period + self.teardown_margin
            self.evaluate(gang)

    def poll(self) -> list[JobEvent]:
        self.start()
        with self.lock:
            if self._undeleted and (self._reaper is None or not self._reaper.is_alive()):
                self._reaper = threading.Thread(target=self._reap, name="hived-k8s-reaper", daemon=True)
                self._reaper.start()
            now = time.monotonic()
            for gang in [g for g in self._failing if now >= g.release_at]:
                self.evaluate(gang)
            late = now - self.pending_timeout
            for gang in [g for g in self.gangs.values() if g.pending_since and g.pending_since <= late
                         and not (g.started or g.ended or g.terminating or g.launching or g.failing)]:
                self._pending_timed_out(gang)
            out, self._events = self._events, []
            for ev in out:
                if ev.kind == "exited":
                    self._retire(ev.job_id)
        self.gc.maybe_run(lambda: self.trusted(self.watch.snapshot()), self._tracked)
        return out

    def delete_service(self, ns: str, name: str) -> None:
        try:
            self.raw.delete_service(ns, name)
        except ApiException as e:
            if e.status != 404:
                log.warning("could not delete Service %s/%s: %s", ns, name, api_message(e))
        except Exception as e:    # best effort: a leftover headless Service holds no GPU
            log.warning("could not delete Service %s/%s: %s", ns, name, e)

    def delete_secret(self, ns: str, name: str) -> None:
        try:
            self.raw.delete_secret(ns, name)
        except Exception as e:    # the secret opens only this job's report route, which refuses once it ended
            log.warning("could not delete Secret %s/%s: %s", ns, name, e)

    def pod_names(self, job_id: str) -> list[str]:
        """The pods of the job's live gang (a kernel pod's report must name one: service/kernel_connect.py)."""
        with self.lock:
            gang = self.gangs.get(job_id)
            return [] if gang is None or gang.ended or gang.terminating else list(gang.names)

    def _tracked(self, pod: dict) -> bool:
        """The pod belongs to a gang hived still follows (its finished members wait for the gang)."""
        ann = pod["metadata"].get("annotations") or {}
        with self.lock:
            job_id = ann.get(pb.A_JOB)
            gang = self.gangs.get(job_id) if job_id is not None else None
            return gang is not None and not gang.ended and int(ann.get(pb.A_ATTEMPT, -1)) == gang.attempt

    def _delete_finished(self, ns: str, name: str) -> bool:
        try:
            self.raw.delete_pod(ns, name, 0)     # it has ended: no container left to stop
        except ApiException as e:
            if e.status != 404:
                log.warning("could not collect finished pod %s/%s: %s", ns, name, api_message(e))
                return False
        except Exception as e:
            log.warning("could not collect finished pod %s/%s: %s", ns, name, e.__class__.__name__)
            return False
        return True

    def _retire(self, job_id: str) -> None:
        """An ended gang whose exit was reported keeps only what ``logs`` needs, for the last
        RETIRED_KEPT jobs: a long-running service must not grow with every job it ever ran (lock held)."""
        gang = self.gangs.get(job_id)
        if gang is None or not gang.ended:
            return
        del self.gangs[job_id]
        self._retired[job_id] = (gang.namespace, gang.names)
        svc = self.services.pop(job_id, None)
        if svc is not None:     # a retry creates it again; off this thread (API call)
            threading.Thread(target=self.delete_service, args=svc, name="hived-k8s-svc-delete",
                             daemon=True).start()
        secret = self.secrets.pop(job_id, None)
        if secret is not None:
            threading.Thread(target=self.delete_secret, args=secret, name="hived-k8s-secret-delete",
                             daemon=True).start()
        self._retired.move_to_end(job_id)
        while len(self._retired) > RETIRED_KEPT:
            self._retired.popitem(last=False)

    def logs(self, job_id: str, rank: int = 0, offset: int = 0) -> tuple[str, int]:
        with self.lock:
            gang = self.gangs.get(job_id)
            ns, names = (gang.namespace, gang.names) if gang else self._retired.get(job_id, ("", []))
        if not 0 <= rank < len(names):
            return "", offset
        try:
            text = send(self.core.read_namespaced_pod_log, names[rank], ns,
                        container=pb.CONTAINER).decode("utf-8", "replace")
        except ApiException as e:
            return (f"(no logs from pod {names[rank]}: {e.status} {api_message(e)})\n" if offset == 0 else "",
                    offset)
        return text[offset:], len(text)

    # -- extras ----------------------------------------------------------
    def health_changes(self) -> list[tuple[str, bool]]:
        """Node health changes since the last call: [(node, healthy)] (start() first)."""
        return self.node_health.changes() if self.node_health else []

    def gang_states(self, job_id: str) -> dict[int, PodState]:
        with self.lock:
            gang = self.gangs.get(job_id)
            return dict(gang.states) if gang else {}

    # -- watch -> events -------------------------------------------------
    def _on_pod(self, kind: str, pod: dict) -> None:
        ann = (pod.get("metadata") or {}).get("annotations") or {}
        job_id = ann.get(pb.A_JOB)
        if job_id is None:
            return
        with self.lock:
            gang = self.gangs.get(job_id)
            md = pod["metadata"]
            if gang is None or int(ann.get(pb.A_ATTEMPT, -1)) != gang.attempt or \
                    md.get("namespace") != gang.namespace or md.get("name") not in gang.names:
                return      # not a member of a gang hived runs (an old attempt, or not hived's pod)
            gang.states[int(ann.get(pb.A_RANK, 0))] = pod_state(pod, deleted=(kind == "DELETED"))
            if not gang.launching:
                self.evaluate(gang)

    def evaluate(self, gang: Gang) -> None:
        """Turn the gang's pod states into at most one started and one exited event (lock held)."""
        if gang.ended:
            return
        size = len(gang.names)
        states = [gang.states.get(r) for r in range(size)]
        if gang.terminating:
            gone = all(s is not None and s.terminal for s in states)
            if not gone and gang.release_at and time.monotonic() >= gang.release_at and not gang.launching:
                self._lingering(gang, states)      # never hands cells on while a pod may still run
            if gone:
                codes = [s for s in states if s is not None and s.state not in (DELETED, SUCCEEDED)
                         and s.terminal]
                first = codes[0] if codes else PodState(DELETED, "Deleted", EXIT_DELETED)
                gang.ended = True
                self._failing.discard(gang)
                self._emit(gang, "exited", first, None, "terminated by hived")
            return
        bad = [(r, s) for r, s in enumerate(states) if s is not None and s.terminal and s.state != SUCCEEDED]
        if bad and gang.failing is None:
            gang.failing = bad[0]
            r, st = bad[0]
            self.events.job(gang.namespace, gang.job_id, "GangFailed",
                            f"pod {gang.names[r]} (rank {r}) ended {st.state} ({st.reason}, exit {st.exit_code}); "
                            "the other members are deleted", warning=True)
            gang.release_at = time.monotonic() + gang.grace + self.teardown_margin
            self._failing.add(gang)
            self._teardown(gang)
        if gang.failing is not None:
            # The job is over, but its cells are free only when no member can still use a GPU:
            # a job placed there at once would share GPUs with members still stopping.
            gone = all(s is not None and s.terminal for s in states)
            if not gone and time.monotonic() >= gang.release_at:
                self._lingering(gang, states)
            if gone:
                rank, s = gang.failing
                gang.ended = True
                self._failing.discard(gang)
                self._emit(gang, "exited", s, rank, "")
            return
        if not gang.started and all(s is not None and s.state in (RUNNING, SUCCEEDED) for s in states):
            gang.started = True
            self._emit(gang, "started", PodState(RUNNING), None, "")
        if all(s is not None and s.state == SUCCEEDED for s in states):
            gang.ended = True
            self._emit(gang, "exited", PodState(SUCCEEDED, "Completed", 0), None, "")

    def _lingering(self, gang: Gang, states: list) -> None:
        """Members outlive grace period + margin (lock held). On a Ready node the kubelet may still
        run them: their cells stay held however long (``stuck``, shown by REST). On a node that is
        NotReady, unreachable or gone, nothing confirms the end: those pods are force-deleted (an
        Event says so), and the gang ends once the API server has them gone."""
        left = [r for r, s in enumerate(states) if not (s is not None and s.terminal)]
        stuck = [r for r in left if r < len(gang.nodes) and self.node_is_ready(gang.nodes[r])]
        if stuck and not gang.stuck:
            gang.stuck = (f"terminating (stuck): pod {gang.names[stuck[0]]} on Ready node {gang.nodes[stuck[0]]} has "
                          f"not stopped {gang.grace + self.teardown_margin:g}s after deletion (grace period "
                          f"{gang.grace:g}s + {self.teardown_margin:g}s); its GPUs stay held until it is gone")
            log.warning("job %s: %s", gang.job_id, gang.stuck)
            self.events.job(gang.namespace, gang.job_id, "TerminationStuck", gang.stuck, warning=True)
        force = [gang.names[r] for r in left if r not in stuck and gang.names[r] not in gang.forced]
        if force:
            gang.forced.update(force)
            threading.Thread(target=self.force_delete, args=(gang.namespace, force, gang.job_id),
                             name="hived-force-delete", daemon=True).start()

    def force_delete(self, ns: str, names: list[str], job_id: str) -> None:
        for name in names:
            self.events.pod(ns, name, "ForceDeleted", f"hived force-deletes pod {name} of job {job_id}: its node is "
                            "NotReady or unreachable and confirmed nothing within the grace period + margin",
                            warning=True)
            log.warning("job %s: force-deleting pod %s/%s (its node is not Ready)", job_id, ns, name)
        self.delete_pods(ns, names, 0, f"force delete {job_id}", job_id=job_id)

    def node_is_ready(self, node: str) -> bool:
        """The node's kubelet reports Ready (the service's node watch, else a read, cached briefly)."""
        known = self.node_ready(node) if self.node_ready is not None else None
        if known is None and self.node_health is not None:
            known = self.node_health.ready(node)
        if known is not None:
            return known
        now = time.monotonic()
        hit = self._ready_cache.get(node)
        if hit is not None and now - hit[1] < NODE_READ_EVERY:
            return hit[0]
        try:
            ready = node_ready(json.loads(send(self.core.read_node, node)))
        except Exception:       # gone (404) or unreachable: nothing there confirms anything
            ready = False
        self._ready_cache[node] = (ready, now)
        return ready

    def gang_note(self, job_id: str) -> str | None:
        """What REST shows of a launched gang beyond its job state: stuck, or still starting."""
        with self.lock:
            gang = self.gangs.get(job_id)
            if gang is None or gang.ended:
                return None
            if gang.stuck:
                return gang.stuck
            if gang.started or gang.launching or gang.terminating or gang.failing or not gang.pending_since:
                return None
            states = [gang.states.get(r) for r in range(len(gang.names))]
            running = sum(1 for s in states if s is not None and s.state in (RUNNING, SUCCEEDED))
            waiting = sorted({s.reason or s.state for s in states if s is not None and s.state == PENDING})
            return (f"starting: {running} of {len(states)} pods Running"
                    + (f" (waiting: {', '.join(waiting)})" if waiting else ""))

    def _emit(self, gang: Gang, kind: str, s: PodState, rank: int | None, note: str) -> None:
        tail = ""
        if kind == "exited" and s.state != SUCCEEDED:
            where = f"pod {gang.names[rank]} (rank {rank})" if rank is not None else "gang"
            tail = f"{note or s.state}: {where}: {s.reason}" + (f": {s.message}" if s.message else "")
        self._events.append(JobEvent(gang.job_id, kind, s.exit_code if kind == "exited" else None, tail,
                                     s.state, s.reason, rank, gang.attempt))

    def _pending_timed_out(self, gang: Gang) -> None:
        """Its pods never all started: fail the gang (lock held); its cells go once the pods are gone."""
        waiting = sorted({s.reason or s.state for s in gang.states.values() if s.state == PENDING}) or ["missing"]
        why = (f"pods not all running {self.pending_timeout:.0f}s after creation "
               f"(waiting: {', '.join(waiting)})")
        log.warning("job %s: %s; the gang is torn down", gang.job_id, why)
        self.events.job(gang.namespace, gang.job_id, "PendingTimeout", why + "; the gang is torn down", warning=True)
        rank = next((r for r in range(len(gang.names))
                     if gang.states.get(r) is None or gang.states[r].state == PENDING), 0)
        gang.failing = (rank, PodState(FAILED, "PendingTimeout", EXIT_PENDING_TIMEOUT, why))
        gang.release_at = time.monotonic() + gang.grace + self.teardown_margin
        self._failing.add(gang)
        self._teardown(gang)
        self.evaluate(gang)

    def _teardown(self, gang: Gang) -> None:
        """One member failed: delete the others (a gang runs whole or not at all)."""
        names = [n for r, n in enumerate(gang.names)
                 if not (gang.states.get(r) and gang.states[r].terminal)]
        if not names:
            return
        # Not on the watch thread's lock: API calls there would stall every other event.
        threading.Thread(target=self.delete_pods, name="hived-teardown", daemon=True,
                         args=(gang.namespace, names, gang.grace, f"teardown {gang.job_id}"),
                         kwargs={"job_id": gang.job_id}).start()
