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
from typing import Iterator

BAD = 1 << 40  # key offset for cells holding an unhealthy GPU: sorts after every healthy cell


class Buckets:
    __slots__ = ("b", "heap", "n", "phys", "name")

    def __init__(self, phys: bool, name: str = ""):
        self.b: dict[int, dict] = {}
        self.heap: list[int] = []
        self.n = 0
        self.phys = phys     # physical free list (counts in parent.nfc) or a VC's (parent.vfc)
        self.name = name

    def __len__(self) -> int:
        return self.n

    def __contains__(self, cell) -> bool:
        return cell.flist is self

    def add(self, cell, key: int) -> None:
        d = self.b.get(key)
        if d is None:
            d = self.b[key] = {}
            heapq.heappush(self.heap, key)
            if len(self.heap) > 4 * len(self.b) + 32:  # drop stale keys now and then
                self.heap = list(self.b)
                heapq.heapify(self.heap)
        d[cell] = None
        cell.flist = self
        cell.fkey = key
        self.n += 1
        p = cell.parent
        if p is not None:
            if self.phys:
                p.nfc += 1
            else:
                p.vfc += 1

    def remove(self, cell) -> None:
        d = self.b[cell.fkey]
        del d[cell]
        if not d:
            del self.b[cell.fkey]
        cell.flist = None
        cell.fkey = None
        self.n -= 1
        p = cell.parent
        if p is not None:
            if self.phys:
                p.nfc -= 1
            else:
                p.vfc -= 1

    def rekey(self, cell, key: int) -> None:
        if cell.fkey != key:
            self.remove(cell)
            self.add(cell, key)

    def first(self):
        heap, b = self.heap, self.b
        while heap and heap[0] not in b:
            heapq.heappop(heap)
        if not heap:
            return None
        return next(iter(b[heap[0]]))

    def ordered(self) -> Iterator:
        """Cells in key order (healthy and fewest opportunistic GPUs first)."""
        for key in sorted(self.b):
            d = self.b.get(key)
            if d:
                yield from list(d)

    def cells(self) -> list:
        return [c for d in self.b.values() for c in d]
