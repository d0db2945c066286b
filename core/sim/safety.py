"""Did a queued job wait for its own tenant, or for someone else?

HiveD's promise (HiveD, OSDI '20, §3): a request that fits the free cells of its VC view
is placed at once; it never waits for another tenant. So a guaranteed job
still queued right after a scheduling round, at the head of its VC's queue,
while its VC had room for it, waited for others: a sharing-safety breach.
``vc_room`` answers "had room" for both allocators: HiveD's (free cells of
the VC view, a cell splitting into cells of lower levels) and the GPU-quota
baseline's (unused quota GPUs, which is all quota promises), in both cases with
the CPUs and memory the pods ask counted per node as placement counts them.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..engine import Engine
    from ..engine_records import JobRecord


def vc_room(eng: Engine, rec: JobRecord, memo: dict[str, tuple[object, bool]] | None = None) -> bool:
    """True if ``rec``'s VC could host it now by its own reservation: its free cells (or
    unused quota GPUs) hold the pods, and nodes have the CPUs and memory the pods ask, as
    placement counts them (``ClusterView.fits``, what the engine's ``node_ok`` asks).

    ``memo`` (VC -> (key, fits)): the cell part depends on the VC alone, so it is asked again
    only when the job or the VC's version (``Engine.vc_version``) moved since it last failed."""
    vc = rec.request.vc
    key = None
    if memo is not None:
        key = (rec.job_id, eng.vc_version(vc))
        m = memo.get(vc)
        if m is not None and m[0] == key and not m[1]:
            return False     # the VC's cells did not change since they could not hold this job
    chains, by_cells = _chains_with_room(eng, rec)
    if memo is not None:
        memo[vc] = (key, bool(chains))
    # quota promises a GPU count: nodes too fragmented by others' jobs for the pods are the
    # breach itself, so only CPUs and memory are asked of the nodes there
    return any(_hosts(eng, rec, c, gpus=by_cells) for c in chains)


def _chains_with_room(eng: Engine, rec: JobRecord) -> tuple[list[str], bool]:
    """The chains whose free cells of ``rec``'s VC (or unused quota GPUs) hold its pods, and
    whether they were counted in cells (HiveD) rather than in quota GPUs."""
    view = eng.alloc.vc_view(rec.request.vc)
    chains = [rec.chain] if rec.chain is not None else list(eng.spec.chains)
    if isinstance(view, dict):      # quota baseline: {chain: {total, used, free}}
        return [c for c in chains if c in view and view[c]["free"] >= rec.gpus], False
    out = []
    for chain_name in chains:
        chain = eng.spec.chains[chain_name]
        free = {k: n for (c, k), n in view.free_cells.items() if c == chain_name}
        if _fits(free, chain.gpus_per_level, [chain.level_for_gpus(g) for g in rec.pod_gpus]):
            out.append(chain_name)
    return out, True


def _hosts(eng: Engine, rec: JobRecord, chain: str, gpus: bool = True) -> bool:
    """Can the pods go on nodes of ``chain`` with the CPUs, memory and (``gpus``) GPUs free for
    them (GPUs held by opportunistic work count as free: a guaranteed job takes them back)?
    Biggest pods first, each on the node with the most CPUs left that holds it."""
    share = rec.default_share   # its pods ask no CPUs or memory of their own: their GPUs' share goes with them
    if share and not gpus:
        return True
    left = {n: [st.cpus_free, st.memory_free_gb, st.gpus_total - st.guaranteed_gpus]
            for n, st in eng.view.nodes.items() if st.chain == chain}
    for c, m, g in sorted(rec.pod_demands, reverse=True):
        best = None
        for n, (cf, mf, gf) in left.items():
            enough = share or (cf + 1e-9 >= c and mf + 1e-9 >= m)
            if enough and (gf >= g or not gpus) and (best is None or cf > left[best][0]):
                best = n
        if best is None:
            return False
        room = left[best]
        room[0] -= c
        room[1] -= m
        room[2] -= int(g)
    return True


def _fits(free: dict[int, int], per_level: list[int], levels: list[int | None]) -> bool:
    """Can pods of these levels take free cells (a level-k cell holds
    gpus(k)/gpus(l) cells of level l)? Largest pods first, each from the
    smallest free cell that holds it, the remainder of a split cell kept."""
    sized = [lv for lv in levels if lv is not None]
    if len(sized) < len(levels):   # a pod bigger than a top cell
        return False
    free = dict(free)
    for lv in sorted(sized, reverse=True):
        k = next((k for k in sorted(free) if k >= lv and free[k] > 0), None)
        if k is None:
            return False
        free[k] -= 1
        # splitting a level-k cell for a level-lv pod leaves one cell of each level lv..k-1
        for m in range(lv, k):
            free[m] = free.get(m, 0) + per_level[m] // per_level[m - 1] - 1
    return True


def blocked_heads(eng: Engine, now: float, vcs: Iterable[str] | None = None,
                  memo: dict[str, tuple[object, bool]] | None = None) -> list[str]:
    """Guaranteed jobs heading their VC's queue (the first not in retry back-off)
    that fit their VC's free cells after the round at ``now`` and yet wait.

    HiveD's guarantee says this list is always empty. Read after ``step(now)``;
    a count of free GPUs is checked first, the cells only when it passes.
    ``vcs``: only these VCs (those the round scanned: nothing changed elsewhere).
    ``memo``: kept by the caller between rounds (``vc_room``), so that a head whose VC's
    cells could not hold it is not measured again until the head or the VC changes."""
    out: list[str] = []
    for vc in (eng.spec.vcs if vcs is None else vcs):
        head = eng.head(vc, now)
        if head is None or not head.request.job_class.guaranteed:
            continue
        if eng.vc_free(vc, head.chain) < head.gpus:
            continue
        if vc_room(eng, head, memo):
            out.append(head.job_id)
    return out
