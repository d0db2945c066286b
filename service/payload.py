"""REST job bodies -> ``JobRequest``, and ``JobRecord`` -> the REST job dict.

Shape checks live here (types, unknown fields, empty command, missing
working directory, absurd numbers); what depends on the cluster (VC exists,
the gang fits the VC at all) is ``Engine.validate``'s job. Every refusal is a
``RequestError(field, problem)`` and happens before anything is stored.
"""
from __future__ import annotations

import json
import math
import re
from typing import Any

from hived.core.engine import RequestError
from hived.core.engine_records import JobRecord
from hived.core.jobs import Affinity, JobClass, JobRequest, JobState, PodGroup

# The one definition of every bound on a job body. The checks below use it, and the
# REST API's JSON schema (JobSubmit in openapi.json) takes its numbers from it
# (hived.jupyter_ext.handlers.schema.openapi), so the doors cannot disagree.
LIMITS: dict[str, dict[str, Any]] = {
    "vc": {"maxLength": 128},
    "command": {"maxLength": 65536, "maxItems": 1024},   # characters of the string / of each item; items
    "pods": {"minimum": 1, "maximum": 1024},
    "gpus": {"minimum": 1, "maximum": 1024},
    "cpus": {"minimum": 0, "maximum": 1_000_000},
    "memory_gb": {"minimum": 0, "maximum": 1_000_000_000},
    "grace_period": {"minimum": 0, "maximum": 86400},     # one day: longer is a typo, not a grace period
    "name": {"maxLength": 200},
    "env": {"maxProperties": 256, "maxLength": 65536},   # pairs; characters of each value
    "labels": {"maxProperties": 64, "maxLength": 1000},  # pairs; characters of each value
    "estimate": {"minimum": 0.001, "maximum": 31_536_000},
    "max_retries": {"minimum": 0, "maximum": 100},
    "groups": {"maxItems": 64},
    "needs": {"maxItems": 16, "maxLength": 4096},   # paths per list; characters of each path
    "time_limit": {"minimum": 1, "maximum": 31_536_000},   # seconds of each run (a year at most)
    "after": {"maxItems": 64},                              # job ids it waits for
}
MAX_GRACE = float(LIMITS["grace_period"]["maximum"])
MAX_NAME = LIMITS["name"]["maxLength"]
MAX_ENV = LIMITS["env"]["maxProperties"]
MAX_COMMAND_CHARS = LIMITS["command"]["maxLength"]
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RESERVED_ENV = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")

FIELDS = ("vc", "command", "job_class", "pods", "gpus", "cell_type", "groups", "chain", "affinity",
          "grace_period", "name", "env", "workdir", "allow_opportunistic", "estimate",
          "max_retries", "labels", "cpus", "memory_gb", "k8s_template", "needs", "time_limit", "after")
MAX_TEMPLATE_CHARS = 64_000  # a job template override larger than this is not a template


def _int(payload: dict, key: str, default: int | None, lo: int, hi: int) -> int | None:
    v = payload.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        else:
            raise RequestError(key, f"must be an integer, got {v!r}")
    if not lo <= v <= hi:
        raise RequestError(key, f"must be between {lo} and {hi}, got {v}")
    return v


def _num(payload: dict, key: str, default, lo: float, hi: float) -> float | None:
    v = payload.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise RequestError(key, f"must be a finite number, got {v!r}")
    if not lo <= v <= hi:
        raise RequestError(key, f"must be between {lo:g} and {hi:g}, got {v:g}")
    return float(v)


def _given_int(payload: dict, key: str, default: int, lo: int, hi: int) -> int:
    """An integer with a default: absent means the default, null is refused (as the schema does)."""
    v = _int(payload, key, default, lo, hi)
    if v is None:
        raise RequestError(key, "must be an integer, got None")
    return v


