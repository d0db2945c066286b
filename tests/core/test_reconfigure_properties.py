"""A randomized checker of reconfiguration with its own bookkeeping (issue 24).

Random place / release / reconfigure / restore / exchange sequences with
opportunistic victims, through the public ``Allocator`` API only. The checker
keeps its own record of which GPUs each owner holds and checks after every step:

- no lost grant: the allocator holds exactly the owners the checker placed and
  did not release, each on the same GPUs (a downgrade changes the kind only);
- no GPU held twice: at most one guaranteed pod per GPU, and two pods share a
  GPU only while one names the other as its victim; ``free_gpus()`` counts
  exactly the GPUs nobody holds (a dropped victim still running is caught here);
- no idle binding under dynamic binding: every bound VC cell holds a guaranteed pod;
- Theorem 1 (sharing safety): every cell free in a VC's view can be allocated,
  and a VC running no guaranteed job can allocate a cell of every level it holds.

Fixed seeds (``derandomize``) and bounded examples keep it well under a minute;
``HIVED_HYPOTHESIS_EXAMPLES`` searches deeper.
"""
import os

from core_helpers import rack_doc
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from hived.core.allocator import Allocator, BindingConflict
from hived.core.spec import load_spec

RACKS = 2
GPUS = RACKS * 16
LEVEL_GPUS = {1: 1, 2: 2, 3: 4, 4: 8, 5: 16}
TYPE_LEVEL = {"GPU": 1, "SW": 2, "SOCK": 3, "NODE": 4, "RACK": 5}
# the specs a reconfiguration moves between: VC cells shrink, grow and change level
SPECS = [
    {"A": {"NODE": 1, "SW": 1}, "B": {"SOCK": 2}, "C": {"NODE": 1}},
    {"A": {"SW": 1}, "B": {"NODE": 1, "SOCK": 1}, "C": {"NODE": 2}},
    {"A": {"NODE": 2}, "B": {"GPU": 2}, "C": {"SOCK": 1}},
    {"A": {"SOCK": 1, "GPU": 1}, "B": {"NODE": 2}},
]
VCS = ["A", "B", "C"]
OWNERS = [f"j{i}" for i in range(10)]
EXAMPLES = int(os.environ.get("HIVED_HYPOTHESIS_EXAMPLES", "60"))


def _quota(k: int) -> dict[str, dict[int, int]]:
    return {vc: {TYPE_LEVEL[t]: n for t, n in SPECS[k].get(vc, {}).items()} for vc in VCS}


