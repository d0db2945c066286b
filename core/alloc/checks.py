"""The allocator's invariants, asserted by the tests after every step and available for audits."""
from __future__ import annotations

from ..cells import Cell
from ..spec import invariant_violation
from .parts import AllocatorParts
from .pod_marks import clean_level, victims_under


def check_invariants(parts: AllocatorParts) -> None:
    """Raise AssertionError naming the first broken invariant."""
    physical = parts.physical
    for chain, roots in parts.tree.roots.items():
        ch = parts.spec.chains[chain]
        free = physical.free_counts(chain)
        problem = invariant_violation(ch, free, physical.reserved[chain], physical.bound_count[chain])
        assert problem is None, f"invariant (2) broken: {problem}"
        for k in range(1, ch.top_level + 1):
            assert physical.bound_count[chain][k] <= physical.reserved[chain][k], f"a_k > r_k at {chain} level {k}"
        for root in roots:
            _check_cell(root, inside_free=False, inside_bound=None)
    for name, vc in parts.vcs.items():
        for (chain, k), cells in vc.bound.items():
            assert len(cells) <= vc.quota.get((chain, k), 0), \
                f"VC {name} binds {len(cells)} {chain} L{k} cells, quota {vc.quota.get((chain, k), 0)}"
    seen_g: dict[str, str] = {}
    for owner, g in parts.grants.items():
        for v in g.victims:
            vg = parts.grants.get(v)
            assert vg is not None and vg.opportunistic, f"{owner} waits for {v}, which holds no opportunistic grant"
        for cid, _ in g.held:
            c = parts.tree.by_id[cid]
            want = c.opportunistic_owner if g.opportunistic else c.guaranteed_owner
            waits = g.opportunistic and c.waiting_owner == owner and want in g.victims
            assert want == owner or waits, f"cell {c.id} of {owner} is held by {want}"
            if not g.opportunistic:
                for leaf in c.leaves():
                    assert leaf.id not in seen_g, f"GPU {leaf.id} bound twice ({seen_g.get(leaf.id)}, {owner})"
                    seen_g[leaf.id] = owner
            else:
                _check_shared(parts, owner, c)


def _check_shared(parts: AllocatorParts, owner: str, c: Cell) -> None:
    """Two opportunistic pods share a GPU only while one (a downgraded job) waits for the other to leave."""
    for other in victims_under(c) - {owner}:
        assert other in parts.grants[owner].victims or owner in parts.grants[other].victims, \
            f"opportunistic {owner} and {other} share GPUs of {c.id}"


def _check_cell(c: Cell, inside_free: bool, inside_bound: str | None) -> None:
    """Counters match, listed cells are maximal (no all-free buddies left unmerged), no overlaps."""
    listed = c.free_list is not None
    if c.free_list is not None:
        assert not inside_free, f"{c.id} is listed inside a listed cell"
        if c.free_list.physical:
            assert inside_bound is None and c.bound_vc is None, f"{c.id} free while bound"
        assert c.guaranteed_gpus == 0 and c.guaranteed_owner is None, f"free cell {c.id} holds a guaranteed pod"
    if c.bound_vc is not None:
        assert inside_bound is None, f"{c.id} bound inside bound cell {inside_bound}"
        inside_bound = c.bound_vc
    if c.guaranteed_owner is not None:
        assert inside_bound is not None, f"guaranteed pod at {c.id} outside any bound cell"
    if c.level == 1:
        assert c.clean_level == clean_level(c), f"clean level of {c.id}"
        exp = ((1 if c.opportunistic_owner else 0) + (1 if c.waiting_owner else 0), 1 if c.guaranteed_owner else 0)
        got = (c.opportunistic_gpus, c.guaranteed_gpus)
        assert got == exp, f"counters of {c.id}: {got} != {exp}"
        return
    kids = c.children
    for k in kids:
        _check_cell(k, inside_free or listed, inside_bound)
    assert c.waiting_owner is None or c.opportunistic_owner is not None, f"{c.waiting_owner} waits on idle {c.id}"
    opp = (c.gpus if c.opportunistic_owner else sum(k.opportunistic_gpus for k in kids)) \
        + (c.gpus if c.waiting_owner else 0)
    gp = c.gpus if c.guaranteed_owner else sum(k.guaranteed_gpus for k in kids)
    assert c.opportunistic_gpus == opp or (c.opportunistic_owner and c.opportunistic_gpus >= c.gpus), \
        f"opportunistic GPU counter of {c.id}: {c.opportunistic_gpus} != {opp}"
    assert c.guaranteed_gpus == gp or (c.guaranteed_owner and c.guaranteed_gpus >= c.gpus), \
        f"guaranteed GPU counter of {c.id}: {c.guaranteed_gpus} != {gp}"
    assert c.bad_gpus == sum(k.bad_gpus for k in kids), f"bad GPU counter of {c.id}"
    want = [0] * c.level
    for k in kids:
        want[k.clean_level] += 1
    assert c.clean_children == want, f"clean-level counts of {c.id}: {c.clean_children} != {want}"
    assert c.clean_level == clean_level(c), f"clean level of {c.id}: {c.clean_level} != {clean_level(c)}"
    phys = sum(1 for k in kids if k.free_list is not None and k.free_list.physical)
    virt = sum(1 for k in kids if k.free_list is not None and not k.free_list.physical)
    assert c.phys_free_children == phys, f"physical free children of {c.id}: {c.phys_free_children} != {phys}"
    assert c.vc_free_children == virt, f"VC free children of {c.id}: {c.vc_free_children} != {virt}"
    if not inside_free and not listed:
        lists = [k.free_list for k in kids]
        first = lists[0]
        assert not (first is not None and all(fl is first for fl in lists) and len(kids) > 1
                    and first.physical and c.bound_vc is None and c.pinned_id is None), \
            f"buddies of {c.id} all free but not merged"
