"""Algorithm 1's moves on free lists, shared by the physical and the VC layers.

A free list's key orders cells by health, then by opportunistic GPUs
(``free_key``); ``split_take`` takes a listed cell and splits it down to the
level wanted, listing the unused buddies; ``carve`` and ``carve_to`` split
without taking; ``usable`` says whether a free cell holds a healthy cell of
a level on an allowed node.
"""
from __future__ import annotations

from collections.abc import Callable

from ..cells import Cell
from ..spec import Chain
from .buckets import BAD, Buckets

NodeOk = Callable[[str, int], bool] | None   # node veto: (node, GPUs of the pod) -> allowed


def opportunistic_load(c: Cell) -> int:
    """GPUs of ``c`` under opportunistic pods (all of them when a pod sits on a cell above it)."""
    a = c.parent
    while a is not None:
        if a.opportunistic_owner is not None:
            return c.gpus
        a = a.parent
    return c.opportunistic_gpus


def free_key(c: Cell) -> int:
    return (BAD if c.bad_gpus else 0) + opportunistic_load(c)


def listed_ancestor(c: Cell) -> Cell | None:
    """The listed cell holding ``c`` (``c`` itself when listed), or None."""
    x: Cell | None = c
    while x is not None:
        if x.free_list is not None:
            return x
        x = x.parent
    return None


def rekey_around(c: Cell) -> None:
    """After a counter change at ``c``: re-sort the listed cell holding it (and any listed below it)."""
    x = listed_ancestor(c)
    if x is not None:
        assert x.free_list is not None
        x.free_list.rekey(x, free_key(x))
        return
    stack = list(c.children)
    while stack:
        y = stack.pop()
        if y.free_list is not None:
            y.free_list.rekey(y, free_key(y))
        elif y.level > 1 and y.guaranteed_owner is None:
            stack.extend(y.children)


def usable(c: Cell, level: int, node_ok: NodeOk, gpus: int, healthy: bool = True) -> bool:
    """Does free cell ``c`` hold a level-``level`` cell that is healthy and on an allowed node?"""
    if c.level < level:
        return False
    if not healthy or c.bad_gpus == 0:
        if node_ok is None:
            return True
        if c.node is not None:
            return bool(node_ok(c.node, gpus))
        # above the nodes: some node inside must be allowed (the children are below ``level``
        # when ``level`` is c's own, e.g. a rack for a gang kept within one rack)
        return any(usable(ch, min(level, ch.level), node_ok, gpus, healthy) for ch in c.children)
    if c.level == level or c.bad_gpus == c.gpus:
        return False
    return any(usable(ch, level, node_ok, gpus, healthy) for ch in c.children)


def split_take(lists: list[Buckets], c: Cell, level: int, node_ok: NodeOk, gpus: int, healthy: bool = True,
               need: int | None = None) -> Cell:
    """Take listed cell ``c`` and split it down to ``level``; the unused buddies join the free lists.

    At each split the child kept is the usable one (holding a usable
    level-``need`` cell, default ``level``) with the fewest opportunistic GPUs.
    """
    need = level if need is None else need
    assert c.free_list is not None
    c.free_list.remove(c)
    while c.level > level:
        best: Cell | None = None
        best_key = 0
        for ch in c.children:
            k = free_key(ch)
            if (best is None or k < best_key) and usable(ch, need, node_ok, gpus, healthy):
                best, best_key = ch, k
        if best is None:  # pragma: no cover - callers check c is usable first
            best = min(c.children, key=free_key)
        for ch in c.children:
            if ch is not best:
                lists[ch.level].add(ch, free_key(ch))
        c = best
    return c


def carve(lists: list[Buckets], y: Cell, level: int) -> Cell:
    """Split listed cell ``y`` down to a level-``level`` cell that stays listed; returns it."""
    x = y
    while x.level > level:
        lists[x.level].remove(x)
        best = min(x.children, key=free_key)
        for ch in x.children:
            lists[ch.level].add(ch, free_key(ch))
        x = best
    return x


def carve_to(lists: list[Buckets], y: Cell, target: Cell) -> None:
    """Split listed cell ``y`` along the path to ``target``; ``target`` ends up listed."""
    path = []
    x = target
    while x is not y:
        path.append(x)
        assert x.parent is not None, f"{target.id} is not inside {y.id}"
        x = x.parent
    x = y
    for nxt in reversed(path):
        lists[x.level].remove(x)
        for ch in x.children:
            lists[ch.level].add(ch, free_key(ch))
        x = nxt


def pod_levels(chain: Chain, pod_gpus: list[int]) -> list[int] | None:
    """The cell level of each pod (the smallest holding its GPUs); None if one is larger than a node."""
    levels = [chain.level_for_gpus(g) for g in pod_gpus]
    out: list[int] = []
    for lv in levels:
        if lv is None or lv > chain.node_level:
            return None
        out.append(lv)
    return out


def memo_node_ok(fn: Callable[[str, int], bool]) -> Callable[[str, int], bool]:
    """The veto asked once per (node, GPUs) within one placement."""
    cache: dict[tuple[str, int], bool] = {}

    def wrapped(node: str, gpus: int) -> bool:
        key = (node, gpus)
        if key not in cache:
            cache[key] = bool(fn(node, gpus))
        return cache[key]
    return wrapped
