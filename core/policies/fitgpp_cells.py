"""FitGpp on HiveD's cells: preempt only BE jobs whose cells, once free, hold the TE job's pods.

Under HiveD's buddy allocator a pod holds the smallest cell holding its GPUs (a 4-GPU
pod a whole socket, an 8-GPU pod a whole node), so "fits" in eq. 2 of the FitGpp paper
is a question about cells, not GPU counts: three free GPUs beside a 2-GPU BE job on one
socket are no socket once the job leaves when a 1-GPU TE job sits on that socket's other
pair (issue 28). ``CellRoom`` answers it from the allocator's physical cell tree:

* a cell is free once ``gone`` (the victims) have left when neither it nor any cell
  below it holds a pod of another job or a bad GPU (``free_cells``);
* the TE job's pods fit when each can take a free cell of its level, packed largest
  first into the smallest free cell, whose unused halves stay free (``pods_fit``), all
  inside one cell of the job's locality level when it has one.

The victim choice (``choose``), with the candidates in ascending eq. 3 score:

1. eq. 4 on cells: the lowest-scored BE job whose leaving alone makes room;
2. else, per cell the head's largest pod needs, the BE jobs holding it, when all of
   them are candidates; cells are taken in ascending sum of their jobs' scores (fewest
   jobs, then names, on ties) until the pods fit. This replaces the paper's random
   fallback: it preempts only what frees whole cells, packed in the fewest cells;
3. else nothing is preempted: no set of candidates frees cells the job fits, and
   preempting would cost BE work without starting the TE job.

Nothing here changes the allocator: it reads the tree's owner marks (``Cell``).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..cells import Cell, CellTree
    from ..spec import ClusterSpec


def _busy(cell: Cell, gone: frozenset[str] | set[str]) -> bool:
    for own in (cell.guaranteed_owner, cell.opportunistic_owner, cell.waiting_owner):
        if own is not None and own not in gone:
            return True
    return False


def _walk(cell: Cell, gone: frozenset[str] | set[str], out: list[Cell]) -> bool:
    """True when ``cell`` is wholly free; else its wholly free sub-cells are appended to ``out``."""
    if _busy(cell, gone):
        return False
    if not cell.children:
        return cell.bad_gpus == 0
    ok = [_walk(ch, gone, out) for ch in cell.children]
    if all(ok) and cell.bad_gpus == 0:
        return True
    out.extend(ch for ch, f in zip(cell.children, ok) if f)
    return False


def free_cells(node: Cell, gone: frozenset[str] | set[str] = frozenset()) -> list[Cell]:
    """The largest wholly free cells of a node cell once the jobs in ``gone`` have left."""
    out: list[Cell] = []
    if _walk(node, gone, out):
        return [node]
    return out


def _take(blocks: list[Cell], level: int) -> Cell | None:
    """Buddy-take a level-``level`` cell from the smallest free block holding one; the
    block's unused sub-cells go back into ``blocks``."""
    best = None
    for i, b in enumerate(blocks):
        if b.level >= level and (best is None or b.level < blocks[best].level):
            best = i
    if best is None:
        return None
    c = blocks.pop(best)
    while c.level > level:
        blocks.extend(c.children[1:])
        c = c.children[0]
    return c


def pods_fit(levels: Sequence[int], blocks: Iterable[Cell], within: int | None = None) -> bool:
    """Do pods of these cell levels fit the free ``blocks`` (all under one level-``within``
    cell when given)?"""
    groups: dict[object, list[Cell]] = {}
    for b in blocks:
        key: object = None
        if within is not None:
            a: Cell | None = b
            while a is not None and a.level < within:
                a = a.parent
            key = a.id if a is not None else None
        groups.setdefault(key, []).append(b)
    order = sorted(levels, reverse=True)
    for group in groups.values():
        left = list(group)
        if all(_take(left, lv) is not None for lv in order):
            return True
    return False


