"""FitGpp: which best-effort (BE) jobs to preempt for a trial-and-error (TE) job.

The FitGpp paper (Yabuuchi et al., "Low-latency job scheduling with preemption
for the development of deep learning", OpML '19), section 3.2. With D = [C, R, G] a demand of
CPUs, RAM and GPUs, and a node's capacities C_cap, R_cap, G_cap:

    eq. 1  Size(D)   = sqrt((C/C_cap)^2 + (R/R_cap)^2 + (G/G_cap)^2)
    eq. 2  fit(j)    : D_TE <= D_j + N  element-wise, N = free resources of
                       the node j runs on
    eq. 3  Score(j)  = Size(D_j) / max_J Size + s * GP_j / max_J GP
                       (J = all running BE jobs, s = weight, default 4.0)
    eq. 4  j*        = argmin { Score(j) | fit(j) and PreemptionCount_j < P }

If no running BE job satisfies eq. 4, the paper preempts a random BE job; we
draw it among the jobs under the cap on nodes that can host the TE job, then
preempt that node's lowest-scored jobs until the TE job fits (see
``choose``); the returned reason says that this fallback was taken.

The module has two layers: pure functions over plain tuples (what the tests
check against hand-computed numbers, and what the paper-model simulator
calls), and ``FitGppPolicy``, the engine's ``PreemptionPolicy`` (``name``,
``choose(job, candidates, view, now) -> (victim ids, reason)``), which
answers single-pod TE jobs from cached numpy columns (fitgpp_vector.py, the
same eq. 4 answers and the same fallback rule, fast with thousands of
jobs) and everything else through the tuple functions. Nothing here reads the clock or keeps state between calls
apart from those caches and the seeded random generator of the fallback.
"""
from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from .preemption_order import under_cap

if TYPE_CHECKING:   # the engine imports the policies; they only read its records and view
    from ..engine_records import JobRecord
    from ..engine_view import ClusterView
    from .fitgpp_cells import CellRoom

T = TypeVar("T")

# A demand or free-resource vector, always in this order: (cpus, memory_gb, gpus).
Vec = tuple[float, float, float]

DEFAULT_S = 4.0   # paper §4.2: s = 4.0
DEFAULT_CAP = 1   # paper §4.2: P = 1


# --------------------------------------------------------------------------
# eq. 1-4 as pure functions


def size(demand: Vec, capacity: Vec) -> float:
    """eq. 1: the Euclidean norm of the demand, each term over the node's capacity.

    Dividing by the capacity makes the size independent of units (4 CPUs and
    64 GB are compared as shares of a node). A zero capacity is refused
    rather than silently producing inf.
    """
    total = 0.0
    for name, d, cap in zip(("cpus", "memory_gb", "gpus"), demand, capacity):
        if cap <= 0:
            raise ValueError(f"size: node capacity of {name} must be > 0, got {cap}")
        total += (d / cap) ** 2
    return math.sqrt(total)


def fits(te_demand: Vec, victim_on_node: Vec, node_free: Vec) -> bool:
    """eq. 2: would the TE job fit on the node once the victim has left it?"""
    return all(t <= v + n + 1e-9 for t, v, n in zip(te_demand, victim_on_node, node_free))


def scores(sizes: Sequence[float], grace_periods: Sequence[float], s: float = DEFAULT_S) -> list[float]:
    """eq. 3 for every running BE job at once.

    The maxima run over *all* running BE jobs (the paper's J), not only the
    eligible ones, so pass every running BE job here. A maximum of 0 (all
    jobs rewindable, GP = 0) makes that term 0 rather than 0/0.
    """
    if len(sizes) != len(grace_periods):
        raise ValueError(f"scores: {len(sizes)} sizes but {len(grace_periods)} grace periods")
    max_size = max(sizes, default=0.0)
    max_gp = max(grace_periods, default=0.0)
    out = []
    for sz, gp in zip(sizes, grace_periods):
        a = sz / max_size if max_size > 0 else 0.0
        b = gp / max_gp if max_gp > 0 else 0.0
        out.append(a + s * b)
    return out


