"""The cluster spec: cell types, physical cells and virtual clusters (VCs).

The YAML follows hivedscheduler's shape (``physicalCluster.cellTypes``,
``physicalCluster.physicalCells``, ``virtualClusters``) with extensions:
per-VC ``users``/``admins``/``groups``/``adminGroups``/``weight``/
``maxPreemptions``/``account``/``kernelIdleTimeout``, and cluster ``admins``, ``adminGroups`` and
``accounts`` (groups are JupyterHub groups, see docs/jupyterhub.md). See docs/spec.md for the format.

Loading happens in three passes. A walk over the plain YAML values refuses
what JSON Schema cannot see (non-text keys, NaN, 2.0 for an integer, deep
nesting); a JSON schema (spec_schema.json) checks the shape; then the
semantic checks below check what a schema cannot say: cycles, chain depth,
one node level per chain, uniform children, unique addresses and pinned ids,
cell types that belong to their chain, and feasibility of the VC assignment
(eq. (1)/(2) of the HiveD paper at time 0). Every refusal is a ``SpecError``
naming the YAML path and the problem.
"""
from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import yaml

if TYPE_CHECKING:   # fastjsonschema is imported on first use (see _validator)
    from fastjsonschema import JsonSchemaValueException

MAX_GPUS = 2_000_000  # guard against a typo building a billion cells
MAX_LEVELS = 32       # cell types in one chain, GPU included; real hierarchies have fewer than 10
MAX_NESTING = 2 * MAX_LEVELS + 8  # mappings and lists inside each other (cellChildren nest two per level)
DEFAULT_CPUS_PER_GPU = 8
# Grace bounds per VC (seconds; docs/spec.md, docs/engine.md). opportunisticGrace: the most a job running
# on the VC's lent cells keeps them once the VC wants them back (Kubernetes' default termination grace).
# maxGrace: the most a BE job keeps its cells once a TE job of its VC preempts it: the longest grace
# period of FitGpp's measured workload (20 min, core/sim/fitgpp_workload.py), so its replays hold.
DEFAULT_OPPORTUNISTIC_GRACE = 30.0
DEFAULT_MAX_GRACE = 1200.0
DEFAULT_MEMORY_GB_PER_GPU = 64

_SCHEMA_PATH = Path(__file__).with_name("spec_schema.json")
# (compiled schema, integer field names), built on first use
_VALIDATOR: tuple[Callable[[Any], Any], frozenset[str]] | None = None


def _validator() -> tuple[Callable[[Any], Any], frozenset[str]]:
    """The schema compiled to Python by fastjsonschema, once per process.

    jsonschema itself is not used here: importing it compiles grammars for
    its format checkers (about a second), which every CLI command would pay.
    """
    global _VALIDATOR
    if _VALIDATOR is None:
        import fastjsonschema

        schema = json.loads(_SCHEMA_PATH.read_text())
        _VALIDATOR = (fastjsonschema.compile(schema), frozenset(_integer_fields(schema)))
    return _VALIDATOR


def _integer_fields(schema: Any) -> set[str]:
    """Property names the schema types as integers (JSON Schema also accepts 2.0 there; we do not)."""
    out: set[str] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for name, sub in node.get("properties", {}).items():
                if isinstance(sub, dict) and str(sub.get("$ref", "")).startswith("#/$defs/"):
                    sub = schema["$defs"][sub["$ref"][len("#/$defs/"):]]
                t = sub.get("type") if isinstance(sub, dict) else None
                t = t if isinstance(t, list) else [t]
                if "integer" in t and "number" not in t:
                    out.add(name)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return out


class SpecError(ValueError):
    """A refused spec: ``path`` is the YAML path, ``problem`` what is wrong."""

    def __init__(self, path: str, problem: str):
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")

    def __str__(self) -> str:
        return f"{self.path}: {self.problem}"


@dataclass
class CellSpec:
    """One physical cell as written (or filled in) in the spec."""

    cell_type: str
    level: int                 # 1-based; 1 = GPU
    address: str               # local address (index when left out)
    path: str                  # YAML path, for error messages
    pinned_id: str | None = None
    children: list[CellSpec] = field(default_factory=list)
    gpu_index: int | None = None  # leaves: index of the GPU within its node