def _given_num(payload: dict, key: str, default: float, lo: float, hi: float) -> float:
    """A number with a default: absent means the default, null is refused (as the schema does)."""
    v = _num(payload, key, default, lo, hi)
    if v is None:
        raise RequestError(key, "must be a finite number, got None")
    return v


def _bounds(key: str) -> tuple[Any, Any]:
    return LIMITS[key]["minimum"], LIMITS[key]["maximum"]


def _group(d: Any, where: str) -> PodGroup:
    """One pod group; ``where`` prefixes field names in errors ("" for the flat form)."""
    pre = f"{where}." if where else ""
    if not isinstance(d, dict):
        raise RequestError(where, f"must be an object, got {type(d).__name__}")
    unknown = set(d) - {"pods", "gpus", "cell_type", "cpus", "memory_gb"}
    if unknown:
        raise RequestError(f"{pre}{min(unknown)}", "unknown field")
    cell_type = d.get("cell_type")
    if cell_type is not None and (not isinstance(cell_type, str) or not cell_type):
        raise RequestError(f"{pre}cell_type", f"must be a cell type name, got {cell_type!r}")
    try:
        pods = _given_int(d, "pods", 1, *_bounds("pods"))
        gpus = _given_int(d, "gpus", 1, *_bounds("gpus"))
        cpus = _num(d, "cpus", None, *_bounds("cpus"))
        mem = _num(d, "memory_gb", None, *_bounds("memory_gb"))
    except RequestError as e:
        raise RequestError(f"{pre}{e.field}", e.problem) from None
    return PodGroup(pods=pods, gpus=gpus, cell_type=cell_type, cpus=cpus, memory_gb=mem)


def parse_job(user: str, payload: Any) -> JobRequest:
    """The POST /jobs body (see docs/architecture.md) -> JobRequest, or RequestError."""
    if not isinstance(payload, dict):
        raise RequestError("body", f"must be a JSON object, got {type(payload).__name__}")
    unknown = sorted(set(payload) - set(FIELDS))
    if unknown:
        raise RequestError(unknown[0], f"unknown field; known: {', '.join(FIELDS)}")
    vc = payload.get("vc")
    if not isinstance(vc, str) or not vc:
        raise RequestError("vc", f"required: the name of a VC, got {vc!r}")
    if len(vc) > LIMITS["vc"]["maxLength"]:
        raise RequestError("vc", f"longer than {LIMITS['vc']['maxLength']} characters")
    command = _command(payload.get("command"))
    try:
        job_class = JobClass(str(payload.get("job_class", "te")).lower())
    except ValueError:
        raise RequestError("job_class", f"must be te, be or opportunistic, got {payload.get('job_class')!r}") from None
    try:
        affinity = Affinity(str(payload.get("affinity", "hard")).lower())
    except ValueError:
        raise RequestError("affinity", f"must be hard or soft, got {payload.get('affinity')!r}") from None
    groups = _groups(payload)
    grace = _given_num(payload, "grace_period", 0.0, *_bounds("grace_period"))
    name = payload.get("name", "")
    if not isinstance(name, str) or len(name) > MAX_NAME:
        raise RequestError("name", f"must be a string of at most {MAX_NAME} characters")
    env = _env(payload.get("env") or {})
    workdir = payload.get("workdir")
    if workdir is not None:
        if not isinstance(workdir, str) or not workdir:
            raise RequestError("workdir", f"must be a path, got {workdir!r}")
    labels = _labels(payload.get("labels") or {})
    allow = payload.get("allow_opportunistic", False)
    if not isinstance(allow, bool):
        raise RequestError("allow_opportunistic", f"must be true or false, got {allow!r}")
    chain = payload.get("chain")
    if chain is not None and not isinstance(chain, str):
        raise RequestError("chain", f"must be a chain name, got {chain!r}")
    template = _template(payload.get("k8s_template"))
    parse_needs(payload)
    after = _after(payload.get("after") or [])
    return JobRequest(
        user=user, vc=vc, command=command, job_class=job_class, groups=groups, chain=chain,
        affinity=affinity, grace_period=grace, allow_opportunistic=allow, name=name,
        env=dict(env), workdir=workdir,
        estimate=_num(payload, "estimate", None, *_bounds("estimate")),
        max_retries=_int(payload, "max_retries", None, *_bounds("max_retries")), labels=dict(labels),
        k8s_template=template, time_limit=_num(payload, "time_limit", None, *_bounds("time_limit")),
        after=list(dict.fromkeys(after)))