class ReconfigureChecker(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.k = 0
        self.alloc = Allocator(load_spec(rack_doc(RACKS, SPECS[0])))
        self.held: dict[str, tuple[str, frozenset, bool]] = {}   # owner -> (VC, GPUs, opportunistic)
        self.quota = _quota(0)
        self.lent = False        # a transfer since the last reconfiguration

    # ------------------------------------------------------------ the checker's own view of a grant
    @staticmethod
    def _gpus(grant) -> frozenset:
        return frozenset((p.node, i) for p in grant.pods for i in p.gpus)

    def _overlapping(self, gpus: frozenset, but: str) -> set[str]:
        return {o for o, (_, g, _) in self.held.items() if o != but and g & gpus}

    # ------------------------------------------------------------ rules
    @rule(owner=st.sampled_from(OWNERS), vc=st.sampled_from(VCS),
          pods=st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=2), opp=st.booleans())
    def place(self, owner, vc, pods, opp):
        if owner in self.held or vc not in self.alloc.vcs:
            return
        g = self.alloc.place(owner, vc, pods, opportunistic=opp)
        if g is None:
            return
        gpus = self._gpus(g)
        assert len(gpus) == sum(pods), f"{owner} asked {pods}, got {sorted(gpus)}"
        others = self._overlapping(gpus, owner)
        if opp:
            assert not others, f"opportunistic {owner} placed on GPUs of {sorted(others)}"
        else:
            assert all(self.held[o][2] for o in others), f"guaranteed {owner} placed on guaranteed {others}"
            assert g.victims == others, f"{owner}: victims {sorted(g.victims)}, on GPUs of {sorted(others)}"
        self.held[owner] = (vc, gpus, opp)

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def release(self, data):
        owner = data.draw(st.sampled_from(sorted(self.held)))
        self.alloc.release(owner)
        del self.held[owner]

    @rule(k=st.integers(0, len(SPECS) - 1))
    def reconfigure(self, k):
        try:
            down = self.alloc.reconfigure(load_spec(rack_doc(RACKS, SPECS[k])))
        except BindingConflict:
            assert any(vc not in SPECS[k] for vc, _, _ in self.held.values()), "refused though every VC stays"
            return
        if k == self.k and not self.lent:
            assert down == [], f"reloading the same spec downgraded {down}"
        for o in down:
            vc, gpus, opp = self.held[o]
            assert not opp, f"{o} downgraded twice"
            self.held[o] = (vc, gpus, True)
        self.k, self.quota, self.lent = k, _quota(k), False

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def restore(self, data):
        """A grant released and restored (as a Grant, or its dict form when it waits for nobody) comes back."""
        owner = data.draw(st.sampled_from(sorted(self.held)))
        g = self.alloc.grant_of(owner)
        waited_for = any(owner in h.victims for h in self.alloc.grants().values() if h.opportunistic)
        stored = g.to_dict() if not g.victims and not g.downgraded and data.draw(st.booleans()) else g
        self.alloc.release(owner)
        try:
            self.alloc.restore(stored)
        except BindingConflict:
            # only a victim on exactly the cell of the downgraded job waiting for it: that job took the cell
            assert waited_for, f"{owner} could not be restored on its own GPUs"
            del self.held[owner]
            return
        back = self.alloc.grant_of(owner)
        assert self._gpus(back) == self.held[owner][1] and back.opportunistic == self.held[owner][2]

    @rule(lender=st.sampled_from(VCS), borrower=st.sampled_from(VCS), level=st.sampled_from([1, 2, 3, 4]))
    def exchange(self, lender, borrower, level):
        if lender == borrower or lender not in self.alloc.vcs or borrower not in self.alloc.vcs:
            return
        try:
            self.alloc.transfer(lender, borrower, "RACK", level, 1)
        except ValueError:
            return
        self.quota[lender][level] -= 1
        self.quota[borrower][level] = self.quota[borrower].get(level, 0) + 1
        self.lent = True

    # ------------------------------------------------------------ after every step
    @invariant()
    def no_lost_grant(self):
        grants = self.alloc.grants()
        assert set(grants) == set(self.held), f"allocator {sorted(grants)}, checker {sorted(self.held)}"
        for o, (vc, gpus, opp) in self.held.items():
            g = grants[o]
            assert (g.vc, self._gpus(g), g.opportunistic) == (vc, gpus, opp), f"{o} moved: {g}"

    @invariant()
    def no_gpu_held_twice(self):
        grants = self.alloc.grants()
        by_gpu: dict = {}
        for o, (_, gpus, _) in self.held.items():
            for x in gpus:
                by_gpu.setdefault(x, []).append(o)
        for x, owners in by_gpu.items():
            assert sum(1 for o in owners if not self.held[o][2]) <= 1, f"GPU {x} under two guaranteed {owners}"
            for i, a in enumerate(owners):
                for b in owners[i + 1:]:
                    assert a in grants[b].victims or b in grants[a].victims, f"GPU {x} held by {a} and {b}"
        assert self.alloc.free_gpus() == GPUS - len(by_gpu), "free GPUs disagree with the GPUs held"

    @invariant()
    def no_idle_binding(self):
        for vc in self.alloc.vcs:
            idle = [b["cell"] for b in self.alloc.vc_view(vc).bound_cells if b["gpus_used"] == 0]
            assert not idle, f"VC {vc} binds idle cells {idle}"

    @invariant()
    def sharing_safety(self):
        self.alloc.check_invariants()
        for vc in sorted(self.alloc.vcs):
            levels = {k for (_, k), n in self.alloc.vc_view(vc).free_cells.items() if n}
            if not any(v == vc and not opp for v, _, opp in self.held.values()):
                levels |= {k for k, n in self.quota[vc].items() if n > 0}    # idle VC: all its cells
            for k in sorted(levels):
                probe = self.alloc.allocate("probe", vc, k, "RACK")
                assert probe is not None, f"Theorem 1: VC {vc} cannot allocate a free level-{k} cell"
                assert len(self._gpus(probe)) == LEVEL_GPUS[k]
                self.alloc.release("probe")


ReconfigureChecker.TestCase.settings = settings(
    max_examples=EXAMPLES, stateful_step_count=30, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow])
TestReconfigureChecker = ReconfigureChecker.TestCase