@dataclass
class Chain:
    """One homogeneous pool: a cell hierarchy and its physical top-level cells."""

    name: str
    levels: list[str]              # cell type per level, levels[0] = leaf (GPU) type
    node_level: int                # 1-based
    gpus_per_level: list[int]      # index 0 -> level 1 -> 1 GPU
    children_per_level: list[int]  # h_k: level-(k-1) children of a level-k cell (index 0 -> 0)
    node_cpus: float
    node_memory_gb: float
    cells: list[CellSpec] = field(default_factory=list)  # top-level physical cells

    @property
    def top_level(self) -> int:
        return len(self.levels)

    @property
    def gpus(self) -> int:
        return self.gpus_per_level[-1] * len(self.cells)

    @property
    def node_gpus(self) -> int:
        return self.gpus_per_level[self.node_level - 1]

    def level_of(self, cell_type: str) -> int:
        name = cell_type
        if name.startswith(self.name + "."):
            name = name[len(self.name) + 1:]
        if name not in self.levels:
            raise KeyError(f"cell type {cell_type!r} is not in chain {self.name!r} (levels: {', '.join(self.levels)})")
        return self.levels.index(name) + 1

    def level_for_gpus(self, gpus: int) -> int | None:
        """Smallest level whose cells hold ``gpus`` GPUs (None: more than a top cell)."""
        for i, n in enumerate(self.gpus_per_level):
            if n >= gpus:
                return i + 1
        return None


@dataclass(frozen=True)
class Admission:
    """What a VC's members may ask of the service (the spec's per-VC ``admission`` block); the
    service enforces it at submission (service/admission.py). Rates are submissions per second,
    in bursts of 10 seconds' worth; bytes count each job's command, env and name as stored."""
    max_queued: int = 2_000                     # queued jobs of the VC
    max_queued_per_user: int = 1_000            # queued jobs of one user in the VC
    submits_per_second: float = 20.0            # the VC's members together
    submits_per_second_per_user: float = 5.0    # one user
    max_journal_bytes: int = 256 << 20          # command, env and name of the VC's stored jobs
    max_journal_bytes_per_user: int = 64 << 20  # ... of one user's jobs in the VC

    KEYS: ClassVar[dict[str, str]] = {"maxQueued": "max_queued", "maxQueuedPerUser": "max_queued_per_user",
            "submitsPerSecond": "submits_per_second", "submitsPerSecondPerUser": "submits_per_second_per_user",
            "maxJournalBytes": "max_journal_bytes", "maxJournalBytesPerUser": "max_journal_bytes_per_user"}


@dataclass
class VCSpec:
    name: str
    cells: dict[tuple[str, int], int] = field(default_factory=dict)  # (chain, level) -> cellNumber
    pinned: list[str] = field(default_factory=list)
    users: list[str] = field(default_factory=list)
    admins: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)        # JupyterHub groups whose members are users
    admin_groups: list[str] = field(default_factory=list)  # JupyterHub groups whose members are admins
    weight: float = 0.0          # default: the VC's GPU count
    weight_given: bool = False
    max_preemptions: int | None = None  # times one job may be preempted; None: the service default
    opportunistic_grace: float = DEFAULT_OPPORTUNISTIC_GRACE  # most grace a borrower of its cells gets
    max_grace: float = DEFAULT_MAX_GRACE                      # most grace a BE job preempted for a TE job gets
    account: str | None = None          # Unix account its jobs run as in local mode (a name, uid or uid:gid)
    # seconds a Jupyter kernel job of this VC may run no cell before hived releases it; None: never
    kernel_idle_timeout: float | None = None
    admission: Admission = field(default_factory=Admission)   # submission limits (service/admission.py)
    queue_policy: str | None = None     # queuePolicy: how its queue is ordered (fifo|allox); None: the engine's