def _command(command: Any) -> Any:
    """``command``: a non-empty string (run by a shell) or a list whose first item is the program."""
    if isinstance(command, str):
        if not command.strip():
            raise RequestError("command", "must not be empty")
        if len(command) > MAX_COMMAND_CHARS:
            raise RequestError("command", f"longer than {MAX_COMMAND_CHARS} characters")
    elif isinstance(command, list):
        if not command or not all(isinstance(a, str) for a in command) or not command[0].strip():
            raise RequestError("command", "must be a non-empty list of strings whose first item is the program")
        if len(command) > LIMITS["command"]["maxItems"]:
            raise RequestError("command", f"more than {LIMITS['command']['maxItems']} items")
        for i, arg in enumerate(command):
            if len(arg) > MAX_COMMAND_CHARS:
                raise RequestError(f"command[{i}]", f"longer than {MAX_COMMAND_CHARS} characters")
    else:
        raise RequestError("command", f"required: a string or a list of strings, got {command!r}")
    return command


def _groups(payload: dict) -> list:
    """The pod groups: ``groups``, or one group from the top-level pods/gpus/cell_type/cpus/memory_gb."""
    if "groups" in payload:
        if any(k in payload for k in ("pods", "gpus", "cell_type", "cpus", "memory_gb")):
            raise RequestError("groups", "give either groups or pods/gpus/cell_type, not both")
        groups = payload["groups"]
        if not isinstance(groups, list) or not groups:
            raise RequestError("groups", "must be a non-empty list of {pods, gpus | cell_type}")
        if len(groups) > LIMITS["groups"]["maxItems"]:
            raise RequestError("groups", f"more than {LIMITS['groups']['maxItems']} pod groups")
        return [_group(g, f"groups[{i}]") for i, g in enumerate(groups)]
    return [_group({k: payload[k] for k in ("pods", "gpus", "cell_type", "cpus", "memory_gb")
                    if k in payload}, "")]


def _env(env: Any) -> dict:
    if not isinstance(env, dict) or len(env) > MAX_ENV:
        raise RequestError("env", f"must be an object of at most {MAX_ENV} NAME: value pairs")
    for k, v in env.items():
        if not isinstance(k, str) or not ENV_NAME.match(k):
            raise RequestError(f"env.{k}", "not a valid environment variable name")
        if k in RESERVED_ENV or k.startswith("HIVED_"):
            raise RequestError(f"env.{k}", "set by hived from the job's cells; cannot be overridden")
        if not isinstance(v, str):
            raise RequestError(f"env.{k}", f"must be a string, got {type(v).__name__}")
        if len(v) > LIMITS["env"]["maxLength"]:
            raise RequestError(f"env.{k}", f"longer than {LIMITS['env']['maxLength']} characters")
    return env


def _labels(labels: Any) -> dict:
    if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise RequestError("labels", "must be an object of string: string")
    if len(labels) > LIMITS["labels"]["maxProperties"]:
        raise RequestError("labels", f"more than {LIMITS['labels']['maxProperties']} labels")
    for k, v in labels.items():
        if len(v) > LIMITS["labels"]["maxLength"]:
            raise RequestError(f"labels.{k}", f"longer than {LIMITS['labels']['maxLength']} characters")
    return labels


