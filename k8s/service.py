"""The scheduler service on Kubernetes: the usual service, recovering from the cluster first.

``KubernetesSchedulerService`` is ``SchedulerService`` with three things added:

- its launcher is a ``KubernetesLauncher`` (given, or built from the
  environment by ``launcher_from_env``);
- before the engine is restored from the SQLite journal, ``recovery.reconcile``
  makes the journal agree with the pods in the cluster (the cluster wins), so
  the restore re-binds exactly what runs and adopts it;
- node health comes from the cluster (``NodeHealth``: Ready and not cordoned)
  unless another health monitor is given.

The jupyter-server extension hosts it with
``c.HivedExtension.service_class = "hived.k8s.service.KubernetesSchedulerService"``
(k8s/deploy does this through a config file).
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Any, Optional

from hived.jupyter_ext.service.service import SchedulerService

from .launcher import KubernetesLauncher
from .nodes import NodeHealth
from .policy import load_policy
from .recovery import reconcile

log = logging.getLogger("hived.k8s.service")

ENV = {
    "HIVED_K8S_NAMESPACE": "namespace of the job pods (default: the pod's own namespace, else 'default')",
    "HIVED_K8S_TEMPLATE": "path of the default job template (JSON or YAML)",
    "HIVED_K8S_BIND": "node_name (default) or binding",
    "HIVED_K8S_INSTANCE": "name of this hived instance in pod labels (default 'hived')",
    "HIVED_K8S_KUBECONFIG": "kubeconfig path (default: in-cluster config, else $KUBECONFIG)",
    "HIVED_K8S_WATCH_NAMESPACE": "namespace whose pods hived watches (default: HIVED_K8S_NAMESPACE; '*' = all)",
    "HIVED_SPEC_VERSION": "spec version written on pods (default: a hash of the spec)",
    "HIVED_K8S_POLICY": "pod policy file (YAML, k8s/policy.py; default: a job's own template fields must "
                        "meet the restricted profile and name no service account)",
}


def _own_namespace() -> Optional[str]:
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _load_template(path: Optional[str]) -> Any:
    if not path:
        return None
    with open(path) as f:
        text = f.read()
    if path.endswith(".json"):
        return json.loads(text)
    import yaml
    return yaml.safe_load(text)


def launcher_from_env(nodes=None, **kw) -> KubernetesLauncher:
    """A KubernetesLauncher configured by the HIVED_K8S_* variables (see ENV)."""
    env = os.environ
    return KubernetesLauncher(
        env.get("HIVED_K8S_KUBECONFIG") or None,
        template=_load_template(env.get("HIVED_K8S_TEMPLATE")),
        namespace=env.get("HIVED_K8S_NAMESPACE") or _own_namespace() or "default",
        instance=env.get("HIVED_K8S_INSTANCE") or "hived",
        bind=env.get("HIVED_K8S_BIND") or "node_name",
        spec_version=env.get("HIVED_SPEC_VERSION", ""),
        watch_namespace=env.get("HIVED_K8S_WATCH_NAMESPACE") or None,
        policy=load_policy(env["HIVED_K8S_POLICY"]) if env.get("HIVED_K8S_POLICY") else None,
        nodes=nodes, **{"pipeline": True, **kw})


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

    def __init__(self, spec_path, data_dir, launcher: Any = "kubernetes", *, health=None, **kw):
        if not isinstance(launcher, KubernetesLauncher):
            if launcher not in ("kubernetes", "local"):   # "local": hived serve's default flag
                raise ValueError(f"launcher: the Kubernetes service needs a KubernetesLauncher, got {launcher!r}")
            launcher = launcher_from_env()
        if health is None:
            health = NodeHealth(launcher.core, spec_nodes(spec_path), timeout_seconds=launcher.watch.timeout_seconds)
        self.cluster_recovery = None
        super().__init__(spec_path, data_dir, launcher=launcher, health=health, **kw)
        self._own_version = not launcher.spec_version
        if self._own_version:
            launcher.spec_version = _spec_version(spec_path)

    def reload_spec(self, path_or_text) -> dict:
        """Reconfigure while running. Unlike the base service (which refuses a spec that a running
        gang no longer fits), guaranteed gangs whose cells no longer fit their VC are downgraded to
        opportunistic on the same GPUs and their pods relabelled, as on a restart (HiveD 001 §4)."""
        from hived.core.spec import SpecError, load_spec
        try:
            new_spec = path_or_text if hasattr(path_or_text, "chains") else load_spec(path_or_text)
        except SpecError:
            return super().reload_spec(path_or_text)    # its error, its wording
        with self._lock:
            down = self._downgrades_for(new_spec)
            saved = {}
            for jid in down:
                rec = self.eng._jobs[jid]
                saved[jid] = rec.placement
                rec.placement = dataclasses.replace(rec.placement, opportunistic=True)
            old_eng = self.eng
            try:
                out = super().reload_spec(path_or_text)
            finally:
                for jid, p in saved.items():         # the old engine's records, as they were
                    old_eng._jobs[jid].placement = p
            now = self.clock()
            for jid in down:
                rec = self.eng._jobs[jid]
                rec.history.append((now, rec.state.value, "downgraded to opportunistic: its cells no longer "
                                    "fit the reloaded spec"))
                self.launcher.relabel_opportunistic(jid)
                log.warning("spec reload: job %s downgraded to opportunistic", jid)
            self._write(down, now)
        if self._own_version:
            self.launcher.spec_version = _spec_version(path_or_text)
        return {**out, "downgraded": down}

    def _downgrades_for(self, new_spec) -> list[str]:
        """Guaranteed holding jobs that fit ``new_spec`` only as opportunistic (in restore order)."""
        from hived.core.engine_records import JobRecord
        from hived.core.jobs import JobState
        scratch = self._new_engine(new_spec)
        out = []
        for rec in sorted(self.eng._jobs.values(), key=lambda r: (r.state is JobState.QUEUED, getattr(r, "_seq", 0))):
            d = rec.to_dict()
            try:
                scratch.restore(JobRecord.from_dict(d))
                continue
            except Exception:
                pass
            if rec.state.value in ("placed", "running", "preempting") and d.get("placement") \
                    and not d["placement"]["opportunistic"]:
                d["placement"]["opportunistic"] = True
                try:
                    scratch.restore(JobRecord.from_dict(d))
                    out.append(rec.job_id)
                except Exception:
                    pass          # does not fit even so: the base service refuses the spec
        return out

    def _recover(self) -> dict:
        # The journal is open, the spec loaded, nothing restored yet: the cluster goes first.
        self.launcher.start()
        self.cluster_recovery = reconcile(self.store, self.launcher, lambda: self._new_engine(self.spec),
                                          self.clock())
        summary = super()._recover()
        summary["cluster"] = self.cluster_recovery.to_dict()
        return summary

    def close(self) -> None:
        super().close()
        self.launcher.stop()
        if isinstance(self.health, NodeHealth):
            self.health.stop()
