"""Checking a JobRequest before it is queued, and resolving what it asks.

``check(req, spec, alloc)`` raises ``RequestError(field, problem)`` for the
first thing wrong, naming the field and the limit, and otherwise returns a
``Resolved``: GPUs and (CPUs, RAM) per pod with the node-share defaults
filled in, the chain(s) it may use and the gang's wanted affinity level. It
changes nothing, so ``Engine.validate`` and ``Engine.submit`` share it.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .jobs import Affinity, JobClass, JobRequest, PodGroup

if TYPE_CHECKING:   # the spec module is slow to import; only its types are read here
    from typing import TypeAlias

    from .allocator import Allocator
    from .quota import QuotaAllocator
    from .spec import Chain, ClusterSpec

    # what the engine schedules on: HiveD's cell allocator or the quota baseline
    EngineAllocator: TypeAlias = Allocator | QuotaAllocator


class RequestError(ValueError):
    """A request the engine refuses; ``str(e) == f"{field}: {problem}"``."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


@dataclass
class Resolved:
    pod_gpus: list[int]       # GPUs per pod
    pod_demands: list[tuple[float, float, float]]  # (cpus, memory_gb, gpus) per pod
    chain: str | None      # the request's chain, or the only chain there is
    want_level: int | None  # 1-based level that must hold the whole gang (None: no gang constraint)
    default_share: bool       # every pod uses the node-share CPU/RAM default


# C0 controls and DEL; tab, newline and carriage return are ordinary in a shell script
_CONTROL = {chr(c) for c in range(32)} | {"\x7f"}
_SCRIPT_OK = {"\t", "\n", "\r"}
# one regular-expression search per value (C speed: a 190 KB env value is checked in well under
# a millisecond, under the service's lock), per set of allowed control characters
_BAD: dict[frozenset[str], re.Pattern[str]] = {}


def _bad_pattern(allow: set[str]) -> re.Pattern[str]:
    key = frozenset(allow)
    pattern = _BAD.get(key)
    if pattern is None:
        chars = "".join(re.escape(ch) for ch in sorted(_CONTROL - allow))
        pattern = _BAD[key] = re.compile(f"[{chars}\ud800-\udfff]")
    return pattern


_BAD_BYTES: dict[frozenset[str], bytes] = {}


def _bad_bytes(allow: set[str]) -> bytes:
    key = frozenset(allow)
    found = _BAD_BYTES.get(key)
    if found is None:
        found = _BAD_BYTES[key] = "".join(sorted(_CONTROL - allow)).encode("ascii")
    return found


def _text_problem(value: str, allow: set[str]) -> str | None:
    """What makes ``value`` unusable as a command, name or env entry (its first bad character), else None."""
    if value.isascii():   # the common case: no surrogate; control bytes found by one C pass
        data = value.encode("ascii")
        if len(data.translate(None, _bad_bytes(allow))) == len(data):
            return None
    found = _bad_pattern(allow).search(value)
    if found is None:
        return None
    k, ch = found.start(), found.group()
    if ch == "\x00":
        return f"contains a NUL character at position {k}"
    if ch in _CONTROL:
        return f"contains the control character {ch!r} at position {k}"
    return f"contains a lone surrogate {ch!r} at position {k} (not valid UTF-8)"


def _check_texts(req: JobRequest) -> None:
    cmd = req.command
    if isinstance(cmd, str):
        bad = _text_problem(cmd, _SCRIPT_OK)
        if bad:
            raise RequestError("command", bad)
    elif isinstance(cmd, (list, tuple)):
        for i, arg in enumerate(cmd):
            if not isinstance(arg, str):
                raise RequestError(f"command[{i}]", f"must be a string, got {type(arg).__name__}")
            bad = _text_problem(arg, _SCRIPT_OK)
            if bad:
                raise RequestError(f"command[{i}]", bad)
    else:
        raise RequestError("command", f"must be a string or a list of strings, got {type(cmd).__name__}")
    if not isinstance(req.name, str):
        raise RequestError("name", f"must be a string, got {type(req.name).__name__}")
    bad = _text_problem(req.name, set())
    if bad:
        raise RequestError("name", bad)
    if not isinstance(req.env, dict):
        raise RequestError("env", f"must be an object of strings, got {type(req.env).__name__}")
    for key, val in req.env.items():
        if not isinstance(key, str) or not key:
            raise RequestError("env", f"keys must be non-empty strings, got {key!r}")
        bad = _text_problem(key, set()) or ("contains '='" if "=" in key else None)
        if bad:
            raise RequestError(f"env key {key!r}", bad)
        if not isinstance(val, str):
            raise RequestError(f"env[{key}]", f"must be a string, got {type(val).__name__}")
        bad = _text_problem(val, _SCRIPT_OK)
        if bad:
            raise RequestError(f"env[{key}]", bad)
    wd = req.workdir
    if wd is not None:
        if not isinstance(wd, str):
            raise RequestError("workdir", f"must be a string, got {type(wd).__name__}")
        bad = _text_problem(wd, set())
        if bad:
            raise RequestError("workdir", bad)
        if not wd.startswith("/"):
            raise RequestError("workdir", f"must be an absolute path (starting with /), got {wd!r}")


