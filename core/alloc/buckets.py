"""Free lists for buddy cell allocation, one per (domain, level).

A free list holds cells bucketed by a small integer key: unhealthy cells last,
then by opportunistic GPUs, so "the healthy free cell with the fewest
opportunistic GPUs" is the first cell of the lowest key (O(1) amortized,
a heap of keys with lazy deletion). Cells remember their list and key, and
each list keeps its parent's count of listed children up to date, which makes
the buddy-merge test O(1) instead of a scan of the siblings.
"""
from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..cells import Cell

BAD = 1 << 40  # key offset for cells holding an unhealthy GPU: sorts after every healthy cell


class Buckets:
    __slots__ = ("by_key", "keys", "size", "physical", "name")

    def __init__(self, physical: bool, name: str = ""):
        self.by_key: dict[int, dict[Cell, None]] = {}  # key -> cells with that key (insertion-ordered set)
        self.keys: list[int] = []    # heap of keys; may hold keys whose bucket is gone (lazy deletion)
        self.size = 0
        self.physical = physical     # physical free list (counted in parent.phys_free_children) or a VC's
        self.name = name

    def __len__(self) -> int:
        return self.size

    def __contains__(self, cell: Cell) -> bool:
        return cell.free_list is self

    def __repr__(self) -> str:
        return f"Buckets({self.name!r}, {self.size} cells)"

    def add(self, cell: Cell, key: int) -> None:
        d = self.by_key.get(key)
        if d is None:
            d = self.by_key[key] = {}
            heapq.heappush(self.keys, key)
            if len(self.keys) > 4 * len(self.by_key) + 32:  # drop stale keys now and then
                self.keys = list(self.by_key)
                heapq.heapify(self.keys)
        d[cell] = None
        cell.free_list = self
        cell.free_key = key
        self.size += 1
        p = cell.parent
        if p is not None:
            if self.physical:
                p.phys_free_children += 1
            else:
                p.vc_free_children += 1

    def remove(self, cell: Cell) -> None:
        d = self.by_key[cell.free_key]
        del d[cell]
        if not d:
            del self.by_key[cell.free_key]
        cell.free_list = None
        cell.free_key = 0
        self.size -= 1
        p = cell.parent
        if p is not None:
            if self.physical:
                p.phys_free_children -= 1
            else:
                p.vc_free_children -= 1

    def rekey(self, cell: Cell, key: int) -> None:
        if cell.free_key != key:
            self.remove(cell)
            self.add(cell, key)

    def first(self) -> Cell | None:
        heap, by_key = self.keys, self.by_key
        while heap and heap[0] not in by_key:
            heapq.heappop(heap)
        if not heap:
            return None
        return next(iter(by_key[heap[0]]))

    def ordered(self) -> Iterator[Cell]:
        """Cells in key order (healthy and fewest opportunistic GPUs first)."""
        for key in sorted(self.by_key):
            d = self.by_key.get(key)
            if d:
                yield from list(d)

    def cells(self) -> list[Cell]:
        return [c for d in self.by_key.values() for c in d]


def level_lists(physical: bool, name: str, top_level: int) -> list[Buckets]:
    """Free lists indexed by level 1..top_level (index 0 is an empty placeholder)."""
    return [Buckets(physical, f"{name}/L{k}") for k in range(top_level + 1)]
