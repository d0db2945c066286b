"""Read this machine's GPUs with NVML and describe them as a cell spec.

``discover()`` asks NVML (the ``nvidia-ml-py`` package) for each GPU's model,
memory, UUID, PCI bus id, NUMA node, MIG mode, the common-ancestor topology
between every pair and the NVLink peers, and builds a spec in
hivedscheduler's shape: one chain per GPU model, with the levels the
topology shows (GPU, switch/NVLink group, socket, node).

Every NVML call may raise NotSupported (an H100 in a VM does for NVLink,
topology and NUMA): each missing answer drops the level it would have
supported, and ``Discovery.notes`` says what was assumed instead. Without a
driver or a GPU, ``NoGpuError`` says so; ``virtual_node(n)`` describes a
made-up node of ``n`` GPUs for testing (``hived discover --gpus N``).
"""
from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass, field
from typing import Any

from .discovery_topology import group_levels


class NoGpuError(RuntimeError):
    """No usable NVIDIA driver or GPU on this machine."""


@dataclass
class GpuInfo:
    index: int                       # NVML index
    model: str
    uuid: str | None = None
    pci_bus_id: str | None = None
    memory_mib: int | None = None
    numa_node: int | None = None
    mig_enabled: bool | None = None


@dataclass
class Discovery:
    host: str
    gpus: list[GpuInfo]
    spec: dict
    notes: list[str] = field(default_factory=list)       # what was assumed, and why
    gpu_ids: dict = field(default_factory=dict)          # (node, gpu position) -> UUID for CUDA_VISIBLE_DEVICES
    nodes: dict = field(default_factory=dict)            # node name -> [NVML indices] in position order
    topology: dict = field(default_factory=dict)         # (i, j) -> NVML common-ancestor level (int) or None
    nvlink: dict = field(default_factory=dict)           # i -> sorted NVML indices it has an active NVLink to

    def to_json(self) -> dict:
        return {"host": self.host, "notes": self.notes, "spec": self.spec,
                "gpus": [vars(g) for g in self.gpus],
                "nodes": self.nodes,
                "nvlink": {str(k): v for k, v in self.nvlink.items()}}


def _nvml():
    from .nvml_backend import nvml_module
    return nvml_module()


def _text(x) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def chain_name(model: str) -> str:
    """"NVIDIA H100 80GB HBM3" -> "H100-80GB-HBM3" (a valid cell type name, no dots)."""
    name = re.sub(r"^NVIDIA\s+", "", model.strip(), flags=re.IGNORECASE)
    name = re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-")
    return name or "GPU"


class _Asker:
    """Calls NVML, turning 'not supported' and friends into None plus one note."""

    def __init__(self, nvml, notes: list[str]):
        self.nvml, self.notes = nvml, notes
        self._said: set[str] = set()

    def __call__(self, what: str, fn: str, *args):
        f = getattr(self.nvml, fn, None)
        if f is None:
            self.note(what, f"{fn} missing from this nvidia-ml-py")
            return None
        try:
            return f(*args)
        except self.nvml.NVMLError as exc:
            self.note(what, f"{fn}: {exc}")
            return None

    def note(self, what: str, why: str) -> None:
        if what not in self._said:
            self._said.add(what)
            self.notes.append(f"{what} unavailable ({why})")