class CellRoom:
    """Free cells of one chain's nodes as they would be once some jobs have left."""

    def __init__(self, tree: CellTree, spec: ClusterSpec):
        self.tree = tree
        self.spec = spec

    def levels(self, chain: str, pod_gpus: Sequence[int]) -> list[int] | None:
        ch = self.spec.chains[chain]
        out = []
        for g in pod_gpus:
            lv = ch.level_for_gpus(g)
            if lv is None or lv > ch.node_level:
                return None
            out.append(lv)
        return out

    def choose(self, chain: str, pod_gpus: Sequence[int], within: int | None,
               ordered: Sequence[tuple[float, str]], nodes_of: Mapping[str, Iterable[str]],
               free_nodes: Iterable[str], alone_ok: Callable[[str, str], bool] | None = None,
               ) -> tuple[list[str], str]:
        """Victims (per the module docstring) among ``ordered`` ((eq. 3 score, job id), ascending)
        for pods of ``pod_gpus`` GPUs in ``chain``; ``nodes_of`` maps each candidate to its nodes,
        ``free_nodes`` are the chain's nodes with unbound GPUs. ``alone_ok(job, node)`` vetoes a
        node for step 1 (the caller's eq. 2 by counts, a necessary condition, and its CPU and
        memory test). ([], why) when none."""
        levels = self.levels(chain, pod_gpus)
        if levels is None:
            return [], f"fitgpp: pods of {max(pod_gpus)} GPUs are larger than a node of chain {chain}"
        nodes, node_chain = self.tree.nodes, self.tree.node_chain
        base: dict[str, list[Cell]] = {}      # free cells of the nodes with unbound GPUs (gangs only)
        if len(levels) > 1:
            base = {n: free_cells(nodes[n]) for n in free_nodes if n in nodes and node_chain[n] == chain}

        def fits(gone: set[str], touched: Iterable[str]) -> bool:
            mine = {n for n in touched if n in nodes and node_chain[n] == chain}
            blocks = [b for n in mine for b in free_cells(nodes[n], gone)]
            if len(levels) == 1:    # one pod: only the victims' nodes changed, and it fit nowhere before
                return any(b.level >= levels[0] for b in blocks)
            blocks.extend(b for n, bs in base.items() if n not in mine for b in bs)
            return pods_fit(levels, blocks, within)

        for score, jid in ordered:                      # 1. eq. 4 on cells
            ns = [n for n in nodes_of[jid] if alone_ok is None or alone_ok(jid, n)]
            if ns and fits({jid}, ns):
                return [jid], (f"fitgpp: preempt {jid} (score {score:.3f}, eq. 3; its cells, once free, "
                               "hold the TE job's pods)")
        return self._by_cells(levels, ordered, nodes_of, fits)

    def _by_cells(self, levels: list[int], ordered: Sequence[tuple[float, str]],
                  nodes_of: Mapping[str, Iterable[str]],
                  fits: Callable[[set[str], Iterable[str]], bool]) -> tuple[list[str], str]:
        """Step 2: whole cells of the largest pod's level whose holders are all candidates."""
        score = {j: s for s, j in ordered}
        top = max(levels)
        seen: set[str] = set()
        targets: list[tuple[float, int, str, frozenset[str]]] = []
        for _, jid in ordered:
            for n in nodes_of[jid]:
                if n in seen or n not in self.tree.nodes:
                    continue
                seen.add(n)
                for _cell, owners in _cells_at(self.tree.nodes[n], top):
                    if owners and all(o in score for o in owners):
                        targets.append((sum(score[o] for o in owners), len(owners), min(owners), frozenset(owners)))
        targets.sort(key=lambda t: (t[0], t[1], t[2]))
        gone: set[str] = set()
        touched: set[str] = set()
        for _, _, _, owned in targets:
            if owned <= gone:
                continue
            gone |= owned
            for o in owned:
                touched.update(nodes_of[o])
            if fits(gone, touched):
                victims = [j for _, j in ordered if j in gone]
                return victims, ("fitgpp fallback: no single BE job fits the TE job once its cells are free "
                                 "(eq. 2 on cells), so the BE jobs holding the whole cells it needs, lowest "
                                 f"summed eq. 3 score first, are preempted: {', '.join(victims)}")
        return [], ("fitgpp: no set of BE jobs under the cap frees cells the TE job's pods fit "
                    "(the cells it needs hold TE jobs or BE jobs at the cap): nothing is preempted")


def _cells_at(node: Cell, level: int) -> list[tuple[Cell, set[str]]]:
    """Each healthy level-``level`` cell of ``node`` with the owners of pods on it, above it or
    below it (all must leave to free it)."""
    above: set[str] = set()
    c: Cell | None = node
    while c is not None:
        _owners(c, above)
        c = c.parent
    out: list[tuple[Cell, set[str]]] = []
    stack = [(node, above)]
    while stack:
        cell, got = stack.pop()
        if cell.bad_gpus and cell.level <= level:
            continue
        if cell.level == level:
            own = set(got)
            sub = list(cell.children)
            while sub:
                x = sub.pop()
                _owners(x, own)
                sub.extend(x.children)
            out.append((cell, own))
            continue
        for ch in cell.children:
            stack.append((ch, got | _owners(ch, set())))
    return out


def _owners(cell: Cell, into: set[str]) -> set[str]:
    for own in (cell.guaranteed_owner, cell.opportunistic_owner, cell.waiting_owner):
        if own is not None:
            into.add(own)
    return into
