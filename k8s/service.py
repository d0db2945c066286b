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

import json
import logging
import os
from typing import Any, Optional

from hived.jupyter_ext.service.service import SchedulerService

from .launcher import KubernetesLauncher
from .nodes import NodeHealth
from .recovery import reconcile

log = logging.getLogger("hived.k8s.service")

ENV = {
    "HIVED_K8S_NAMESPACE": "namespace of the job pods (default: the pod's own namespace, else 'default')",
    "HIVED_K8S_TEMPLATE": "path of the default job template (JSON or YAML)",
    "HIVED_K8S_BIND": "node_name (default) or binding",
    "HIVED_K8S_INSTANCE": "name of this hived instance in pod labels (default 'hived')",
    "HIVED_K8S_KUBECONFIG": "kubeconfig path (default: in-cluster config, else $KUBECONFIG)",
    "HIVED_K8S_WATCH_NAMESPACE": "namespace whose pods hived watches (default: HIVED_K8S_NAMESPACE; '*' = all)",
    "HIVED_SPEC_VERSION": "spec version written on pods (default: the spec file's mtime)",
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
        nodes=nodes, **kw)


def spec_nodes(spec) -> list[str]:
    """The node names of a spec (the cells of each chain's node level)."""
    from hived.core.allocator import Allocator
    from hived.core.spec import load_spec
    spec = spec if hasattr(spec, "chains") else load_spec(spec)
    return sorted(Allocator(spec).tree.nodes)


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
