"""From NVML pair topology to cell levels: which GPUs group at which level.

A level is kept only when it is a real, uniform grouping strictly between
the GPU and the node (hivedscheduler cells need the same number of children
in every cell of a type) and it nests inside the next coarser level kept.
Whatever cannot be shown is dropped, with a note saying what was assumed.
"""
from __future__ import annotations

# NVML common-ancestor levels (nvmlGpuTopologyLevel_t)
TOPOLOGY_MULTIPLE = 20   # behind the same (multi-level) PCIe switch
TOPOLOGY_NODE = 40       # same CPU socket / NUMA node


def _components(idx: list[int], joined) -> list[list[int]]:
    parent = {i: i for i in idx}

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for a_pos, a in enumerate(idx):
        for b in idx[a_pos + 1:]:
            if joined(a, b):
                parent[find(a)] = find(b)
    groups: dict = {}
    for i in idx:
        groups.setdefault(find(i), []).append(i)
    return sorted((sorted(g) for g in groups.values()), key=lambda g: g[0])


def _pair(topo: dict, a: int, b: int) -> int | None:
    return topo.get((a, b), topo.get((b, a)))


def group_levels(idx: list[int], topo: dict, nvlink: dict, numa: dict):
    """-> (levels [(suffix, children per cell)] from GPU to node, tree, notes).

    ``tree`` is nested lists of NVML indices (the node's children first).
    """
    notes: list[str] = []
    n = len(idx)
    known_topo = all(_pair(topo, a, b) is not None for k, a in enumerate(idx) for b in idx[k + 1:])
    candidates: list[tuple[str, list[list[int]]]] = []

    links = {i: set(nvlink.get(i, ())) for i in idx}
    if any(links.values()):
        comps = _components(idx, lambda a, b: b in links[a] or a in links[b])
        if len(comps) == 1:
            notes.append("all GPUs share one NVLink domain (NVSwitch or full mesh): no NVLink level below the node")
        candidates.append(("NVLINK", comps))
    elif n > 1:
        notes.append("no NVLink peers reported: no NVLink level")
    if known_topo and n > 1:
        level = {(a, b): lv for a in idx for b in idx if (lv := _pair(topo, a, b)) is not None}
        candidates.append(("SWITCH", _components(idx, lambda a, b: level[a, b] <= TOPOLOGY_MULTIPLE)))
        candidates.append(("SOCKET", _components(idx, lambda a, b: level[a, b] <= TOPOLOGY_NODE)))
    elif n > 1:
        if topo or not nvlink:
            notes.append("PCIe topology between GPUs unknown: assumed no PCIe-switch level")
        if all(numa.get(i) is not None for i in idx):
            candidates.append(("SOCKET", _components(idx, lambda a, b: numa[a] == numa[b])))
            notes.append("socket level taken from each GPU's NUMA node")
        else:
            notes.append("NUMA node unknown: assumed no socket level (all GPUs directly in the node)")

    kept: list[tuple[str, list[list[int]]]] = []
    # coarse to fine, so that each kept level nests in the one above
    for suffix, groups in reversed(candidates):
        sizes = {len(g) for g in groups}
        if len(groups) in (1, n):
            continue                      # same as the node or as single GPUs: not a level
        if len(sizes) != 1:
            notes.append(f"{suffix} groups have unequal sizes {sorted(len(g) for g in groups)}: level dropped")
            continue
        parent = kept[-1][1] if kept else [sorted(idx)]
        if not _nests(groups, parent):
            notes.append(f"{suffix} groups cross the {kept[-1][0] if kept else 'node'} groups unevenly: level dropped")
            continue
        if kept and [sorted(g) for g in groups] == kept[-1][1]:
            continue
        kept.append((suffix, groups))
    kept.reverse()                         # fine to coarse

    levels: list[tuple[str, int]] = []
    prev_size = 1
    for suffix, groups in kept:
        size = len(groups[0])
        levels.append((suffix, size // prev_size))
        prev_size = size
    levels.append(("NODE", n // prev_size))
    tree = _tree(sorted(idx), [g for _, g in reversed(kept)])
    return levels, tree, notes


def _nests(groups: list[list[int]], parents: list[list[int]]) -> bool:
    count = None
    for p in parents:
        ps = set(p)
        inside = [g for g in groups if set(g) <= ps]
        if sum(len(g) for g in inside) != len(p):
            return False
        if count is not None and len(inside) != count:
            return False
        count = len(inside)
    return True


def _tree(members: list[int], levels_coarse_to_fine: list[list[list[int]]]):
    if not levels_coarse_to_fine:
        return members
    top, rest = levels_coarse_to_fine[0], levels_coarse_to_fine[1:]
    ms = set(members)
    return [_tree(g, rest) for g in top if set(g) <= ms]
