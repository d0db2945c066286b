"""ClusterView: the per-node resources and per-job usage the policies read.

The engine keeps one view and updates it incrementally on every bind and
release (never rebuilt per round): policies such as FitGpp read
``view.nodes`` (free CPUs, RAM and GPUs per node) and ``view.usage`` (what
each running job holds on each node). GPUs counted here are those bound to
a job, so a node may go over-committed (negative free) while a guaranteed
job waits for the opportunistic victims it overlaps to leave.
"""
from __future__ import annotations

from dataclasses import dataclass, field

# what one job holds on one node: (GPUs, CPUs, memory in GB)
NodeUsage = tuple[int, float, float]


@dataclass
class NodeState:
    chain: str
    gpus_total: int
    gpus_free: int
    cpus_total: float
    cpus_free: float
    memory_total_gb: float
    memory_free_gb: float
    guaranteed_gpus: int = 0   # GPUs held by guaranteed (TE/BE) work: the fragmentation metric


@dataclass
class ChainNodes:
    """A chain's nodes as backfill's whole-node reservations count them."""
    nodes: int = 0
    busy: int = 0                                # nodes with guaranteed_gpus > 0
    sizes: set[int] = field(default_factory=set)  # GPUs per node


@dataclass
class ClusterView:
    nodes: dict[str, NodeState] = field(default_factory=dict)
    usage: dict[str, dict[str, NodeUsage]] = field(default_factory=dict)   # job -> {node: its usage}
    chains: dict[str, ChainNodes] = field(default_factory=dict)
    # chain -> [nodes with k GPUs unbound] (k clamped to 0..total)
    hist: dict[str, list[int]] = field(default_factory=dict)

    def add_node(self, node: str, chain: str, gpus: int, cpus: float, memory_gb: float) -> None:
        self.nodes[node] = NodeState(chain, gpus, gpus, float(cpus), float(cpus), float(memory_gb), float(memory_gb))
        ch = self.chains.setdefault(chain, ChainNodes())
        ch.nodes += 1
        ch.sizes.add(gpus)
        h = self.hist.setdefault(chain, [0] * (gpus + 1))
        if len(h) < gpus + 1:
            h.extend([0] * (gpus + 1 - len(h)))
        h[gpus] += 1

    def _move(self, st: NodeState, before: int) -> None:
        h = self.hist[st.chain]
        top = len(h) - 1
        h[min(top, max(0, before))] -= 1
        h[min(top, max(0, st.gpus_free))] += 1

    def can_host(self, chain: str, pod_gpus: list[int]) -> bool:
        """Could ``pod_gpus`` fit on unbound GPUs by count alone (identical pods only;
        a necessary condition the engine checks before asking the allocator for an
        opportunistic placement)."""
        h = self.hist.get(chain)
        if h is None or not pod_gpus:
            return True
        g = pod_gpus[0]
        if any(p != g for p in pod_gpus):
            return True
        need = len(pod_gpus)
        room = 0
        for k in range(len(h) - 1, g - 1, -1):
            room += h[k] * (k // g)
            if room >= need:
                return True
        return False

    def bind(self, job_id: str, per_node: dict[str, NodeUsage], guaranteed: bool) -> None:
        """Charge ``per_node`` ({node: (gpus, cpus, mem)}) to the job."""
        self.usage[job_id] = per_node
        for node, (g, c, m) in per_node.items():
            st = self.nodes[node]
            before = st.gpus_free
            st.gpus_free -= g
            self._move(st, before)
            st.cpus_free -= c
            st.memory_free_gb -= m
            if guaranteed:
                if st.guaranteed_gpus == 0 and g > 0:
                    self.chains[st.chain].busy += 1
                st.guaranteed_gpus += g

    def unbind(self, job_id: str, guaranteed: bool) -> None:
        per_node = self.usage.pop(job_id, None)
        if not per_node:
            return
        for node, (g, c, m) in per_node.items():
            st = self.nodes[node]
            before = st.gpus_free
            st.gpus_free += g
            self._move(st, before)
            st.cpus_free += c
            st.memory_free_gb += m
            if guaranteed:
                st.guaranteed_gpus -= g
                if st.guaranteed_gpus == 0 and g > 0:
                    self.chains[st.chain].busy -= 1

    def free_nodes(self, chain: str) -> int:
        """Nodes of ``chain`` no guaranteed work holds a GPU of."""
        ch = self.chains.get(chain)
        return 0 if ch is None else ch.nodes - ch.busy

    def node_size(self, chain: str) -> int | None:
        """GPUs per node of ``chain`` when all its nodes have the same number, else None."""
        ch = self.chains.get(chain)
        return next(iter(ch.sizes)) if ch is not None and len(ch.sizes) == 1 else None

    def fits(self, node: str, cpus: float, memory_gb: float) -> bool:
        st = self.nodes.get(node)
        return st is not None and st.cpus_free + 1e-9 >= cpus and st.memory_free_gb + 1e-9 >= memory_gb

    def fragmentation(self, chain: str | None = None) -> float:
        """Share of nodes that cannot host a whole-node guaranteed job (HiveD, OSDI '20, §5.2).

        A node can host one when no guaranteed job holds any of its GPUs
        (opportunistic work would be preempted). 0 for an empty cluster.
        """
        chains = list(self.chains.values()) if chain is None else [c for c in (self.chains.get(chain),) if c]
        nodes = sum(ch.nodes for ch in chains)
        return sum(ch.busy for ch in chains) / nodes if nodes else 0.0
