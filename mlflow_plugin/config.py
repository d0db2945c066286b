"""``--backend-config`` of ``mlflow run --backend hived``: schema and checking.

Everything a user can get wrong is refused here, before the MLflow run is
created or anything is submitted, with the offending key named. MLflow adds
its own keys to the dict it hands a backend (env manager, docker args, ...);
those are split off, never reported as unknown.
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mlflow.exceptions import ExecutionException

from hived.mlflow_plugin.schema_check import first_error
from hived.service.submit_flags import request_body

# keys MLflow itself puts into backend_config (mlflow.projects.utils.PROJECT_*)
MLFLOW_KEYS = ("ENV_MANAGER", "SYNCHRONOUS", "DOCKER_ARGS", "STORAGE_DIR",
               "build_image", "docker_auth", "_mlflow_local_backend_run_id")

SCHEMA: dict = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "vc": {"type": "string", "minLength": 1,
               "description": "virtual cluster the job runs in (default: $HIVED_VC)"},
        "gpus": {"type": "integer", "minimum": 1, "maximum": 1024,
                 "description": "GPUs per pod"},
        "cell": {"type": "string", "minLength": 1,
                 "description": "one cell of this type per pod, e.g. 'V100-NODE'; instead of gpus"},
        "cell_type": {"type": "string", "minLength": 1,
                      "description": "the CLI's spelling of 'cell' (hived submit --cell-type)"},
        "pods": {"type": "integer", "minimum": 1, "maximum": 1024},
        "cpus": {"type": "number", "minimum": 0, "maximum": 1000000,
                 "description": "CPUs per pod (hived submit --cpus)"},
        "memory_gb": {"type": "number", "minimum": 0, "maximum": 1000000000,
                      "description": "memory per pod in GB (hived submit --memory)"},
        "chain": {"type": "string", "minLength": 1,
                  "description": "GPU pool (cell chain); default: any that fits"},
        "max_retries": {"type": "integer", "minimum": 0, "maximum": 100},
        "affinity": {"enum": ["hard", "soft"]},
        "time_limit": {"type": "number", "minimum": 1, "maximum": 31536000,
                       "description": "seconds each run may take; then it fails as 'timeout' "
                                      "(hived submit --time-limit)"},
        "after": {"type": "string", "minLength": 1, "maxLength": 2000,
                  "description": "JOB[,JOB]: hived jobs that must succeed before this run starts "
                                 "(hived submit --after)"},
        "grace_period": {"type": "number", "minimum": 0, "maximum": 86400,
                         "description": "seconds between SIGTERM and SIGKILL on preemption"},
        "priority": {"enum": ["be", "opportunistic"]},
        "service_url": {"type": "string", "pattern": "^https?://[^\\s/]+"},
        "token": {"type": "string"},
        "workdir": {"type": "string", "minLength": 1},
        "detach": {"type": "boolean"},
        "follow": {"type": "boolean",
                   "description": "with detach: a background process keeps the run in step with its job "
                                  "(default true)"},
        "name": {"type": "string", "maxLength": 200},
        "checkpoint_dir": {"type": "string", "minLength": 1},
        "env": {"type": "object", "additionalProperties": {"type": "string"},
                "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"}},
        "poll": {"type": "number", "exclusiveMinimum": 0, "maximum": 60,
                 "description": "longest pause between status polls while following the job"},
    },
}

# set by hived or by the backend itself: a user value would detach the job from its
# cells or from its MLflow run, so it is refused here rather than by the service later
RESERVED_ENV = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "MLFLOW_RUN_ID",
                "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_ID")


class HivedBackendError(ExecutionException):
    """One readable line; an ExecutionException so ``mlflow run`` prints it without a traceback."""


class BackendConfigError(HivedBackendError):
    def __init__(self, key: str, problem: str):
        self.key, self.problem = key, problem
        super().__init__(f"hived backend config: '{key}': {problem}")


@dataclass(frozen=True)
class BackendConfig:
    vc: str
    gpus: int | None = 1
    cell: str | None = None
    pods: int = 1
    cpus: float | None = None
    memory_gb: float | None = None
    time_limit: float | None = None
    after: str | None = None
    affinity: str | None = None
    chain: str | None = None
    max_retries: int | None = None
    grace_period: float | None = None
    priority: str = "be"
    service_url: str | None = None
    token: str | None = None
    workdir: str | None = None
    detach: bool = False
    follow: bool = True
    name: str | None = None
    checkpoint_dir: str | None = None
    env: dict = field(default_factory=dict)
    poll: float = 2.0
    # MLflow's own keys, kept for the backend (env manager, synchronous, storage dir)
    mlflow: dict = field(default_factory=dict)

    def job_payload(self, command: str, env: dict, workdir: str, name: str) -> dict:
        """The POST jobs body, built as `hived submit` and `%gpu_submit` build theirs."""
        return request_body(self.vc, command, workdir=self.workdir or workdir, env={**env, **self.env},
                            job_class=self.priority, pods=self.pods, cell_type=self.cell,
                            gpus=None if self.cell else self.gpus, affinity=self.affinity, chain=self.chain,
                            max_retries=self.max_retries, grace_period=self.grace_period,
                            cpus=self.cpus, memory_gb=self.memory_gb, time_limit=self.time_limit,
                            after=[j.strip() for j in self.after.split(",") if j.strip()] if self.after else None,
                            name=self.name or name)


def _load(raw: Any) -> dict:
    """A dict, a JSON string or a path to a JSON file (MLflow passes any of these)."""
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return dict(raw)
    if isinstance(raw, str):
        text = raw
        if raw.endswith(".json") and not raw.lstrip().startswith("{"):
            try:
                with open(raw) as fh:
                    text = fh.read()
            except OSError as exc:
                raise BackendConfigError("<file>", f"cannot read {raw}: {exc.strerror}") from None
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise BackendConfigError("<json>", f"not valid JSON ({exc})") from None
        if not isinstance(value, dict):
            raise BackendConfigError("<json>", "must be a JSON object")
        return value
    raise BackendConfigError("<config>", f"must be a JSON object, got {type(raw).__name__}")


def parse_config(raw: Any, environ: Mapping[str, str] | None = None) -> BackendConfig:
    """Check ``raw`` and return the config; raises BackendConfigError naming the key."""
    environ = os.environ if environ is None else environ
    doc = _load(raw)
    mlflow_part = {k: doc.pop(k) for k in MLFLOW_KEYS if k in doc}
    error = first_error(SCHEMA, doc)  # not jsonschema: see schema_check.py (import time)
    if error is not None:
        raise BackendConfigError(*error)
    for key, sub in SCHEMA["properties"].items():
        if sub.get("type") == "integer" and key in doc:
            doc[key] = int(doc[key])  # 2.0 is a valid JSON integer; the service wants 2
    for name in doc.get("env", {}):
        if name in RESERVED_ENV or name.startswith("HIVED_"):
            raise BackendConfigError(f"env.{name}", "set by hived or the backend; cannot be overridden")
    if "cell_type" in doc:
        if "cell" in doc:
            raise BackendConfigError("cell_type", "give either 'cell' or 'cell_type' (the same thing), not both")
        doc["cell"] = doc.pop("cell_type")
    if "gpus" in doc and "cell" in doc:
        raise BackendConfigError("cell", "give either 'gpus' or 'cell', not both")
    vc = doc.pop("vc", None) or environ.get("HIVED_VC")
    if not vc:
        raise BackendConfigError("vc", "required (or set $HIVED_VC)")
    if "cell" in doc:
        doc["gpus"] = None
    env_manager = mlflow_part.get("ENV_MANAGER")
    if env_manager not in (None, "local"):
        raise BackendConfigError("--env-manager", f"hived runs the entry point in the job's own "
                                 f"environment; use --env-manager local, not {env_manager!r}")
    return BackendConfig(vc=vc, mlflow=mlflow_part, **doc)