def read_gpus(nvml=None) -> tuple[list[GpuInfo], dict, dict, list[str], dict[int, Any]]:
    """NVML facts: GPUs, pair topology, NVLink peers, notes, handles."""
    nvml = nvml or _nvml()
    notes: list[str] = []
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise NoGpuError(f"no NVIDIA driver or GPU found (NVML: {exc}); "
                         f"use --gpus N to describe a virtual node for testing") from exc
    ask = _Asker(nvml, notes)
    try:
        count = nvml.nvmlDeviceGetCount()
    except nvml.NVMLError as exc:
        raise NoGpuError(f"NVML cannot count GPUs ({exc})") from exc
    if count == 0:
        raise NoGpuError("the NVIDIA driver reports no GPUs; use --gpus N to describe a virtual node")
    handles, gpus = {}, []
    for i in range(count):
        try:
            h = nvml.nvmlDeviceGetHandleByIndex(i)
        except nvml.NVMLError as exc:
            # a GPU the driver cannot open (fallen off the bus, in reset): not schedulable
            notes.append(f"GPU {i} left out: NVML cannot open it (nvmlDeviceGetHandleByIndex: {exc})")
            continue
        handles[i] = h
        name = ask("GPU model name", "nvmlDeviceGetName", h)
        mem = ask("GPU memory size", "nvmlDeviceGetMemoryInfo", h)
        pci = ask("PCI bus id", "nvmlDeviceGetPciInfo", h)
        mig = ask("MIG mode", "nvmlDeviceGetMigMode", h)
        numa = ask("NUMA node", "nvmlDeviceGetNumaNodeId", h)
        uuid = ask("GPU UUID", "nvmlDeviceGetUUID", h)
        gpus.append(GpuInfo(
            index=i, model=_text(name) if name is not None else "GPU",
            uuid=_text(uuid) if uuid is not None else None,
            pci_bus_id=_text(pci.busId) if pci is not None else None,
            memory_mib=int(mem.total) // (1 << 20) if mem is not None else None,
            numa_node=int(numa) if numa is not None and int(numa) >= 0 else None,
            mig_enabled=bool(mig[0]) if mig is not None else None))
    if not gpus:
        raise NoGpuError(f"NVML counts {count} GPUs but cannot open any of them; see 'nvidia-smi'")
    idx = sorted(handles)
    topo: dict = {}
    for k, i in enumerate(idx):
        for j in idx[k + 1:]:
            level = ask("GPU pair topology (common ancestor)", "nvmlDeviceGetTopologyCommonAncestor",
                        handles[i], handles[j])
            topo[(i, j)] = int(level) if level is not None else None
    by_bus = {g.pci_bus_id.lower(): g.index for g in gpus if g.pci_bus_id}
    nvlink: dict = {}
    max_links = getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)
    for i in idx:
        peers = set()
        for link in range(max_links):
            try:
                state = nvml.nvmlDeviceGetNvLinkState(handles[i], link)
            except nvml.NVMLError as exc:
                if link == 0:   # later links failing just means this GPU has fewer links
                    ask.note("NVLink state", f"nvmlDeviceGetNvLinkState: {exc}")
                break
            if state:
                remote = ask("NVLink remote PCI info", "nvmlDeviceGetNvLinkRemotePciInfo", handles[i], link)
                peer = by_bus.get(_text(remote.busId).lower()) if remote is not None else None
                if peer is not None and peer != i:
                    peers.add(peer)
        nvlink[i] = sorted(peers)
    return gpus, topo, nvlink, notes, handles


def discover(nvml=None, host: str | None = None, vcs: list[str] | None = None) -> Discovery:
    """Discover this machine's GPUs and build a spec (see the module docstring).

    A replayed NVML (``nvml_replay.NvmlReplay``) stands for the machine it
    was recorded on: its host name, CPUs and memory are used, so a replay
    gives the spec that machine got."""
    nvml = nvml or _nvml()
    gpus, topo, nvlink, notes, _ = read_gpus(nvml)
    facts = getattr(nvml, "facts", None) or {}
    host = host or facts.get("host") or socket.gethostname().split(".")[0] or "node0"
    try:
        return _build(host, gpus, topo, nvlink, notes, vcs, machine=(facts.get("cpus"), facts.get("mem_gb")))
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass


