"""Everything one allocator holds for one spec, built together (and replaced together by a reconfiguration)."""
from __future__ import annotations

from ..cells import CellTree
from ..grant import Grant
from ..spec import ClusterSpec
from .binder import Binder
from .guaranteed import GuaranteedPlacer
from .health import Health
from .loans import LoanBook
from .opportunistic import OpportunisticPlacer
from .physical import PhysicalCluster
from .restore import Restorer
from .virtual_cluster import VirtualCluster


class AllocatorParts:
    def __init__(self, spec: ClusterSpec, binding: str, *, bind_static: bool = True):
        self.spec = spec
        self.tree = CellTree(spec)
        self.grants: dict[str, Grant] = {}
        self.physical = PhysicalCluster(spec, self.tree)
        self.vcs = {name: VirtualCluster(spec, self.tree, name) for name in spec.vcs}
        self.binder = Binder(self.physical, self.vcs, binding)
        self.loans = LoanBook(spec, self.vcs)
        self.guaranteed = GuaranteedPlacer(spec, self.tree, self.binder)
        self.opportunistic = OpportunisticPlacer(spec, self.tree, self.vcs, self.grants)
        self.health = Health(self.tree, self.binder)
        self.restorer = Restorer(self.tree, self.binder, self.grants)
        self.binder.bind_pinned()
        if binding == "static" and bind_static:
            self.binder.bind_all_static()
        self.binder.fresh.clear()   # bindings made while building are not a placement's to undo