@dataclass(frozen=True)
class Candidate:
    """One running BE job as the policies see it.

    ``usage`` maps each node the job runs on to what it holds there;
    ``size`` is eq. 1 of the job's demand (summed over its nodes, each share
    taken of that node's capacity, which is eq. 1 exactly for the paper's
    single-node jobs).
    """

    job_id: str
    usage: Mapping[str, Vec]
    size: float
    grace_period: float
    preemptions: int = 0
    remaining: float = 0.0  # only LRTP reads it (perfect knowledge, as in the paper)


@dataclass(frozen=True)
class Choice:
    victims: list[str]
    reason: str
    fallback: bool = False


# --------------------------------------------------------------------------
# "does the TE job fit?" for one pod or a gang of identical pods


def _pods_on(avail: Vec, pod: Vec) -> int:
    """How many copies of ``pod`` fit into ``avail``.

    A node over-committed in some resource (a TE job already bound there,
    waiting for its victims to leave) takes nothing.
    """
    if any(a < -1e-9 for a in avail):
        return 0
    k = math.inf
    for a, p in zip(avail, pod):
        if p > 0:
            k = min(k, math.floor((a + 1e-9) / p))
    return int(min(k, 1 << 30))


def pods_fitting(pod: Vec, free: Mapping[str, Vec]) -> int:
    return sum(_pods_on(f, pod) for f in free.values())


def room_after(pods: Sequence[Vec], free: Mapping[str, Vec], freed: Mapping[str, Vec]) -> bool:
    """Would the TE gang ``pods`` fit if the usage in ``freed`` were released?

    Identical pods (the usual gang) are counted exactly node by node;
    mixed pods are packed first-fit decreasing, which may say no where a
    cleverer packing says yes (the engine's allocator then decides anyway).
    """
    if not pods:
        return True
    if all(p == pods[0] for p in pods):
        pod = pods[0]
        need = len(pods)
        got = 0
        for node, f in free.items():
            v = freed.get(node)
            avail = f if v is None else (f[0] + v[0], f[1] + v[1], f[2] + v[2])
            got += _pods_on(avail, pod)
            if got >= need:
                return True
        return False
    left = {n: list(f) for n, f in free.items()}
    for n, v in freed.items():
        if n in left:
            left[n] = [a + b for a, b in zip(left[n], v)]
    for pod in sorted(pods, key=lambda p: (p[2], p[0], p[1]), reverse=True):
        for a in left.values():
            if all(x + 1e-9 >= y for x, y in zip(a, pod)):
                for i in range(3):
                    a[i] -= pod[i]
                break
        else:
            return False
    return True


def single_fit(pods: Sequence[Vec], cand: Candidate, free: Mapping[str, Vec]) -> bool:
    """eq. 2 for candidate ``cand``: its release alone makes room for the TE job.

    For the paper's single-pod TE job this is exactly eq. 2 on one of the
    victim's nodes; for a gang it asks whether the pods fit once the victim's
    nodes are freed.
    """
    if len(pods) == 1:
        pod = pods[0]
        return any(fits(pod, used, free.get(node, (0.0, 0.0, 0.0))) for node, used in cand.usage.items())
    return room_after(pods, free, cand.usage)


class Room:
    """Tracks, as victims are added one by one, whether the TE job fits yet.

    For identical pods it keeps the number of pods each node could host
    (free + released so far) and updates only the victim's nodes, so adding
    a victim costs O(its nodes), not O(cluster). Mixed pods re-pack.
    """

    def __init__(self, pods: Sequence[Vec], free: Mapping[str, Vec]):
        self.pods = list(pods)
        self.free = free
        self.freed: dict[str, Vec] = {}
        self.same = bool(pods) and all(p == pods[0] for p in pods)
        if self.same:
            pod = self.pods[0]
            self.count = {n: _pods_on(f, pod) for n, f in free.items()}
            self.total = sum(self.count.values())

    def avail(self, node: str) -> Vec:
        f = self.free.get(node, (0.0, 0.0, 0.0))
        v = self.freed.get(node)
        return f if v is None else (f[0] + v[0], f[1] + v[1], f[2] + v[2])

    def add(self, usage: Mapping[str, Vec]) -> None:
        for node, v in usage.items():
            f = self.freed.get(node)
            self.freed[node] = v if f is None else (f[0] + v[0], f[1] + v[1], f[2] + v[2])
            if self.same:
                k = _pods_on(self.avail(node), self.pods[0])
                self.total += k - self.count.get(node, 0)
                self.count[node] = k

    def fits(self) -> bool:
        if not self.pods:
            return True
        if self.same:
            return self.total >= len(self.pods)
        return room_after(self.pods, self.free, self.freed)