def virtual_node(n: int, host: str = "virtual0", model: str = "VIRTUAL-GPU",
                 vcs: list[str] | None = None) -> Discovery:
    """A made-up node of ``n`` GPUs: two sockets of n/2 when n is even and >= 4."""
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 1024:
        raise ValueError(f"--gpus: must be an integer from 1 to 1024, got {n!r}")
    gpus = [GpuInfo(index=i, model=model, numa_node=(0 if i < n // 2 else 1) if n >= 4 and n % 2 == 0 else 0)
            for i in range(n)]
    notes = [f"virtual node: {n} GPUs of model {model}, no NVML; sockets from the --gpus layout"]
    return _build(host, gpus, {}, {}, notes, vcs, level_notes=False)


def _build(host: str, gpus: list[GpuInfo], topo: dict, nvlink: dict, notes: list[str],
           vcs: list[str] | None, level_notes: bool = True,
           machine: tuple[int | None, int | None] = (None, None)) -> Discovery:
    models: dict[str, list[GpuInfo]] = {}
    for g in gpus:
        models.setdefault(chain_name(g.model), []).append(g)
        if g.mig_enabled:
            notes.append(f"GPU {g.index} has MIG enabled: scheduled as one whole GPU (MIG slices are not cells)")
    cell_types: dict = {}
    physical: list = []
    node_map: dict = {}
    gpu_ids: dict = {}
    cpus, mem_gb = machine[0] or os.cpu_count() or 1, machine[1] or _mem_gb()
    share = len(gpus)
    for cname, members in models.items():
        node = host if len(models) == 1 else f"{host}-{cname}"
        if len(models) > 1:
            notes.append(f"several GPU models: chain {cname} gets its own node cell {node!r}")
        idx = [g.index for g in members]
        levels, tree, lvl_notes = group_levels(idx, topo, nvlink, {g.index: g.numa_node for g in members})
        if level_notes:   # a virtual node has no topology to be missing
            notes.extend(f"{cname}: {n}" for n in lvl_notes)
        # levels: list of (suffix, children per cell) from the GPU up to the node
        child = cname            # the leaf (GPU) type is the model itself
        for suffix, number in levels:
            tname = f"{cname}-{suffix}"
            cell_types[tname] = {"childCellType": child, "childCellNumber": number}
            child = tname
        node_type = child
        cell_types[node_type]["isNodeLevel"] = True
        # CPUs and RAM of the machine, shared between chains in proportion to GPUs
        cell_types[node_type]["cpus"] = max(1, round(cpus * len(members) / share))
        cell_types[node_type]["memoryGB"] = max(1, round(mem_gb * len(members) / share))
        top: dict[str, Any] = {"cellType": node_type, "cellAddress": node}
        if _children(tree):
            top["cellChildren"] = _children(tree)
        physical.append(top)
        order = [i for i in _flatten(tree)]
        node_map[node] = order
        by_index = {g.index: g for g in members}
        for pos, i in enumerate(order):
            gpu_ids[(node, pos)] = by_index[i].uuid or str(i)
    spec = {"physicalCluster": {"cellTypes": cell_types, "physicalCells": physical},
            "virtualClusters": split_vcs(cell_types, physical, vcs or ["default"])}
    return Discovery(host, gpus, spec, notes, gpu_ids, node_map, topo, nvlink)


def _children(tree) -> list:
    """A nested list of NVML indices -> cellChildren (GPU addresses are positions, filled by index)."""
    if not isinstance(tree, list) or not tree or not isinstance(tree[0], list):
        return []   # leaves: children filled by index
    return [{"cellChildren": _children(t)} if isinstance(t, list) and t and isinstance(t[0], list) else {}
            for t in tree]


def _flatten(tree):
    if isinstance(tree, list):
        for t in tree:
            yield from _flatten(t)
    else:
        yield tree


def _mem_gb() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // (1 << 20)
    except OSError:
        pass
    return 64


def split_vcs(cell_types: dict, physical: list, names: list[str]) -> dict:
    """Share each chain's node between ``names``: the highest level below the
    node whose cell count divides evenly goes to the VCs in equal parts; one
    VC simply owns the node cells."""
    if len(names) != len(set(names)) or not names:
        raise ValueError(f"VC names must be distinct and non-empty, got {names!r}")
    vcs: dict = {n: {"virtualCells": []} for n in names}
    for top in physical:
        chain = top["cellType"]
        if len(names) == 1:
            vcs[names[0]]["virtualCells"].append({"cellType": f"{chain}.{chain}", "cellNumber": 1})
            continue
        t, count = chain, 1
        while t in cell_types:
            count *= cell_types[t]["childCellNumber"]
            t = cell_types[t]["childCellType"]
            if count % len(names) == 0:
                for n in names:
                    vcs[n]["virtualCells"].append({"cellType": f"{chain}.{t}",
                                                   "cellNumber": count // len(names)})
                break
        else:
            raise ValueError(f"cannot split the {count} GPUs of {chain} evenly between {len(names)} VCs")
    return vcs
