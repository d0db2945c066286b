"""What an allocator hands out for one gang, in the form the engine keeps and the store saves.

One type for every path: ``place`` and ``allocate`` return a ``Grant``,
``grants()`` lists them, and ``restore`` takes one back (or its ``to_dict()``
form, or one rebuilt from stored pods). A grant made by the cell allocator
knows the cell of each pod (``held``) and the VC cell it was bound in
(``bound_in``), so that a restore can bind exactly those cells again; its
``pods`` are worked out from the cells when first read.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .jobs import Placement, PodPlacement

if TYPE_CHECKING:
    from .cells import CellTree


class BindingConflict(ValueError):
    """A stored binding cannot be rebuilt: names the owner, the cell and why (``owner``, when one is to blame)."""

    def __init__(self, message: str, owner: str | None = None):
        super().__init__(message)
        self.owner = owner


class Grant:
    """The cells (or GPUs) held by ``owner`` in ``vc``, all pods in one chain."""

    __slots__ = ("owner", "vc", "chain", "opportunistic", "priority", "victims", "downgraded", "held",
                 "bound_in", "_pods", "_tree")

    def __init__(self, owner: str, vc: str, chain: str, opportunistic: bool, priority: int,
                 pods: list[PodPlacement] | None = None, victims: set[str] | None = None, *,
                 held: list[tuple[str, int]] | None = None,
                 bound_in: list[tuple[str, int] | None] | None = None,
                 tree: CellTree | None = None):
        self.owner = owner
        self.vc = vc
        self.chain = chain
        self.opportunistic = opportunistic
        self.priority = priority
        self.victims: set[str] = set(victims or ())  # opportunistic owners on these GPUs, to be preempted
        self.downgraded = False       # a guaranteed grant kept as opportunistic (reconfiguration, exchange)
        # (cell id, GPUs used) per pod, by rank; GPUs 0 = the whole cell (a stored form that left it out)
        self.held: list[tuple[str, int]] = held or []
        self.bound_in = bound_in      # per pod: (id, level) of the VC cell it was bound in, when known
        self._pods = pods
        self._tree = tree             # to work out ``pods`` from ``held`` when first read

    @property
    def cells(self) -> list[str]:
        """Cell ids, one per pod (from the pods' recorded cells when the grant was rebuilt from pods)."""
        if self.held:
            return [c for c, _ in self.held]
        return [c for p in self.pods for c in p.cells]

    @property
    def gpus(self) -> int:
        if self.held and self._tree is not None:
            by_id = self._tree.by_id
            return sum(g or by_id[c].gpus for c, g in self.held)
        if self.held and all(g for _, g in self.held):
            return sum(g for _, g in self.held)
        return sum(len(p.gpus) for p in self.pods)

    @property
    def pods(self) -> list[PodPlacement]:
        if self._pods is None:
            self._pods = self._layout()
        return self._pods

    def _layout(self) -> list[PodPlacement]:
        """One pod placement per node of each held cell; a pod uses the first GPUs of its cell."""
        tree = self._tree
        if tree is None:
            return []
        out: list[PodPlacement] = []
        for cid, g in self.held:
            c = tree.by_id[cid]
            for node in tree.node_cells(c):
                src = c if c.level <= node.level else node
                take = (g or None) if src is c else None   # a cell spanning nodes: each node whole
                leaves = list(src.leaves())[:take]
                out.append(PodPlacement(rank=len(out), node=node.id,
                                        gpus=tuple(sorted(leaf.gpu_index for leaf in leaves)), cells=(src.id,)))
        return out

    @property
    def placement(self) -> Placement:
        return Placement(chain=self.chain, pods=tuple(self.pods), opportunistic=self.opportunistic)

    def to_dict(self) -> dict[str, Any]:
        """The plain (JSON) form ``restore`` takes back."""
        d: dict[str, Any] = {"owner": self.owner, "vc": self.vc, "chain": self.chain,
                             "opportunistic": self.opportunistic, "priority": self.priority}
        if self.held:
            by_id = self._tree.by_id if self._tree is not None else {}
            d["cells"] = [c for c, _ in self.held]
            d["gpus"] = [g or (by_id[c].gpus if c in by_id else 0) for c, g in self.held]
            d["bound"] = [list(b) if b else None for b in self.bound_in] if self.bound_in else None
        elif self.pods and all(len(p.cells) == 1 for p in self.pods):
            d["cells"] = [p.cells[0] for p in self.pods]
            d["gpus"] = [len(p.gpus) for p in self.pods]
        d["pods"] = [{"rank": p.rank, "node": p.node, "gpus": list(p.gpus), "cells": list(p.cells)}
                     for p in self.pods]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Grant:
        """The grant a ``to_dict()`` form (or a stored binding of pods) describes; BindingConflict if malformed."""
        owner, vc = d.get("owner"), d.get("vc")
        if not isinstance(owner, str) or not isinstance(vc, str):
            raise BindingConflict("a binding needs 'owner' and 'vc'")
        cells, gpus = d.get("cells"), d.get("gpus")
        held: list[tuple[str, int]] = []
        if isinstance(cells, list) and cells and isinstance(cells[0], str) and isinstance(gpus, list):
            held = [(str(cid), int(gpus[i]) if i < len(gpus) else 0) for i, cid in enumerate(cells)]
        pods: list[PodPlacement] = []
        for i, p in enumerate(d.get("pods") or []):
            if isinstance(p, PodPlacement):
                pods.append(p)
                continue
            try:
                pods.append(PodPlacement(rank=int(p.get("rank", i)), node=str(p["node"]),
                                         gpus=tuple(int(g) for g in p["gpus"]),
                                         cells=tuple(str(c) for c in p.get("cells") or ())))
            except (KeyError, TypeError, ValueError, AttributeError):
                raise BindingConflict(f"{owner}: pod {i} is not a {{'node', 'gpus'}} mapping: {p!r}") from None
        bound: list[tuple[str, int] | None] | None = None
        raw = d.get("bound")
        if isinstance(raw, list):
            bound = [(b[0], b[1]) if isinstance(b, (list, tuple)) and len(b) == 2 and isinstance(b[0], str)
                     and isinstance(b[1], int) else None for b in raw]
        chain = d.get("chain")
        return cls(owner, vc, chain if isinstance(chain, str) else "", bool(d.get("opportunistic", False)),
                   int(d.get("priority", 0) or 0), pods, held=held, bound_in=bound)

    def __repr__(self) -> str:
        kind = "opportunistic" if self.opportunistic else "guaranteed"
        return (f"{type(self).__name__}({self.owner!r}, vc={self.vc!r}, {kind}, cells={self.cells}, "
                f"victims={sorted(self.victims)})")
