"""Demo: the demo cluster's VC views, then the sharing anomaly of HiveD's Figure 2 and its absence.

Run: ``.venv/bin/python examples/demo/fragmentation.py`` (``make demo`` calls ``main()``).

Figure 2 of the earlier HiveD paper (§2): tenants A and B share two nodes of 4
GPUs (two PCIe switches of 2 GPUs each) and each has a quota of 4 GPUs.
  t1: A runs four 1-GPU jobs a1-a4 on GPUs 1-4;
  t2: a2 and a4 finish; A's 2-GPU job a5 wants two GPUs under one switch;
  t3: B's 4-GPU job b1 wants one whole node.
Under a plain GPU quota, a5 lands on GPUs 5-6 (node 2) and b1 cannot run
although B has not used any of its 4 GPUs: A's fragmentation spread to B.
Under hived each tenant owns a node-level cell: a5 does not fit A's cell
(A's own fragmentation), so it may only run opportunistically on B's idle
node, and b1 gets its node at once, preempting the opportunistic a5.
"""
from __future__ import annotations

import sys
from pathlib import Path

from hived.core.allocator import Allocator
from hived.core.quota import QuotaAllocator
from hived.core.spec import load_spec

CLUSTER = Path(__file__).resolve().parents[1] / "cluster.yaml"

FIGURE2 = {
    "physicalCluster": {
        "cellTypes": {"SWITCH": {"childCellType": "GPU", "childCellNumber": 2},
                      "NODE": {"childCellType": "SWITCH", "childCellNumber": 2, "isNodeLevel": True}},
        "physicalCells": [{"cellType": "NODE", "cellAddress": "node-1"},
                          {"cellType": "NODE", "cellAddress": "node-2"}],
    },
    "virtualClusters": {"A": {"virtualCells": [{"cellType": "NODE.NODE", "cellNumber": 1}]},
                        "B": {"virtualCells": [{"cellType": "NODE.NODE", "cellNumber": 1}]}},
}


def _gpus(grant) -> str:
    """GPUs numbered as in the paper: node-1 holds GPUs 1-4, node-2 GPUs 5-8."""
    out = []
    for pod in grant.pods:
        base = 0 if pod.node == "node-1" else 4
        out += [str(base + g + 1) for g in pod.gpus]
    return "GPU" + ("s " if len(out) > 1 else " ") + ",".join(out)


def replay(scheme: str) -> bool:
    """Replay Figure 2 under ``scheme`` ("quota" or "hived"); True if b1 got its node."""
    spec = load_spec(FIGURE2)
    alloc = QuotaAllocator(spec) if scheme == "quota" else Allocator(spec)
    print(f"\n--- {scheme}: " + ("each tenant holds 4 GPU tokens, placement packs for affinity"
                                 if scheme == "quota" else "each tenant holds one node-level cell (4 GPUs)"))
    for i in range(1, 5):
        g = alloc.place(f"a{i}", "A", [1])
        print(f"t1  a{i} (A, 1 GPU)  -> {_gpus(g)}")
    alloc.release("a2")
    alloc.release("a4")
    print("t2  a2 and a4 finish")
    g = alloc.place("a5", "A", [2])
    if g is not None:
        print(f"t2  a5 (A, 2 GPUs)  -> {_gpus(g)} (within A's quota, better affinity than GPUs 2 and 4)")
    else:
        print("t2  a5 (A, 2 GPUs)  -> does not fit A's own cell (GPUs 2 and 4 are under different switches)")
        g = alloc.place("a5", "A", [2], opportunistic=True)
        print(f"    a5 runs opportunistically (low priority) on {_gpus(g)}, B's idle cell")
    b = alloc.place("b1", "B", [4])
    if b is None:
        print("t3  b1 (B, 4 GPUs)  -> CANNOT RUN: B uses 0 of its 4 GPUs, yet no node has 4 free GPUs")
        print("    sharing anomaly: B would be better off with its own 4-GPU node")
        return False
    print(f"t3  b1 (B, 4 GPUs)  -> {_gpus(b)}" + (f", preempting {', '.join(sorted(b.victims))} (opportunistic)"
                                                  if b.victims else ""))
    print("    no anomaly: B gets the node it was promised, whatever A does")
    return True


def main() -> int:
    spec = load_spec(CLUSTER)
    alloc = Allocator(spec)
    print(f"Demo cluster {CLUSTER.name}: {spec.total_gpus} GPUs in {len(spec.chains)} chains, {len(spec.vcs)} VCs")
    for vc in spec.vcs:
        print(alloc.vc_view(vc).render())
    print("\nHiveD Figure 2: two tenants, two 4-GPU nodes (two PCIe switches of 2 GPUs each)")
    quota_ok = replay("quota")
    hived_ok = replay("hived")
    print(f"\nresult: b1 runs under quota: {'yes' if quota_ok else 'no'}; under hived: {'yes' if hived_ok else 'no'}")
    return 0 if (hived_ok and not quota_ok) else 1


if __name__ == "__main__":
    sys.exit(main())
