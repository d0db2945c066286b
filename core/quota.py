"""The GPU-quota baseline HiveD is compared against (HiveD, OSDI '20, §5.1, YARN-CS).

One shared cluster; each VC's quota is a number of GPUs (the GPUs of its
cells in the spec), with no say over *which* GPUs. A guaranteed job runs if
its VC's quota has room and some nodes have the GPUs free; jobs over quota
run as low priority (opportunistic) on idle GPUs and are preempted when a
job within quota needs those GPUs. Placement packs like YARN-CS: each pod
goes to the node with the fewest free GPUs that still holds it (best fit),
so large free nodes are spared for large jobs as long as possible. That
packing cannot stop other tenants' 1-GPU jobs from spreading over every
node, which is the sharing anomaly HiveD removes.

``QuotaAllocator`` speaks the Allocator contract of docs/architecture.md
(place/release/grant_of/grants/why_never/free_gpus/node_free/set_health/
restore/check_invariants), so the one Engine drives both schemes.
``isolated_vcs = False`` tells the engine that a guaranteed placement here
depends on every tenant's jobs, not only the VC's own.
"""
from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from .grant import Grant
from .jobs import PodPlacement

if TYPE_CHECKING:   # the spec module is slow to import; the allocator only reads a built spec
    from .spec import CellSpec, Chain, ClusterSpec

# (node index, GPU positions on it) for each pod of a grant
Claims = list[tuple[int, tuple[int, ...]]]


class QuotaGrant(Grant):
    """GPUs held under the quota scheme, named ``node/gpu``."""

    def __post_init__(self) -> None:
        self.claims: Claims = []   # (node, GPUs) per pod; not a dataclass field: views and the store never see it

    @property
    def cells(self) -> list[str]:
        return [f"{p.node}/{g}" for p in self.pods for g in p.gpus]


class StoredGrant(Protocol):
    """What ``QuotaAllocator.restore`` reads of a stored grant."""

    @property
    def owner(self) -> str: ...
    @property
    def vc(self) -> str: ...
    @property
    def chain(self) -> str: ...
    @property
    def opportunistic(self) -> bool: ...
    @property
    def pods(self) -> Sequence[PodPlacement]: ...


def spec_nodes(chain: Chain) -> list[tuple[str, list[int]]]:
    """[(node address, [GPU index in tree order])] of a spec chain, in spec order."""
    out: list[tuple[str, list[int]]] = []

    def leaves(cell: CellSpec, acc: list[int]) -> list[int]:
        if cell.level == 1:
            assert cell.gpu_index is not None, f"{cell.path}: a GPU cell without its index"
            acc.append(cell.gpu_index)
        for ch in cell.children:
            leaves(ch, acc)
        return acc

    def walk(cell: CellSpec) -> None:
        if cell.level == chain.node_level:
            out.append((cell.address, leaves(cell, [])))
            return
        for ch in cell.children:
            walk(ch)

    for top in chain.cells:
        walk(top)
    return out