@dataclass
class ClusterSpec:
    chains: dict[str, Chain]
    vcs: dict[str, VCSpec]
    admins: list[str]
    pinned: dict[str, tuple[str, int]]  # pinnedCellId -> (chain, level)
    source: str = "<spec>"
    raw: dict[str, Any] = field(default_factory=dict)
    accounts: dict[str, str] = field(default_factory=dict)  # hived user -> Unix account (local mode)
    admin_groups: list[str] = field(default_factory=list)  # JupyterHub groups of cluster admins

    def unix_account(self, user: str, vc: str) -> str | None:
        """The Unix account a job of ``user`` in ``vc`` runs as: the user's mapping, else the VC's, else None."""
        if user in self.accounts:
            return self.accounts[user]
        spec = self.vcs.get(vc)
        return spec.account if spec is not None else None

    def level_of(self, chain: str, cell_type_name: str) -> int:
        if chain not in self.chains:
            raise KeyError(f"unknown chain {chain!r}")
        return self.chains[chain].level_of(cell_type_name)

    def vc_gpus(self, vc: str) -> int:
        spec = self.vcs[vc]
        total = sum(n * self.chains[c].gpus_per_level[k - 1] for (c, k), n in spec.cells.items())
        for pid in spec.pinned:
            c, k = self.pinned[pid]
            total += self.chains[c].gpus_per_level[k - 1]
        return total

    @property
    def total_gpus(self) -> int:
        return sum(c.gpus for c in self.chains.values())


# ---------------------------------------------------------------- loading

class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (PyYAML keeps the last silently)."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise SpecError("(yaml)", f"line {key_node.start_mark.line + 1}: duplicate key {key!r}")
        seen[key] = True
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)

# YAML 1.1 reads 1000:50 as the base-60 integer 60050; a "uid:gid" account must stay text (YAML 1.2 agrees)
_INT = "tag:yaml.org,2002:int"
_UniqueKeyLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in rules if tag != _INT]
    for first, rules in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_UniqueKeyLoader.add_implicit_resolver(
    _INT, re.compile(r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$"),
    list("-+0123456789"))


def _read(source: str | os.PathLike[str] | dict[str, Any]) -> tuple[Any, str]:
    if isinstance(source, dict):
        return source, "<dict>"
    looks_like_path = isinstance(source, str) and "\n" not in source and (
        os.path.exists(source) or source.endswith((".yaml", ".yml", ".json")))
    if isinstance(source, os.PathLike) or looks_like_path:
        p = Path(source)
        if not p.is_file():
            raise SpecError(str(p), "file not found")
        try:
            text, name = p.read_text(encoding="utf-8"), str(p)
        except (OSError, UnicodeDecodeError) as exc:
            raise SpecError(str(p), f"cannot read the file: {exc}") from None
    elif isinstance(source, str):
        text, name = source, "<text>"
    else:
        raise SpecError("(spec)", f"expected a file path, YAML text or a dict, got {type(source).__name__}")
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader), name
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise SpecError("(yaml)", f"{where}{exc.problem}") from None
    except yaml.YAMLError as exc:  # pragma: no cover - other YAML errors
        raise SpecError("(yaml)", str(exc)) from None
    except RecursionError:
        raise SpecError("(yaml)", f"nested too deeply (a spec nests at most {MAX_NESTING} levels)") from None


def _fmt_path(parts: Iterable[str | int]) -> str:
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += ("." if out else "") + str(p)
    return out or "(root)"


_TYPE_WORDS = {"object": "a mapping", "array": "a list", "string": "a string", "integer": "an integer",
               "number": "a number", "boolean": "true or false"}
_PATTERN_WORDS = {
    "^[A-Za-z0-9][A-Za-z0-9_.@-]*$": "is not a valid name (letters, digits and _ . @ -, starting with a letter "
                                     "or digit)",
    "^([A-Za-z_][A-Za-z0-9_.-]*|[0-9]+(:[0-9]+)?)$": "is not a Unix account (a user name, a uid or uid:gid)",
}