def preempt_until_fits(pods: Sequence[Vec], ordered: Iterable[Candidate], free: Mapping[str, Vec]) -> list[str] | None:
    """Take victims in the given order until the TE job fits; None if it never does.

    This is how LRTP and RAND work in the paper ("continue the preemption
    process until they can prepare enough resource").
    """
    room = Room(pods, free)
    victims: list[str] = []
    for cand in ordered:
        victims.append(cand.job_id)
        room.add(cand.usage)
        if room.fits():
            return victims
    return None


def _shuffled(items: Sequence[T], rng: random.Random) -> Iterator[T]:
    """Lazy Fisher-Yates: draws only as many items as are used."""
    pool = list(items)
    n = len(pool)
    for i in range(n):
        j = rng.randrange(i, n)
        pool[i], pool[j] = pool[j], pool[i]
        yield pool[i]


def _fit_reason(jid: str, score: float, sz: float, grace: float, s: float, fit: str = "fits alone") -> str:
    return (f"fitgpp: preempt {jid} (score {score:.3f} = size {sz:.3f} scaled + s={s:g} x grace "
            f"{grace:g}s scaled; {fit})")


def choose(
    pods: Sequence[Vec],
    candidates: Sequence[Candidate],
    free: Mapping[str, Vec],
    *,
    s: float = DEFAULT_S,
    cap: float = DEFAULT_CAP,
    rng: random.Random | None = None,
    known_unfit: bool = False,
) -> Choice:
    """eq. 4, with the paper's random fallback.

    ``candidates`` are all running BE jobs (the J of eq. 3); those with
    ``preemptions >= cap`` are scored but never chosen. ``free`` is every
    node's unallocated resources.

    Fallback (no job satisfies eq. 4): the paper preempts a random BE job.
    One random job rarely makes room on its own, and drawing more at random
    spreads preemptions over the whole cluster. So the random job is drawn
    among the eligible jobs on nodes that can host the TE job at all, and the
    TE job then takes that node: its other eligible jobs are preempted in
    ascending eq. 3 score until the TE job fits. For a gang (several pods),
    random eligible jobs are drawn until it fits. ``known_unfit`` says the
    caller already knows eq. 4 is empty (skips re-checking eq. 2 job by job).
    """
    if s < 0:
        raise ValueError(f"fitgpp: weight s must be >= 0, got {s}")
    if cap < 0:
        raise ValueError(f"fitgpp: preemption cap P must be >= 0, got {cap}")
    if not candidates:
        return Choice([], "fitgpp: no running BE job to preempt")
    heap = _eligible_scores(candidates, s, cap)
    if not heap:
        return Choice([], f"fitgpp: every running BE job reached the preemption cap P={cap}")
    if known_unfit:  # the caller already found eq. 4 empty: straight to the fallback
        order, heap = sorted(heap), []
    else:
        heapq.heapify(heap)  # O(n); we pop in ascending score only until one fits
        order = []
    while heap:
        score, _, i = item = heapq.heappop(heap)
        order.append(item)
        c = candidates[i]
        if single_fit(pods, c, free):
            return Choice([c.job_id], _fit_reason(c.job_id, score, c.size, c.grace_period, s))
    eligible = [candidates[i] for _, _, i in order]   # ascending score
    if len(pods) != 1:
        return _gang_fallback(pods, eligible, free, rng or random.Random(0))
    return _node_fallback(pods[0], eligible, free, rng or random.Random(0))


def _eligible_scores(candidates: Sequence[Candidate], s: float, cap: float) -> list[tuple[float, str, int]]:
    """eq. 3 (same arithmetic as scores(), without the intermediate lists) for the candidates
    under the cap, as (score, job id, index)."""
    max_size = max(c.size for c in candidates)
    max_gp = max(c.grace_period for c in candidates)
    ka = 1.0 / max_size if max_size > 0 else 0.0
    kb = s / max_gp if max_gp > 0 else 0.0
    return [(c.size * ka + c.grace_period * kb, c.job_id, i)
            for i, c in enumerate(candidates) if under_cap(c.preemptions, cap)]