class _Pool:
    """One chain's nodes: who holds each GPU, and nodes bucketed by free count.

    GPUs of a node are kept in the spec's tree order ("positions"), so that
    aligned runs of 2, 4, ... positions are the PCIe-switch and socket cells
    of the node: a pod of g GPUs is placed inside one such block (YARN-CS
    packs for affinity inside a node too; the 2-GPU job of Figure 2 in HiveD (earlier version) takes a
    whole PCIe switch).
    """

    def __init__(self, nodes: Sequence[str], gpus: int, gpu_ids: list[list[int]], block_sizes: list[int]):
        self.names = list(nodes)
        self.index = {n: i for i, n in enumerate(self.names)}
        self.g = gpus
        self.gpu_ids = gpu_ids                # per node: GPU index at each position
        self.pos_of = [{gid: k for k, gid in enumerate(ids)} for ids in gpu_ids]
        self.blocks = block_sizes             # GPUs per cell at each level up to the node, ascending
        n = len(self.names)
        self.holder: list[list[str | None]] = [[None] * gpus for _ in range(n)]
        # guaranteed owner that claimed the GPU
        self.claim: list[list[str | None]] = [[None] * gpus for _ in range(n)]
        self.bad: list[set[int]] = [set() for _ in range(n)]
        self.free = [gpus] * n        # healthy GPUs held by nobody
        self.avail = [gpus] * n       # healthy GPUs with no guaranteed claim (free or opportunistic)
        self.by_free: list[set[int]] = [set() for _ in range(gpus + 1)]
        self.by_avail: list[set[int]] = [set() for _ in range(gpus + 1)]
        for i in range(n):
            self.by_free[gpus].add(i)
            self.by_avail[gpus].add(i)
        self.total_free = gpus * n

    def _set(self, i: int, free: int, avail: int) -> None:
        if free != self.free[i]:
            self.by_free[self.free[i]].discard(i)
            self.by_free[free].add(i)
            self.total_free += free - self.free[i]
            self.free[i] = free
        if avail != self.avail[i]:
            self.by_avail[self.avail[i]].discard(i)
            self.by_avail[avail].add(i)
            self.avail[i] = avail

    def recount(self, i: int) -> None:
        hold, claim, bad = self.holder[i], self.claim[i], self.bad[i]
        free = avail = 0
        for k in range(self.g):
            if k in bad or claim[k] is not None:
                continue
            avail += 1
            if hold[k] is None:
                free += 1
        self._set(i, free, avail)

    def block_pick(self, i: int, need: int, use_avail: bool, taken: Collection[int]) -> list[int] | None:
        """Positions for a pod of ``need`` GPUs on node ``i`` inside one aligned block,
        the block chosen best-fit level by level (fewest usable GPUs around it);
        free GPUs before opportunistic ones. None if no block holds it."""
        hold, claim, bad = self.holder[i], self.claim[i], self.bad[i]
        usable = [k not in bad and claim[k] is None and k not in taken and (use_avail or hold[k] is None)
                  for k in range(self.g)]
        size = next((b for b in self.blocks if b >= need), self.g)
        best: tuple[list[int], int] | None = None
        for start in range(0, self.g, size):
            cnt = sum(usable[start:start + size])
            if cnt < need:
                continue
            score = [cnt]
            for b in self.blocks:
                if b > size:
                    s0 = (start // b) * b
                    score.append(sum(usable[s0:s0 + b]))
            if best is None or score < best[0]:
                best = (score, start)
        if best is None:
            return None
        start = best[1]
        cand = [k for k in range(start, start + size) if usable[k]]
        cand.sort(key=lambda k: (hold[k] is not None, hold[k] or "", k))
        return cand[:need]

    def best_fit(self, need: int, use_avail: bool, taken: dict[int, set[int]],
                 ok: Callable[[str, int], bool] | None) -> tuple[int, list[int]] | None:
        """(node, positions): the node with the fewest free (or available) GPUs
        that still holds the pod in one block."""
        buckets = self.by_avail if use_avail else self.by_free
        for k in range(need, self.g + 1):
            for i in buckets[k]:  # int sets iterate in a reproducible order
                if ok is not None and not ok(self.names[i], need):
                    continue
                pick = self.block_pick(i, need, use_avail, taken.get(i, ()))
                if pick is not None:
                    return i, pick
        return None


class QuotaAllocator:
    isolated_vcs = False

    def __init__(self, spec: ClusterSpec):
        self.spec = spec
        self.pools: dict[str, _Pool] = {}
        for name, chain in spec.chains.items():
            nodes = spec_nodes(chain)
            ng = chain.gpus_per_level[chain.node_level - 1]
            self.pools[name] = _Pool([n for n, _ in nodes], ng, [ids for _, ids in nodes],
                                     chain.gpus_per_level[:chain.node_level])
        self.quota: dict[str, dict[str, int]] = {}
        for vc, vs in spec.vcs.items():
            q = {c: 0 for c in spec.chains}
            for (c, k), n in vs.cells.items():
                q[c] += n * spec.chains[c].gpus_per_level[k - 1]
            for pid in vs.pinned:
                c, k = spec.pinned[pid]
                q[c] += spec.chains[c].gpus_per_level[k - 1]
            self.quota[vc] = q
        self.used = {vc: {c: 0 for c in spec.chains} for vc in spec.vcs}
        self._grants: dict[str, QuotaGrant] = {}
        self._waiting: dict[str, set[str]] = {}    # opportunistic victim -> guaranteed owners waiting for its GPUs
        self._before: tuple[Any, ...] | None = None   # what the last reconfigure replaced, until anything changes

    # -- reading
    def grant_of(self, owner: str) -> QuotaGrant | None:
        return self._grants.get(owner)

    def grants(self) -> dict[str, QuotaGrant]:
        return dict(self._grants)

    def free_gpus(self, chain: str | None = None) -> int:
        pools = [self.pools[chain]] if chain else list(self.pools.values())
        return sum(p.total_free for p in pools)

    def total_gpus(self, chain: str) -> int:
        p = self.pools[chain]
        return p.g * len(p.names)

    def node_free(self, chain: str) -> dict[str, int]:
        p = self.pools[chain]
        return {n: p.free[i] for i, n in enumerate(p.names)}

    def vc_view(self, vc: str) -> dict[str, dict[str, int]]:
        return {c: {"total": self.quota[vc][c], "used": self.used[vc][c],
                    "free": self.quota[vc][c] - self.used[vc][c]} for c in self.spec.chains}

    def why_never(self, vc: str, pod_gpus: Sequence[int], chain: str | None = None,
                  within_level: int | None = None) -> str | None:
        total = sum(pod_gpus)
        chains = [chain] if chain else list(self.spec.chains)
        reasons = []
        for c in chains:
            p = self.pools[c]
            if max(pod_gpus) > p.g:
                reasons.append(f"a pod of {max(pod_gpus)} GPUs is more than a {c} node's {p.g}")
            elif total > self.quota[vc][c]:
                reasons.append(f"asks {total} GPUs, VC {vc} has a quota of {self.quota[vc][c]} in {c}")
            elif within_level is not None and within_level <= self.spec.chains[c].node_level and total > p.g:
                reasons.append(f"asks {total} GPUs within one node of {p.g} GPUs")
            else:
                return None
        return "; ".join(reasons)

    # -- placing
    def place(self, owner: str, vc: str, pod_gpus: Sequence[int], *, opportunistic: bool = False, priority: int = 0,
              chain: str | None = None, within_level: int | None = None,
              node_ok: Callable[[str, int], bool] | None = None) -> QuotaGrant | None:
        self._before = None
        if owner in self._grants:
            raise ValueError(f"owner {owner!r} already holds a grant")
        if vc not in self.quota:
            raise KeyError(f"unknown VC {vc!r}")
        for c in ([chain] if chain else list(self.pools)):
            g = self._place_in(c, owner, vc, list(pod_gpus), opportunistic, priority, within_level, node_ok)
            if g is not None:
                return g
        return None

    def _place_in(self, c: str, owner: str, vc: str, pod_gpus: list[int], opportunistic: bool, priority: int,
                  within_level: int | None, node_ok: Callable[[str, int], bool] | None) -> QuotaGrant | None:
        p = self.pools[c]
        total = sum(pod_gpus)
        if not pod_gpus or max(pod_gpus) > p.g:
            return None
        if not opportunistic and self.used[vc][c] + total > self.quota[vc][c]:
            return None
        one_node = (within_level is not None and within_level <= self.spec.chains[c].node_level
                    and len(pod_gpus) > 1)
        if one_node and total > p.g:
            return None
        order = sorted(range(len(pod_gpus)), key=lambda r: -pod_gpus[r])  # big pods first
        for use_avail in ((False,) if opportunistic else (False, True)):
            taken: dict[int, set[int]] = {}
            picks: dict[int, tuple[int, list[int]]] | None = {}
            for r in order:
                if one_node and taken:
                    i = next(iter(taken))
                    pos = p.block_pick(i, pod_gpus[r], use_avail, taken[i])
                    hit: tuple[int, list[int]] | None = None if pos is None else (i, pos)
                elif one_node:
                    hit = self._one_node_first(p, pod_gpus, use_avail, node_ok, r)
                else:
                    hit = p.best_fit(pod_gpus[r], use_avail, taken, node_ok)
                if hit is None:
                    picks = None
                    break
                i, pos = hit
                taken.setdefault(i, set()).update(pos)
                assert picks is not None   # set to None only on the way out of the loop
                picks[r] = (i, pos)
            if picks:
                return self._commit(c, owner, vc, pod_gpus, picks, opportunistic, priority)
        return None

    @staticmethod
    def _one_node_first(p: _Pool, pod_gpus: list[int], use_avail: bool,
                        node_ok: Callable[[str, int], bool] | None, r: int) -> tuple[int, list[int]] | None:
        """First pod of a gang that must share one node: best-fit a node holding the whole gang."""
        total = sum(pod_gpus)
        buckets = p.by_avail if use_avail else p.by_free
        for k in range(total, p.g + 1):
            for i in buckets[k]:
                if node_ok is not None and not node_ok(p.names[i], pod_gpus[r]):
                    continue
                pos = p.block_pick(i, pod_gpus[r], use_avail, ())
                if pos is not None:
                    return i, pos
        return None

    def _commit(self, c: str, owner: str, vc: str, pod_gpus: list[int], picks: dict[int, tuple[int, list[int]]],
                opportunistic: bool, priority: int) -> QuotaGrant:
        p = self.pools[c]
        pods: list[PodPlacement] = []
        victims: set[str] = set()
        claims: Claims = []
        for r in range(len(pod_gpus)):
            i, pos = picks[r]
            hold, claim = p.holder[i], p.claim[i]
            for k in pos:
                held_by = hold[k]
                if held_by is None:
                    hold[k] = owner
                else:
                    victims.add(held_by)
                if not opportunistic:
                    claim[k] = owner
            claims.append((i, tuple(sorted(pos))))
            pods.append(PodPlacement(r, p.names[i], tuple(sorted(p.gpu_ids[i][k] for k in pos))))
        grant = QuotaGrant(owner, vc, c, opportunistic, priority, pods, victims)
        grant.claims = claims
        for v in victims:
            self._waiting.setdefault(v, set()).add(owner)
        self._grants[owner] = grant
        if not opportunistic:
            self.used[vc][c] += sum(pod_gpus)
        for i in {i for i, _ in claims}:
            p.recount(i)
        return grant

    def release(self, owner: str) -> None:
        self._before = None
        gr = self._grants.pop(owner, None)
        if gr is None:
            return
        p = self.pools[gr.chain]
        for i, pos in gr.claims:
            hold, claim = p.holder[i], p.claim[i]
            for k in pos:
                if claim[k] == owner:
                    claim[k] = None
                if hold[k] == owner:
                    hold[k] = claim[k]  # a guaranteed job waiting for this victim takes the GPU over
        for w in self._waiting.pop(owner, ()):
            other = self._grants.get(w)
            if other is not None:
                other.victims.discard(owner)
        for v in gr.victims:
            ws = self._waiting.get(v)
            if ws:
                ws.discard(owner)
        if not gr.opportunistic:
            self.used[gr.vc][gr.chain] -= sum(len(pos) for _, pos in gr.claims)
        for i in {i for i, _ in gr.claims}:
            p.recount(i)

    def restore(self, grant_like: StoredGrant | dict[str, Any]) -> None:
        """Re-take a stored grant: an object with owner/vc/chain/opportunistic/pods or its
        dict form (the one ``Allocator.restore`` takes; pods as dicts with node and gpus)."""
        self._before = None
        if isinstance(grant_like, dict):
            grant_like = _grant_from_dict(grant_like)
        c = grant_like.chain
        if c not in self.pools:
            raise ValueError(f"restore {grant_like.owner}: unknown chain {c!r}")
        if grant_like.owner in self._grants:
            raise ValueError(f"restore {grant_like.owner}: already holds a grant")
        p = self.pools[c]
        claims: Claims = []
        for pod in grant_like.pods:
            if pod.node not in p.index:
                raise ValueError(f"restore {grant_like.owner}: unknown node {pod.node!r} in chain {c}")
            i = p.index[pod.node]
            pos: list[int] = []
            for gid in pod.gpus:
                k = p.pos_of[i].get(gid)
                if k is None:
                    raise ValueError(f"restore {grant_like.owner}: node {pod.node} has no GPU {gid}")
                if p.holder[i][k] is not None:
                    raise ValueError(f"restore {grant_like.owner}: GPU {pod.node}/{gid} "
                                     f"already held by {p.holder[i][k]}")
                pos.append(k)
            claims.append((i, tuple(pos)))
        for i, taken in claims:
            for k in taken:
                p.holder[i][k] = grant_like.owner
                if not grant_like.opportunistic:
                    p.claim[i][k] = grant_like.owner
        gr = QuotaGrant(grant_like.owner, grant_like.vc, c, grant_like.opportunistic,
                        getattr(grant_like, "priority", 0), list(grant_like.pods), set())
        gr.claims = claims
        self._grants[gr.owner] = gr
        if not gr.opportunistic:
            self.used[gr.vc][c] += sum(len(pos) for _, pos in claims)
        for i in {i for i, _ in claims}:
            p.recount(i)

    def set_health(self, node: str, gpu: int | None, healthy: bool) -> list[str]:
        self._before = None
        for p in self.pools.values():
            if node in p.index:
                i = p.index[node]
                if gpu is not None and gpu not in p.pos_of[i]:
                    raise KeyError(f"node {node!r} has no GPU {gpu}")
                positions = range(p.g) if gpu is None else [p.pos_of[i][gpu]]
                hit: set[str] = set()
                for k in positions:
                    if healthy:
                        p.bad[i].discard(k)
                    else:
                        p.bad[i].add(k)
                        holder = p.holder[i][k]
                        if holder is not None:
                            hit.add(holder)
                p.recount(i)
                return sorted(hit)
        raise KeyError(f"unknown node {node!r}")

    _STATE = ("spec", "pools", "quota", "used", "_grants", "_waiting")

    def reconfigure(self, new_spec: ClusterSpec) -> list[str]:
        """The grants on pools built from ``new_spec`` (the contract's one reconfiguration).

        The baseline has no cells to lose: a grant comes back when its nodes and GPUs
        still exist, so nobody is downgraded. ``BindingConflict`` (nothing changed) when
        a grant's VC, chain or GPUs are gone.
        """
        from .grant import BindingConflict
        new = QuotaAllocator(new_spec)
        for g in sorted(self._grants.values(), key=lambda g: (g.opportunistic, g.owner)):
            if g.vc not in new.quota:
                raise BindingConflict(f"reconfiguration refused: VC {g.vc!r} is not in the new spec but still "
                                      f"holds {g.owner} (release it first)", g.owner)
            try:
                new.restore(g)
            except ValueError as exc:
                raise BindingConflict(f"reconfiguration would lose {g.owner}: {exc}", g.owner) from None
        before = tuple(getattr(self, k) for k in self._STATE)
        for k in self._STATE:
            setattr(self, k, getattr(new, k))
        self._before = before
        return []

    def undo_reconfigure(self) -> None:
        """Put back what the last ``reconfigure`` replaced, while nothing else changed since (else RuntimeError)."""
        if self._before is None:
            raise RuntimeError("undo_reconfigure: nothing to undo (no reconfigure, or the allocator changed since)")
        for k, v in zip(self._STATE, self._before):
            setattr(self, k, v)
        self._before = None

    def check_invariants(self) -> None:
        for vc, per in self.used.items():
            for c, u in per.items():
                assert 0 <= u <= self.quota[vc][c], f"quota: VC {vc} uses {u} of {self.quota[vc][c]} GPUs in {c}"
        for c, p in self.pools.items():
            assert p.total_free == sum(p.free), f"quota: free total of {c} out of sync"
            for i in range(len(p.names)):
                for k in range(p.g):
                    h, cl = p.holder[i][k], p.claim[i][k]
                    assert h is None or h in self._grants, f"quota: GPU {p.names[i]}/{k} held by unknown {h}"
                    assert cl is None or (cl in self._grants and not self._grants[cl].opportunistic), \
                        f"quota: GPU {p.names[i]}/{k} claimed by {cl}, not a guaranteed grant"
                    assert cl is None or h is not None, f"quota: GPU {p.names[i]}/{k} claimed but held by nobody"


def _grant_from_dict(d: dict[str, Any]) -> StoredGrant:
    """The dict form of a stored grant as an attribute object (pods as PodPlacement)."""
    missing = [k for k in ("owner", "vc", "chain", "pods") if k not in d]
    if missing:
        raise ValueError(f"restore: the binding lacks {', '.join(missing)}")
    pods: list[PodPlacement] = []
    for r, pod in enumerate(d["pods"]):
        if isinstance(pod, dict):
            pod = PodPlacement(rank=int(pod.get("rank", r)), node=pod["node"], gpus=tuple(pod["gpus"]),
                               cells=tuple(pod.get("cells", ())))
        pods.append(pod)
    return Grant(owner=d["owner"], vc=d["vc"], chain=d["chain"],
                 opportunistic=bool(d.get("opportunistic", False)),
                 priority=int(d.get("priority", 0) or 0), pods=pods)