def _plain_problem(doc: Any, integer_fields: frozenset[str]) -> tuple[str, str] | None:
    """What a JSON schema cannot see in YAML: keys that are not text, NaN and infinities,
    2.0 where an integer belongs, and nesting deep enough to exhaust the stack later."""
    stack: list[tuple[Any, list[str | int], int, str | None]] = [(doc, [], 0, None)]
    while stack:
        node, path, depth, key = stack.pop()
        if depth > MAX_NESTING:
            return _fmt_path(path), f"nested more than {MAX_NESTING} levels deep"
        if isinstance(node, dict):
            for k in node:
                if not isinstance(k, str):
                    hint = f" (write '{k}')" if isinstance(k, (int, float)) and not isinstance(k, bool) else ""
                    return _fmt_path(path), f"key {k!r} must be text{hint}"
            stack.extend((v, path + [k], depth + 1, k) for k, v in reversed(list(node.items())))
        elif isinstance(node, list):
            stack.extend((v, path + [i], depth + 1, None) for i, v in reversed(list(enumerate(node))))
        elif isinstance(node, float):
            if not math.isfinite(node):
                return _fmt_path(path), f"must be a finite number, got {node!r}"
            if key in integer_fields:
                return _fmt_path(path), f"must be an integer, got {node!r}"
    return None


def _schema_problem(err: JsonSchemaValueException) -> tuple[str, str]:
    """A fastjsonschema refusal as (YAML path, problem)."""
    full = err.name or "data"   # fastjsonschema names the failing field "data.a.b"
    name = full[len("data"):] if full.startswith("data") else full
    path = name.lstrip(".") or "(root)"
    rule, inst, definition = err.rule, err.value, err.definition or {}
    if rule == "required":
        missing = [k for k in definition.get("required", []) if not isinstance(inst, dict) or k not in inst]
        return path, f"missing required field {missing[0]!r}"
    if rule == "additionalProperties":
        allowed = set(definition.get("properties", {}))
        extra = sorted(str(k) for k in inst if k not in allowed)
        hint = f" (allowed: {', '.join(sorted(allowed))})" if allowed else ""
        return path, f"unknown field {extra[0]!r}{hint}"
    if rule == "propertyNames":
        names = definition["propertyNames"]
        rx, longest = re.compile(names.get("pattern", "")), names.get("maxLength", math.inf)
        bad = next(k for k in inst if not rx.search(k) or len(k) > longest)
        if len(bad) > longest:
            return path, f"name {bad[:20]!r}... is longer than {longest} characters"
        return path, f"{bad!r} {_PATTERN_WORDS.get(names.get('pattern', ''), 'is not a valid name')}"
    if rule == "type":
        want = definition["type"]
        words = " or ".join(_TYPE_WORDS[w] for w in (want if isinstance(want, list) else [want]))
        return path, f"must be {words}, got {inst!r}"
    if rule == "minimum":
        limit = definition["minimum"]
        if definition.get("type") == "number":
            return path, f"must be a number >= {limit:g}, got {inst!r}"
        return path, ("must be a positive integer" if limit == 1 else f"must be an integer >= {limit}") + \
            f", got {inst!r}"
    if rule == "maximum":
        return path, f"must be at most {definition['maximum']:g}, got {inst!r}"
    if rule == "exclusiveMinimum":
        return path, f"must be positive, got {inst!r}"
    if rule in ("minItems", "minProperties", "minLength"):
        return path, "must not be empty"
    if rule == "maxLength":
        return path, f"must be at most {definition['maxLength']} characters long, got {len(inst)}"
    if rule == "pattern":
        return path, f"{inst!r} {_PATTERN_WORDS.get(definition.get('pattern', ''), 'does not have the expected form')}"
    return path, err.message  # pragma: no cover - schema has no other keywords


def load_spec(source: str | os.PathLike[str] | dict[str, Any]) -> ClusterSpec:
    """Load and check a spec from a file path, YAML text or a dict."""
    doc, name = _read(source)
    if not isinstance(doc, dict):
        raise SpecError("(root)",
                        f"must be a mapping with physicalCluster and virtualClusters, got {type(doc).__name__}")
    validate, integer_fields = _validator()
    problem = _plain_problem(doc, integer_fields)
    if problem:
        raise SpecError(*problem)
    import fastjsonschema

    try:
        validate(doc)
    except fastjsonschema.JsonSchemaValueException as err:
        raise SpecError(*_schema_problem(err)) from None
    return _Builder(doc, name).build()


# ---------------------------------------------------------------- semantic checks

