"""The parts of the buddy cell allocator; ``hived.core.allocator.Allocator`` composes them.

- ``buckets``: the free lists (``Buckets``), one per domain and level;
- ``buddy``: Algorithm 1's split, carve and usability tests on free lists;
- ``pod_marks``: pods, clean levels and victims marked on physical cells;
- ``physical``: the physical free lists and the per-level counts of invariant (2);
- ``virtual_cluster``: one VC's private cluster (quota, bound cells, free lists);
- ``binder``: binding VC cells to physical cells and undoing a failed placement;
- ``guaranteed`` and ``opportunistic``: the two placers;
- ``health``, ``restore``, ``reconfigure``, ``loans``: faulty hardware,
  rebuilding stored grants, spec reloads and exchange transfers;
- ``views`` and ``checks``: what an admin reads and the invariants tests assert;
- ``parts``: builds all of them for one spec (a reconfiguration builds a new set).
"""