def _gang_fallback(pods: Sequence[Vec], eligible: Sequence[Candidate], free: Mapping[str, Vec],
                   rng: random.Random) -> Choice:
    """A gang: random eligible jobs until it fits (the paper's random choice, repeated)."""
    victims = preempt_until_fits(pods, _shuffled(eligible, rng), free)
    if victims is None:
        return Choice([], f"fitgpp: preempting all {len(eligible)} eligible BE jobs would still not make room")
    return Choice(victims, "fitgpp fallback: no single BE job fits the TE gang (eq. 2), so random BE jobs "
                  f"are preempted until it fits, as the paper does: {', '.join(victims)}", fallback=True)


def _node_fallback(pod: Vec, eligible: Sequence[Candidate], free: Mapping[str, Vec], rng: random.Random) -> Choice:
    """One pod: a random eligible job on a node that can host it once its eligible jobs leave,
    then that node's lowest-scored jobs until the pod fits there (``choose``)."""
    on_node: dict[str, list[Candidate]] = {}
    for c in eligible:  # ascending score
        for node in c.usage:
            on_node.setdefault(node, []).append(c)
    hosts = []  # nodes that can host the TE job once their eligible BE jobs leave
    for node, cs in on_node.items():
        f = free.get(node, (0.0, 0.0, 0.0))
        tot = [f[0], f[1], f[2]]
        for c in cs:
            u = c.usage[node]
            tot[0] += u[0]
            tot[1] += u[1]
            tot[2] += u[2]
        if fits(pod, (0.0, 0.0, 0.0), (tot[0], tot[1], tot[2])):
            hosts.append(node)
    if not hosts:
        return Choice([], f"fitgpp: preempting all {len(eligible)} eligible BE jobs would still not make room")
    node = hosts[rng.randrange(len(hosts))] if len(hosts) > 1 else hosts[0]
    first = on_node[node][rng.randrange(len(on_node[node]))]
    room = Room([pod], free)
    victims = []
    for c in [first] + [k for k in on_node[node] if k is not first]:
        victims.append(c.job_id)
        room.add({node: c.usage[node]})
        if fits(pod, (0.0, 0.0, 0.0), room.avail(node)):
            break
    return Choice(
        victims,
        f"fitgpp fallback: no single BE job fits the TE job (eq. 2), so, as the paper does, a random "
        f"BE job ({victims[0]}) is preempted; then the lowest-scored (eq. 3) BE jobs on its node "
        f"{node} until the TE job fits there: {', '.join(victims)}",
        fallback=True,
    )


# --------------------------------------------------------------------------
# the engine hook


def node_vectors(view: ClusterView) -> tuple[dict[str, Vec], dict[str, Vec]]:
    """(free, capacity) per node from a ClusterView, as (cpus, memory_gb, gpus)."""
    free: dict[str, Vec] = {}
    cap: dict[str, Vec] = {}
    for name, st in view.nodes.items():
        free[name] = (float(st.cpus_free), float(st.memory_free_gb), float(st.gpus_free))
        cap[name] = (float(st.cpus_total), float(st.memory_total_gb), float(st.gpus_total))
    return free, cap


def job_id_of(record: object) -> str:
    for attr in ("job_id", "id"):
        v = getattr(record, attr, None)
        if v is not None:
            return str(v)
    raise AttributeError(f"job record {record!r} has neither job_id nor id")


def pod_demands(record: JobRecord, capacity: Mapping[str, Vec]) -> list[Vec]:
    """Per-pod (cpus, memory_gb, gpus) of a job record's request.

    A pod that states no CPU or RAM gets the node's share for its GPUs
    (node CPUs x gpus / node GPUs), the default documented in docs/fitgpp.md
    and used by the engine; the node is any node of the cluster (they are
    alike inside one chain).
    """
    demands = getattr(record, "pod_demands", None)
    if demands:  # the engine may resolve defaults itself; trust it
        return [(float(d[0]), float(d[1]), float(d[2])) for d in demands]
    some = next(iter(capacity.values()), (0.0, 0.0, 1.0))
    out: list[Vec] = []
    for g in record.request.groups:
        gpus = float(g.gpus)
        share = gpus / some[2] if some[2] else 0.0
        cpus = float(g.cpus) if g.cpus is not None else some[0] * share
        mem = float(g.memory_gb) if g.memory_gb is not None else some[1] * share
        out.extend([(cpus, mem, gpus)] * g.pods)
    return out