class _Builder:
    def __init__(self, doc: dict[str, Any], name: str):
        self.doc = doc
        self.name = name
        self.types: dict[str, Any] = doc["physicalCluster"]["cellTypes"]
        self.used_ids: dict[str, str] = {}       # node-and-above address -> path
        self.pinned: dict[str, tuple[str, int, str]] = {}
        self.counters: dict[str, int] = {}

    def build(self) -> ClusterSpec:
        chains = self._chains()
        for i, top in enumerate(self.doc["physicalCluster"]["physicalCells"]):
            chain = chains[top["cellType"]]
            path = f"physicalCluster.physicalCells[{i}]"
            chain.cells.append(self._cell(chain, chain.top_level, top, path, None, len(chain.cells), []))
        total = sum(c.gpus for c in chains.values())
        if total > MAX_GPUS:
            raise SpecError("physicalCluster.physicalCells", f"{total} GPUs is more than the {MAX_GPUS} supported")
        vcs = self._vcs(chains)
        admins = list(self.doc.get("admins", []))
        spec = ClusterSpec(chains=chains, vcs=vcs, admins=admins,
                           pinned={k: (v[0], v[1]) for k, v in self.pinned.items()},
                           source=self.name, raw=self.doc,
                           accounts={u: str(a) for u, a in self.doc.get("accounts", {}).items()},
                           admin_groups=list(self.doc.get("adminGroups", [])))
        for vc in vcs.values():
            if not vc.weight_given:
                vc.weight = float(spec.vc_gpus(vc.name))
        self._feasible(spec)
        return spec

    # -- cell types and chains
    def _walk_types(self, top: str, path: str) -> list[str]:
        """Cell types from ``top`` down to the leaf; refuses unknown tops, cycles and overlong chains."""
        if top not in self.types:
            raise SpecError(path, f"unknown cell type {top!r} (defined: {', '.join(sorted(self.types))})")
        seen = [top]
        at = {top: 0}
        t = top
        while t in self.types:
            child = self.types[t]["childCellType"]
            if child in at:
                cycle = " -> ".join(seen[at[child]:] + [child])
                raise SpecError(f"physicalCluster.cellTypes.{t}.childCellType", f"cell type cycle: {cycle}")
            if len(seen) >= MAX_LEVELS:
                raise SpecError(f"physicalCluster.cellTypes.{t}.childCellType",
                                f"chain {top} has more than {MAX_LEVELS} levels (the most a chain may have)")
            at[child] = len(seen)
            seen.append(child)
            t = child
        return seen

    def _chains(self) -> dict[str, Chain]:
        chains: dict[str, Chain] = {}
        cells = self.doc["physicalCluster"]["physicalCells"]
        for i, top in enumerate(cells):
            tname = top["cellType"]
            if tname in chains:
                continue
            path = f"physicalCluster.physicalCells[{i}].cellType"
            down = self._walk_types(tname, path)
            levels = list(reversed(down))
            nodes = [t for t in levels if self.types.get(t, {}).get("isNodeLevel")]
            if not nodes:
                raise SpecError(f"physicalCluster.cellTypes.{tname}",
                                f"chain {tname} has no node level (mark one of its cell types isNodeLevel: true)")
            if len(nodes) > 1:
                raise SpecError(f"physicalCluster.cellTypes.{nodes[1]}.isNodeLevel",
                                f"chain {tname} has {len(nodes)} node levels ({', '.join(nodes)}); "
                                "exactly one is allowed")
            gpl, hpl = [1], [0]
            for t in levels[1:]:
                h = self.types[t]["childCellNumber"]
                hpl.append(h)
                gpl.append(gpl[-1] * h)
                if gpl[-1] > MAX_GPUS:
                    raise SpecError(f"physicalCluster.cellTypes.{t}.childCellNumber",
                                    f"one {t} cell would hold {gpl[-1]} GPUs, more than the {MAX_GPUS} supported")
            node_level = levels.index(nodes[0]) + 1
            nt = self.types[nodes[0]]
            ngpu = gpl[node_level - 1]
            chains[tname] = Chain(name=tname, levels=levels, node_level=node_level, gpus_per_level=gpl,
                                  children_per_level=hpl,
                                  node_cpus=float(nt.get("cpus", DEFAULT_CPUS_PER_GPU * ngpu)),
                                  node_memory_gb=float(nt.get("memoryGB", DEFAULT_MEMORY_GB_PER_GPU * ngpu)))
        # a chain's top type may not sit inside another chain in use
        for i, top in enumerate(cells):
            for other in chains.values():
                if other.name != top["cellType"] and top["cellType"] in other.levels:
                    raise SpecError(f"physicalCluster.physicalCells[{i}].cellType",
                                    f"cell type {top['cellType']} is inside chain {other.name}; "
                                    f"list whole {other.name} cells (or only {top['cellType']} cells)")
        return chains

    # -- physical cells
    def _fill(self, ctype: str) -> str:
        n = self.counters.get(ctype, 0)
        self.counters[ctype] = n + 1
        return f"{ctype.lower()}-{n}"

    def _cell(self, chain: Chain, level: int, raw: dict[str, Any], path: str, node: str | None,
              index: int, leaf_counter: list[Any], pinned_above: tuple[str, str] | None = None) -> CellSpec:
        ctype = chain.levels[level - 1]
        given = raw.get("cellAddress")
        if given is not None and level > 1:
            _check_address(given, level >= chain.node_level, f"{path}.cellAddress")
        if level >= chain.node_level:
            if level == chain.node_level:
                addr = str(given) if given is not None else self._fill("node")
            else:
                addr = str(given) if given is not None else self._fill(ctype)
            if addr in self.used_ids:
                raise SpecError(f"{path}.cellAddress" if given is not None else path,
                                f"duplicate cell address {addr!r} (also at {self.used_ids[addr]})")
            self.used_ids[addr] = path
            if level == chain.node_level:
                node, leaf_counter = addr, [0, set()]
        else:
            addr = str(given) if given is not None else str(index)
        cell = CellSpec(cell_type=ctype, level=level, address=addr, path=path, pinned_id=raw.get("pinnedCellId"))
        if cell.pinned_id is not None:
            if cell.pinned_id in self.pinned:
                raise SpecError(f"{path}.pinnedCellId",
                                f"duplicate pinnedCellId {cell.pinned_id!r} (also at {self.pinned[cell.pinned_id][2]})")
            if pinned_above is not None:
                raise SpecError(f"{path}.pinnedCellId",
                                f"pinned cell {cell.pinned_id!r} lies inside pinned cell {pinned_above[0]!r} "
                                f"(at {pinned_above[1]}); pinned cells may not nest")
            self.pinned[cell.pinned_id] = (chain.name, level, path)
            pinned_above = (cell.pinned_id, path)
        kids = raw.get("cellChildren")
        if level == 1:
            if kids:
                raise SpecError(f"{path}.cellChildren", f"{ctype} cells are GPUs (level 1) and have no children")
            if given is not None:
                if isinstance(given, bool) or not isinstance(given, int) or given < 0:
                    raise SpecError(f"{path}.cellAddress",
                                    "a GPU's cellAddress is its index on the node (a non-negative integer), "
                                    f"got {given!r}")
                gidx = given
            else:
                gidx = leaf_counter[0]
            if gidx in leaf_counter[1]:
                raise SpecError(f"{path}.cellAddress" if given is not None else path,
                                f"duplicate GPU index {gidx} on node {node}")
            leaf_counter[1].add(gidx)
            leaf_counter[0] += 1
            cell.gpu_index = gidx
            return cell
        h = chain.children_per_level[level - 1]
        if kids is not None and len(kids) != h:
            raise SpecError(f"{path}.cellChildren",
                            f"has {len(kids)} {'child' if len(kids) == 1 else 'children'} but cell type {ctype} "
                            f"has childCellNumber {h}")
        seen: dict[str, int] = {}
        for j in range(h):
            child_raw = kids[j] if kids is not None else {}
            cpath = f"{path}.cellChildren[{j}]"
            child = self._cell(chain, level - 1, child_raw, cpath, node, j, leaf_counter, pinned_above)
            if level - 1 < chain.node_level and level - 1 > 1:
                if child.address in seen:
                    raise SpecError(f"{cpath}.cellAddress",
                                    f"duplicate cell address {child.address!r} among the children of {path}")
                seen[child.address] = j
            cell.children.append(child)
        return cell

    # -- virtual clusters
    def _vcs(self, chains: dict[str, Chain]) -> dict[str, VCSpec]:
        vcs: dict[str, VCSpec] = {}
        claimed: dict[str, str] = {}
        for name, raw in self.doc["virtualClusters"].items():
            base = f"virtualClusters.{name}"
            vc = VCSpec(name=name, users=list(raw.get("users", [])), admins=list(raw.get("admins", [])),
                        groups=list(raw.get("groups", [])), admin_groups=list(raw.get("adminGroups", [])))
            if "weight" in raw:
                vc.weight, vc.weight_given = float(raw["weight"]), True
            vc.max_preemptions = raw.get("maxPreemptions")
            vc.opportunistic_grace = float(raw.get("opportunisticGrace", DEFAULT_OPPORTUNISTIC_GRACE))
            vc.max_grace = float(raw.get("maxGrace", DEFAULT_MAX_GRACE))
            if "account" in raw:
                vc.account = str(raw["account"])
            if "kernelIdleTimeout" in raw:
                vc.kernel_idle_timeout = float(raw["kernelIdleTimeout"])
            if "admission" in raw:
                vc.admission = Admission(**{Admission.KEYS[k]: v for k, v in raw["admission"].items()})
            vc.queue_policy = _queue_policy(raw, base)
            for i, vcell in enumerate(raw.get("virtualCells", [])):
                path = f"{base}.virtualCells[{i}].cellType"
                chain, level = _resolve_type(chains, vcell["cellType"], path)
                key = (chain, level)
                vc.cells[key] = vc.cells.get(key, 0) + vcell["cellNumber"]
            for i, p in enumerate(raw.get("pinnedCells", [])):
                pid = p["pinnedCellId"]
                path = f"{base}.pinnedCells[{i}].pinnedCellId"
                if pid not in self.pinned:
                    known = ", ".join(sorted(self.pinned)) or "none"
                    raise SpecError(path, f"unknown pinnedCellId {pid!r} (physical pinned cells: {known})")
                if pid in claimed:
                    raise SpecError(path, f"pinned cell {pid!r} is already assigned to VC {claimed[pid]}")
                claimed[pid] = name
                vc.pinned.append(pid)
            if not vc.cells and not vc.pinned:
                raise SpecError(base, "VC has no cells (give virtualCells or pinnedCells)")
            vcs[name] = vc
        for pid, (_, _, path) in self.pinned.items():
            if pid not in claimed:
                raise SpecError(f"{path}.pinnedCellId", f"pinned cell {pid!r} is not assigned to any VC")
        return vcs

    # -- feasibility, eq. (1)/(2) at time 0
    def _feasible(self, spec: ClusterSpec) -> None:
        for chain in spec.chains.values():
            free = initial_free_counts(chain)
            reserved = [0] * (chain.top_level + 1)
            by_vc: dict[int, dict[str, int]] = {}
            for vc in spec.vcs.values():
                for (c, k), n in vc.cells.items():
                    if c == chain.name:
                        reserved[k] += n
                        by_vc.setdefault(k, {})[vc.name] = n
            hit = first_violation(chain, free, reserved, [0] * (chain.top_level + 1))
            if hit:
                k, need, supply = hit
                who = ", ".join(f"{v}: {n}" for v, n in sorted(by_vc[k].items()))
                tname = chain.levels[k - 1]
                raise SpecError("virtualClusters",
                                f"infeasible VC assignment: chain {chain.name} level {k} ({tname}): VCs reserve "
                                f"{need} {tname} cell{'s' if need != 1 else ''} ({who}), the chain can supply "
                                f"{supply} once higher-level reservations and pinned cells are counted")