def _after(after: Any) -> list:
    if not isinstance(after, list) or not all(isinstance(j, str) and 0 < len(j) <= 200 for j in after):
        raise RequestError("after", f"must be a list of job ids, got {after!r}"[:300])
    if len(after) > LIMITS["after"]["maxItems"]:
        raise RequestError("after", f"more than {LIMITS['after']['maxItems']} jobs")
    return after


def parse_needs(payload: Any) -> dict | None:
    """The body's ``needs``: {"programs": [...], "writable": [...]}, paths the job's account
    must reach (checked at submission by a launcher that can, then forgotten)."""
    needs = payload.get("needs") if isinstance(payload, dict) else None
    if needs is None:
        return None
    if not isinstance(needs, dict) or set(needs) - {"programs", "writable"}:
        raise RequestError("needs", f"must be an object with programs and/or writable, got {needs!r}"[:300])
    lim = LIMITS["needs"]
    for key, items in needs.items():
        if not isinstance(items, list) or len(items) > lim["maxItems"] or \
                not all(isinstance(p, str) and 0 < len(p) <= lim["maxLength"] and "\0" not in p for p in items):
            raise RequestError(f"needs.{key}", f"must be a list of at most {lim['maxItems']} paths "
                                               f"of at most {lim['maxLength']} characters")
    return {k: list(v) for k, v in needs.items()}


def _template(t: Any) -> dict | None:
    """The job's Kubernetes template overrides: only the shape here; the launcher checks the
    fields (service.submit asks it before the job is accepted)."""
    if t is None:
        return None
    if not isinstance(t, dict):
        raise RequestError("k8s_template", f"must be an object of job template fields, got {type(t).__name__}")
    if len(json.dumps(t)) > MAX_TEMPLATE_CHARS:
        raise RequestError("k8s_template", f"larger than {MAX_TEMPLATE_CHARS} characters of JSON")
    return json.loads(json.dumps(t))     # a private copy: nothing the caller keeps can change it


def job_dict(rec: JobRecord, queue_position: int | None = None, estimated: dict | None = None) -> dict:
    """The REST job dict (docs/architecture.md, GET jobs/{id}); ``estimated``: service/estimates.py."""
    req = rec.request
    p = rec.placement
    return {
        "id": rec.job_id, "name": req.name, "user": req.user, "vc": req.vc,
        "job_class": req.job_class.value, "state": rec.state.value,
        "command": req.command, "gpus": rec.gpus, "pods": len(rec.pod_gpus) or req.total_pods,
        "affinity": req.affinity.value, "grace_period": req.grace_period,
        "workdir": req.workdir, "chain": req.chain, "k8s_template": req.k8s_template,
        "labels": dict(req.labels),
        "placement": None if p is None else {
            "chain": p.chain, "opportunistic": p.opportunistic,
            "pods": [{"rank": q.rank, "node": q.node, "gpus": list(q.gpus)} for q in p.pods]},
        "submitted": rec.submitted, "started": rec.started, "ended": rec.ended,
        "exit_code": rec.exit_code, "failure_class": rec.failure_class,
        "last_error": rec.last_error or None,
        "preemptions": rec.preemptions, "attempts": rec.attempts,
        "queue_position": queue_position if rec.state is JobState.QUEUED else None,
        "reason": rec.reason or (rec.history[-1][2] if rec.history else ""),
        "wait_reason": rec.wait_reason,
        "kill_at": rec.grace_deadline if rec.state is JobState.PREEMPTING else None,
        "time_limit": req.time_limit, "after": list(req.after), "held_by": rec.held_by or None,
        "last_placement": None if rec.last_placement is None else {
            "chain": rec.last_placement.chain, "opportunistic": rec.last_placement.opportunistic,
            "pods": [{"rank": q.rank, "node": q.node, "gpus": list(q.gpus)} for q in rec.last_placement.pods]},
        "progress": list(rec.progress) if rec.progress else None,
        "estimate": req.estimate, "estimated": estimated,
        "history": [{"time": t, "state": s, "reason": r} for t, s, r in rec.history],
    }