def candidates_from(records: Sequence[JobRecord], view: ClusterView, capacity: Mapping[str, Vec], now: float,
                    remaining: Callable[[JobRecord, float], float] | None = None,
                    cache: dict[str, tuple[Any, float, Candidate]] | None = None) -> list[Candidate]:
    """Build Candidates from running BE JobRecords and the view's per-job usage.

    ``cache`` (job id -> (usage object, grace, Candidate)) lets a policy reuse
    what it built at an earlier call while the engine hands the same usage
    object for a job: with thousands of running jobs this conversion, not the
    choice, is what costs.
    """
    out: list[Candidate] = []
    if not records:
        return out
    usage_all = view.usage
    id_attr = "job_id" if getattr(records[0], "job_id", None) is not None else "id"
    get: Callable[[str], tuple[Any, float, Candidate] | None] = cache.get if cache is not None else (lambda _k: None)
    empty: dict[str, Any] = {}
    for rec in records:
        jid = getattr(rec, id_attr)
        raw = usage_all.get(jid, empty)
        pre = rec.preemptions or 0
        grace = rec.request.grace_period
        rem = float(remaining(rec, now)) if remaining else 0.0
        hit = get(jid)
        if hit is not None and hit[0] is raw and hit[1] == grace:
            c = hit[2]
            if c.preemptions != pre or c.remaining != rem:
                c = Candidate(jid, c.usage, c.size, grace, pre, rem)
            out.append(c)
            continue
        usage = {n: (float(u[1]), float(u[2]), float(u[0])) for n, u in raw.items()}  # view: (gpus, cpus, mem)
        sz = 0.0
        for n, u in usage.items():
            cap = capacity.get(n)
            if cap is not None:
                sz += size(u, cap) ** 2
        c = Candidate(jid, usage, math.sqrt(sz), grace, pre, rem)
        if cache is not None:
            cache[jid] = (raw, grace, c)
        out.append(c)
    return out


def restrict_to_chain(cands: list[Candidate], free: dict[str, Vec], view: ClusterView,
                      chain: str | None) -> tuple[list[Candidate], dict[str, Vec]]:
    """Only nodes of the TE job's chain can host it: drop the others from eq. 2."""
    if chain is None:
        return cands, free
    keep = {n for n, st in view.nodes.items() if st.chain == chain}
    free = {n: f for n, f in free.items() if n in keep}
    out = []
    for c in cands:
        if all(n in keep for n in c.usage):
            out.append(c)
        else:  # its size (eq. 1, for the eq. 3 maxima) stays; only its nodes elsewhere stop counting
            out.append(Candidate(c.job_id, {n: u for n, u in c.usage.items() if n in keep}, c.size,
                                 c.grace_period, c.preemptions, c.remaining))
    return out, free