_NODE_ADDRESS = re.compile(r"[^/\s]+")      # node and higher: any text without "/" or blanks (host names)
_SUB_ADDRESS = re.compile(r"[A-Za-z0-9_@-]+")  # below the node: it becomes part of "<node>/<a>.<b>"
_GPU_ID = re.compile(r"gpu[0-9]+")             # "<node>/gpuN" names GPU N


def _check_address(given: Any, node_or_above: bool, path: str) -> None:
    """Addresses become cell ids (see cells.py); refuse those that could make two cells share one."""
    text = str(given)
    if node_or_above:
        if not _NODE_ADDRESS.fullmatch(text):
            raise SpecError(path, f"{text!r} is not a valid node or rack address (no '/' or blanks, not empty)")
        return
    if not _SUB_ADDRESS.fullmatch(text):
        raise SpecError(path, f"{text!r} is not a valid address below a node (letters, digits and _ @ -; "
                              f"no '.' or '/', which separate the parts of a cell id)")
    if _GPU_ID.fullmatch(text):
        raise SpecError(path, f"{text!r} is reserved: the id <node>/{text} names a GPU")


def _resolve_type(chains: dict[str, Chain], text: str, path: str) -> tuple[str, int]:
    """``CHAIN.TYPE`` (or a bare ``TYPE`` found in exactly one chain) -> (chain, level)."""
    for cname in sorted(chains, key=len, reverse=True):
        if text.startswith(cname + "."):
            tname = text[len(cname) + 1:]
            chain = chains[cname]
            if tname not in chain.levels:
                raise SpecError(path, f"cell type {tname!r} is not in chain {cname} "
                                      f"(levels: {', '.join(chain.levels)})")
            return cname, chain.levels.index(tname) + 1
    owners = [c for c in chains.values() if text in c.levels]
    if len(owners) == 1:
        return owners[0].name, owners[0].levels.index(text) + 1
    if len(owners) > 1:
        raise SpecError(path, f"cell type {text!r} is in several chains ({', '.join(c.name for c in owners)}); "
                              f"write it as CHAIN.TYPE")
    head = text.split(".", 1)[0]
    raise SpecError(path, f"unknown cell type {text!r}: write CHAIN.TYPE with a chain among "
                          f"{', '.join(sorted(chains))}" + (f" (no chain {head!r})" if "." in text else ""))