def _num(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def node_gpus(chain: Chain) -> int:
    return chain.gpus_per_level[chain.node_level - 1]


def gang_level(chain: Chain, pod_gpus: list[int]) -> int | None:
    """Smallest level whose one cell holds the whole gang; None for one pod
    (the allocator already gives a pod the smallest cell holding it) or when
    no level is big enough."""
    if len(pod_gpus) <= 1:
        return None
    total = sum(pod_gpus)
    for i, g in enumerate(chain.gpus_per_level):
        if g >= total:
            return i + 1
    return None


def check(req: JobRequest, spec: ClusterSpec, alloc: EngineAllocator | None = None,
          totals: dict[str, int] | None = None) -> Resolved:
    """``totals``: GPUs per chain in the physical cluster (the engine caches it)."""
    _check_fields(req, spec)
    chain_name = req.chain if req.chain is not None else (next(iter(spec.chains)) if len(spec.chains) == 1 else None)
    pod_gpus: list[int] = []
    groups_spec: list[tuple[PodGroup, int]] = []
    for i, g in enumerate(req.groups):
        gpus, chain_name = _group_gpus(req, spec, i, g, chain_name)
        groups_spec.append((g, gpus))
        pod_gpus.extend([gpus] * g.pods)
    ref, demands, default_share = _demands(spec, chain_name, groups_spec)
    want = gang_level(ref, pod_gpus) if chain_name is not None else None
    if alloc is not None:
        _check_fits_at_all(req, alloc, spec, chain_name, pod_gpus, want, totals)
    return Resolved(pod_gpus, demands, chain_name, want, default_share)


def _check_fields(req: JobRequest, spec: ClusterSpec) -> None:
    """Everything of ``req`` but its pod groups' sizes."""
    if not isinstance(req, JobRequest):
        raise RequestError("request", f"must be a JobRequest, got {type(req).__name__}")
    if not isinstance(req.user, str) or not req.user.strip():
        raise RequestError("user", "must be a non-empty string")
    if not isinstance(req.vc, str) or req.vc not in spec.vcs:
        raise RequestError("vc", f"unknown VC {req.vc!r}; known: {', '.join(sorted(spec.vcs))}")
    _check_texts(req)
    if not isinstance(req.job_class, JobClass):
        raise RequestError("job_class", f"must be one of te, be, opportunistic; got {req.job_class!r}")
    if not isinstance(req.affinity, Affinity):
        raise RequestError("affinity", f"must be hard or soft; got {req.affinity!r}")
    if not _num(req.grace_period) or req.grace_period < 0:
        raise RequestError("grace_period", f"must be a finite number >= 0, got {req.grace_period!r}")
    if req.duration is not None and (not _num(req.duration) or req.duration < 0):
        raise RequestError("duration", f"must be a finite number >= 0, got {req.duration!r}")
    if req.estimate is not None and (not _num(req.estimate) or req.estimate < 0):
        raise RequestError("estimate", f"must be a finite number >= 0, got {req.estimate!r}")
    if req.max_retries is not None and (not isinstance(req.max_retries, int) or isinstance(req.max_retries, bool)
                                        or req.max_retries < 0):
        raise RequestError("max_retries", f"must be an int >= 0, got {req.max_retries!r}")
    if req.chain is not None and req.chain not in spec.chains:
        raise RequestError("chain", f"unknown chain {req.chain!r}; known: {', '.join(sorted(spec.chains))}")
    if not isinstance(req.groups, list) or not req.groups:
        raise RequestError("groups", "must be a non-empty list of pod groups")


def _group_gpus(req: JobRequest, spec: ClusterSpec, i: int, g: PodGroup,
                chain_name: str | None) -> tuple[int, str | None]:
    """GPUs per pod of ``req.groups[i]``, and the chain it names (else ``chain_name``)."""
    where = f"groups[{i}]"
    if not isinstance(g, PodGroup):
        raise RequestError(where, f"must be a PodGroup, got {type(g).__name__}")
    if not isinstance(g.pods, int) or isinstance(g.pods, bool) or g.pods < 1:
        raise RequestError(f"{where}.pods", f"must be an int >= 1, got {g.pods!r}")
    if g.pods > 4096:
        raise RequestError(f"{where}.pods", f"at most 4096 pods per group, got {g.pods}")
    if g.cell_type is not None:
        cname = g.cell_type.split(".", 1)[0] if "." in g.cell_type else chain_name
        if cname is None:
            raise RequestError(f"{where}.cell_type",
                               f"{g.cell_type!r} is ambiguous: name the chain (CHAIN.TYPE) or set chain")
        if req.chain is not None and cname != req.chain:
            raise RequestError(f"{where}.cell_type", f"{g.cell_type!r} is not in chain {req.chain!r}")
        if cname not in spec.chains:
            raise RequestError(f"{where}.cell_type", f"unknown chain in {g.cell_type!r}")
        try:
            level = spec.level_of(cname, g.cell_type)
        except Exception as e:  # the spec's own error names the type
            raise RequestError(f"{where}.cell_type", str(e)) from None
        gpus = spec.chains[cname].gpus_per_level[level - 1]
        chain_name = cname
    else:
        if not isinstance(g.gpus, int) or isinstance(g.gpus, bool) or g.gpus < 1:
            raise RequestError(f"{where}.gpus", f"must be an int >= 1, got {g.gpus!r}")
        gpus = g.gpus
    for name, v in (("cpus", g.cpus), ("memory_gb", g.memory_gb)):
        if v is not None and (not _num(v) or v < 0):
            raise RequestError(f"{where}.{name}", f"must be a finite number >= 0, got {v!r}")
    return gpus, chain_name


def _demands(spec: ClusterSpec, chain_name: str | None, groups_spec: list[tuple[PodGroup, int]]
             ) -> tuple[Chain, list[tuple[float, float, float]], bool]:
    """(the chain sizing a pod's default CPU/RAM share, each pod's (cpus, memory, GPUs),
    whether every pod takes the default share)."""
    chains = [spec.chains[chain_name]] if chain_name is not None else list(spec.chains.values())
    biggest = max(node_gpus(c) for c in chains)
    for i, (_, gpus) in enumerate(groups_spec):
        if gpus > biggest:
            raise RequestError(f"groups[{i}].gpus", f"{gpus} GPUs per pod, but a node has at most {biggest}")
    ref = chains[0] if chain_name is not None else max(chains, key=node_gpus)
    ng = node_gpus(ref)
    demands: list[tuple[float, float, float]] = []
    default_share = True
    for i, (g, gpus) in enumerate(groups_spec):
        share = gpus / ng
        cpus = g.cpus if g.cpus is not None else ref.node_cpus * share
        mem = g.memory_gb if g.memory_gb is not None else ref.node_memory_gb * share
        if g.cpus is not None or g.memory_gb is not None:
            default_share = False
        if cpus > ref.node_cpus + 1e-9:
            raise RequestError(f"groups[{i}].cpus", f"{cpus} CPUs per pod, but a node has {ref.node_cpus}")
        if mem > ref.node_memory_gb + 1e-9:
            raise RequestError(f"groups[{i}].memory_gb", f"{mem} GB per pod, but a node has {ref.node_memory_gb}")
        demands.extend([(float(cpus), float(mem), float(gpus))] * g.pods)
    return ref, demands, default_share


def _check_fits_at_all(req: JobRequest, alloc: EngineAllocator, spec: ClusterSpec, chain_name: str | None,
                       pod_gpus: list[int], want: int | None, totals: dict[str, int] | None) -> None:
    """A guaranteed job must fit its VC at all unless it may run opportunistically;
    any job must fit the physical cluster."""
    total = sum(pod_gpus)
    chains = [chain_name] if chain_name else list(spec.chains)
    cluster = max((totals[c] if totals else alloc_total(alloc, c)) for c in chains)
    if total > cluster:
        raise RequestError("groups", f"asks {total} GPUs, the cluster has {cluster}"
                           + (f" in chain {chain_name}" if chain_name else ""))
    if req.job_class.guaranteed and not req.allow_opportunistic:
        why = alloc.why_never(req.vc, pod_gpus, chain=chain_name,
                              within_level=want if req.affinity is Affinity.HARD else None)
        if why:
            raise RequestError("groups", f"never fits VC {req.vc!r}: {why} "
                               "(submit with --allow-opportunistic to run it at low priority)")


def alloc_total(alloc: EngineAllocator, chain: str) -> int:
    total = getattr(alloc, "total_gpus", None)
    if callable(total):
        return int(total(chain))
    nodes = alloc.node_free(chain)
    spec = alloc.spec
    return len(nodes) * node_gpus(spec.chains[chain])