@dataclass
class FitGppPolicy:
    """The engine's PreemptionPolicy for FitGpp (docs/architecture.md).

    ``choose(job, candidates, view, now) -> (victim ids, reason)``: ``job``
    is the TE JobRecord that does not fit, ``candidates`` the running BE
    JobRecords of its VC below the engine's cap, ``view`` the ClusterView.
    ``s`` is eq. 3's weight; ``cap`` (eq. 4's P) is None when the engine
    calls it (the engine passes only jobs under its P, defined once in
    ``preemption_order.preemption_cap``), a number for standalone use; ``seed`` seeds
    the fallback's random draw. A single-pod TE job is answered from numpy
    columns (``fitgpp_vector``), anything else by ``choose`` above; both give
    the same eq. 4 victim, and the same fallback rule (the random draws of
    the fallback differ: the columns draw over nodes in index order).
    """

    s: float = DEFAULT_S
    cap: int | None = None   # None: no cap of its own, the engine passes only jobs under P
    seed: int = 0
    name: str = "fitgpp"
    _rng: random.Random = field(init=False, repr=False)
    _cache: dict[str, tuple[Any, float, Candidate]] = field(init=False, repr=False, default_factory=dict)
    _vec: Any = field(init=False, repr=False)   # fitgpp_vector.VectorScorer, which imports this module
    _cells: CellRoom | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        if self.s < 0:
            raise ValueError(f"fitgpp: weight s must be >= 0, got {self.s}")
        if self.cap is not None and self.cap < 0:
            raise ValueError(f"fitgpp: preemption cap P must be >= 0, got {self.cap}")
        self._rng = random.Random(self.seed)
        from .fitgpp_vector import VectorScorer  # late: fitgpp_vector imports size() from here

        self._vec = VectorScorer()

    def attach(self, alloc: object) -> None:
        """The engine hands its allocator. Under HiveD's cells (an allocator with a cell tree)
        victims are chosen by the cells they free (fitgpp_cells.py); otherwise by eq. 2's counts."""
        from .fitgpp_cells import CellRoom

        tree = getattr(alloc, "tree", None)
        spec = getattr(alloc, "spec", None)
        self._cells = CellRoom(tree, spec) if tree is not None and spec is not None else None

    def choose(self, job: JobRecord, candidates: Sequence[JobRecord], view: ClusterView,
               now: float) -> tuple[list[str], str]:
        if not candidates:
            return [], "fitgpp: no running BE job to preempt"
        if self._cells is not None and job.pod_gpus:
            return self._choose_on_cells(self._cells, job, candidates, view, now)
        from .fitgpp_vector import NO_FIT

        unfit = False
        chain = getattr(job.request, "chain", None)
        demands = getattr(job, "pod_demands", None)
        if demands and len(demands) == 1:
            d = demands[0]
            pod = (float(d[0]), float(d[1]), float(d[2]))
            hit = self._vec.best(pod, candidates, view, self.s, math.inf if self.cap is None else self.cap,
                                 chain, rng=self._rng)
            if isinstance(hit, Choice):       # the fallback, answered from the columns too
                return hit.victims, hit.reason
            unfit = hit == NO_FIT
            if isinstance(hit, tuple):         # neither None, NO_FIT nor the fallback: the eq. 4 winner
                jid, score, sz, grace = hit
                return [jid], _fit_reason(jid, score, sz, grace, self.s)
        free, cap = node_vectors(view)
        pods = pod_demands(job, cap)
        if len(self._cache) > 4 * len(candidates) + 1024:
            self._cache.clear()  # finished jobs: keep the cache from growing without bound
        cands = candidates_from(candidates, view, cap, now, cache=self._cache)
        cands, free = restrict_to_chain(cands, free, view, chain)
        ch = choose(pods, cands, free, s=self.s, cap=math.inf if self.cap is None else self.cap, rng=self._rng,
                    known_unfit=unfit)
        return ch.victims, ch.reason

    def _choose_on_cells(self, cells: CellRoom, job: JobRecord, candidates: Sequence[JobRecord],
                         view: ClusterView, now: float) -> tuple[list[str], str]:
        """eq. 3's order, eq. 2 and 4 asked of the cells (fitgpp_cells.py), per chain the job may use."""
        free, capacity = node_vectors(view)
        if len(self._cache) > 4 * len(candidates) + 1024:
            self._cache.clear()
        cands = candidates_from(candidates, view, capacity, now, cache=self._cache)
        heap = _eligible_scores(cands, self.s, math.inf if self.cap is None else self.cap)
        if not heap:
            return [], f"fitgpp: every running BE job reached the preemption cap P={self.cap}"
        ordered = [(score, jid) for score, jid, _ in sorted(heap)]
        by_id = {c.job_id: c for c in cands}
        nodes_of = {c.job_id: list(c.usage) for c in cands}
        demands = pod_demands(job, capacity)
        pod = demands[0] if len(demands) == 1 else None

        def alone_ok(jid: str, node: str) -> bool:   # eq. 2 by counts on that node: necessary
            used = by_id[jid].usage.get(node)
            return pod is None or (used is not None and fits(pod, used, free.get(node, (0.0, 0.0, 0.0))))

        free_nodes = [n for n, st in view.nodes.items() if st.gpus_free > 0]
        chains = [job.chain] if job.chain is not None else list(cells.spec.chains)
        why = "fitgpp: no chain to place the TE job in"
        for chain in chains:
            victims, why = cells.choose(chain, job.pod_gpus, job.level, ordered, nodes_of, free_nodes, alone_ok)
            if len(victims) == 1 and not why.startswith("fitgpp fallback"):
                c = by_id[victims[0]]
                score = next(sc for sc, j in ordered if j == c.job_id)
                return victims, _fit_reason(c.job_id, score, c.size, c.grace_period, self.s,
                                            "fits alone: its cells, once free, hold the TE job's pods")
            if victims:
                return victims, why
        return [], why