def initial_free_counts(chain: Chain) -> list[int]:
    """f_k at time 0: the highest cells holding no pinned cell, per level (index = level)."""
    free = [0] * (chain.top_level + 1)

    def walk(cell: CellSpec) -> bool:  # returns True if the subtree holds a pinned cell
        if cell.pinned_id is not None:
            return True
        flags = [walk(ch) for ch in cell.children]
        if any(flags):
            for ch, f in zip(cell.children, flags):
                if not f:
                    free[ch.level] += 1
            return True
        return False

    for top in chain.cells:
        if not walk(top):
            free[chain.top_level] += 1
    return free


def first_violation(chain: Chain, free: list[int], reserved: list[int],
                    allocated: list[int]) -> tuple[int, int, int] | None:
    """Eq. (2), r_k - a_k <= f_k + F_k, from the top level down: (level, need, supply) of the first break."""
    F = 0
    for k in range(chain.top_level, 0, -1):
        need = reserved[k] - allocated[k]
        supply = free[k] + F
        if need > supply:
            return k, need, supply
        if k > 1:
            F = (supply - need) * chain.children_per_level[k - 1]
    return None


def invariant_violation(chain: Chain, free: list[int], reserved: list[int], allocated: list[int]) -> str | None:
    """Check r_k - a_k <= f_k + F_k (eq. (2)) from the top level down; describe the first break."""
    hit = first_violation(chain, free, reserved, allocated)
    if hit is None:
        return None
    k, need, supply = hit
    return (f"chain {chain.name} level {k} ({chain.levels[k - 1]}): VCs reserve {need} more cells, "
            f"the chain can supply {supply} once higher-level reservations are counted")


def _queue_policy(raw: dict[str, Any], base: str) -> str | None:
    """A VC's ``queuePolicy``: a name of the engine's queue policies (docs/spec.md)."""
    if "queuePolicy" not in raw:
        return None
    # the names live with the policies, which read built specs: imported here, where a spec is
    # checked, so that the spec (which every core module reads) imports no policy module
    from .policies.registry import QUEUE_POLICIES
    name = raw["queuePolicy"]
    if name not in QUEUE_POLICIES:
        known = ", ".join(sorted(QUEUE_POLICIES))
        raise SpecError(f"{base}.queuePolicy", f"unknown queue policy {name!r}; known: {known}")
    return str(name)
