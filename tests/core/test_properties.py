"""Property tests: random feasible specs, random legal allocate/release sequences.

Checked after every step: invariant (2) and the allocator's own bookkeeping
(``check_invariants``), no GPU held by two guaranteed pods or two
opportunistic pods, and Theorem 1 (sharing safety): a guaranteed request
whose VC view has a free cell of a high enough level always succeeds, whatever
the other VCs and the opportunistic load do (while the chain is healthy).
A refused gang (any shape, ``within_level``, node vetoes, bad hardware)
leaves everything as it found it, apart from cells bound doomed to bad
hardware. Releasing everything restores the initial free lists. A grant
released and restored from its ``to_dict()`` comes back on the same cells;
reloading the same spec changes no grant; nested pinned cells are refused.
"""
import os

import pytest
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st

from hived.core.allocator import Allocator, BindingConflict
from hived.core.spec import SpecError, load_spec

# CI keeps runs short; HIVED_HYPOTHESIS_EXAMPLES=2000 for a deeper search
EXAMPLES = int(os.environ.get("HIVED_HYPOTHESIS_EXAMPLES", "60"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def feasible_specs(draw, nest: bool = False):
    """A spec whose VC cells are a partition of (part of) the physical cells, so it is feasible.

    ``nest=True``: one pinned cell of level > 1 also holds a pinned child (given to another VC).
    """
    nchains = draw(st.integers(1, 2))
    nvcs = draw(st.integers(1, 3))
    vcs = [f"vc{i}" for i in range(nvcs)]
    types, cells = {}, []
    assign: dict[str, dict[str, int]] = {v: {} for v in vcs}
    pinned: dict[str, str] = {}
    nested: list[str] = []
    for c in range(nchains):
        depth = draw(st.integers(1, 3))                    # levels above the GPU
        kids = [draw(st.integers(1, 3)) for _ in range(depth)]
        node = draw(st.integers(2, depth + 1))             # node level, 1-based
        names = [f"C{c}L{k}" for k in range(1, depth + 2)]
        for k in range(2, depth + 2):
            t = {"childCellType": names[k - 2], "childCellNumber": kids[k - 2]}
            if k == node:
                t["isNodeLevel"] = True
            types[names[k - 1]] = t
        top = names[-1]

        def carve(level, raw, kids=kids, top=top, names=names):  # bound now: the loop moves on
            """Give this cell to a VC, leave it free, or split it (its children decide)."""
            choice = draw(st.sampled_from(["vc", "free", "split"] if level > 1 else ["vc", "free"]))
            if choice == "vc":
                vc = draw(st.sampled_from(vcs))
                if draw(st.integers(0, 9)) == 0 or (nest and level > 1 and not nested):  # now and then pinned
                    pid = f"pin{len(pinned)}"
                    raw["pinnedCellId"] = pid
                    pinned[pid] = vc
                    if nest and level > 1 and not nested:
                        inner = f"pin{len(pinned)}"
                        raw["cellChildren"] = [{} for _ in range(kids[level - 2])]
                        raw["cellChildren"][draw(st.integers(0, kids[level - 2] - 1))]["pinnedCellId"] = inner
                        pinned[inner] = draw(st.sampled_from(vcs))
                        nested.append(inner)
                else:
                    key = f"{top}.{names[level - 1]}"
                    assign[vc][key] = assign[vc].get(key, 0) + 1
            elif choice == "split":
                raw["cellChildren"] = [{} for _ in range(kids[level - 2])]
                for ch in raw["cellChildren"]:
                    carve(level - 1, ch)

        for _ in range(draw(st.integers(1, 3))):
            raw = {"cellType": top}
            carve(depth + 1, raw)
            cells.append(raw)
    virtual = {}
    for v in vcs:
        body = {}
        if assign[v]:
            body["virtualCells"] = [{"cellType": t, "cellNumber": n} for t, n in assign[v].items()]
        pins = [{"pinnedCellId": p} for p, owner in pinned.items() if owner == v]
        if pins:
            body["pinnedCells"] = pins
        if body:
            virtual[v] = body
    if not virtual:  # everything left free: give the first top cell to one VC
        virtual["vc0"] = {"virtualCells": [{"cellType": f"{cells[0]['cellType']}.{cells[0]['cellType']}",
                                            "cellNumber": 1}]}
    return {"physicalCluster": {"cellTypes": types, "physicalCells": cells}, "virtualClusters": virtual}


def _snapshot(alloc):
    return {c: [sorted(x.id for x in b.cells()) for b in lists[1:]] for c, lists in alloc.physical.free.items()}


def _check_no_double_binding(alloc):
    held = {False: {}, True: {}}
    for owner, g in alloc.grants().items():
        for pod in g.pods:
            for gpu in pod.gpus:
                key = (pod.node, gpu)
                assert key not in held[g.opportunistic], f"GPU {key} held by {held[g.opportunistic][key]} and {owner}"
                held[g.opportunistic][key] = owner
    # a GPU under both kinds: the opportunistic job must be a named victim of the guaranteed one (leaving)
    grants = alloc.grants()
    for key in set(held[False]) & set(held[True]):
        g, o = held[False][key], held[True][key]
        assert o in grants[g].victims, f"GPU {key} held by {g} and {o}, which is not its victim"


def _legal(alloc, vc, chain, level):
    view = alloc.vc_view(vc)
    return any(n > 0 for (c, k), n in view.free_cells.items() if c == chain and k >= level)


def _chain_healthy(alloc, chain):
    return all(r.bad_gpus == 0 for r in alloc.tree.roots[chain])


def _state(alloc):
    """Free lists (physical and per VC), bindings and grants: what a refused gang must not change."""
    vlists = {(vc, c): [sorted(x.id for x in b.cells()) for b in per[1:]]
              for vc, v in alloc.vcs.items() for c, per in v.free.items()}
    bound = {(vc, k, x.id) for vc, v in alloc.vcs.items() for k, d in v.bound.items() for x in d}
    grants = {o: (g.cells, g.opportunistic, sorted(g.victims)) for o, g in alloc.grants().items()}
    return _snapshot(alloc), vlists, bound, grants


def _check_refusal_changed_nothing(alloc, before):
    after = _state(alloc)
    assert after[3] == before[3], "a refused gang changed the grants"
    new = after[2] - before[2]
    assert before[2] <= after[2], f"a refused gang dropped bindings {sorted(before[2] - after[2])}"
    for vc, _key, cid in new:  # only bad hardware may stay bound (doomed), as the VC must see it
        assert alloc.tree.cell(cid).doomed, f"a refused gang left {cid} bound to {vc}"
    if not new:
        assert after == before, "a refused gang changed the free lists"


def _reload_same_spec(alloc, doc):
    """Reloading the same spec is the identity for every grant (no downgrade, same cells, same victims)."""
    before = {o: (g.cells, g.opportunistic, sorted(g.victims)) for o, g in alloc.grants().items()}
    assert alloc.reconfigure(load_spec(doc)) == []
    assert {o: (g.cells, g.opportunistic, sorted(g.victims)) for o, g in alloc.grants().items()} == before


@SETTINGS
@given(doc=feasible_specs(), data=st.data(), binding=st.sampled_from(["dynamic", "dynamic", "static"]))
def test_random_sequences_keep_sharing_safety(doc, data, binding):
    note(f"spec: {doc}")
    spec = load_spec(doc)
    alloc = Allocator(spec, binding=binding)
    alloc.check_invariants()
    initial = _snapshot(alloc)
    vcs = sorted(spec.vcs)
    nodes = sorted(alloc.tree.nodes)
    n = 0
    for _ in range(data.draw(st.integers(5, 40), label="steps")):
        op = data.draw(st.sampled_from(["guaranteed", "guaranteed", "opportunistic", "release", "health",
                                        "gang", "roundtrip", "reload"]))
        if op == "guaranteed":
            vc = data.draw(st.sampled_from(vcs))
            chain = data.draw(st.sampled_from(sorted(spec.chains)))
            ch = spec.chains[chain]
            level = data.draw(st.integers(1, ch.top_level))
            if level <= ch.node_level and data.draw(st.booleans()):
                gpus = ch.gpus_per_level[level - 1]
                level = ch.level_for_gpus(gpus)  # a pod gets the smallest cell holding its GPUs
                legal = _legal(alloc, vc, chain, level)
                g = alloc.place(f"g{n}", vc, [gpus], chain=chain)
            else:
                legal = _legal(alloc, vc, chain, level)
                g = alloc.allocate(f"g{n}", vc, level, chain=chain)
            if legal and _chain_healthy(alloc, chain):
                assert g is not None, f"legal request of {vc} for {chain} level {level} refused"
            if not legal:
                assert g is None, f"{vc} got {chain} level {level} beyond its cells"
            if g is not None and data.draw(st.booleans(), label="preempt victims now"):
                for v in g.victims:  # the scheduler preempts the opportunistic victims
                    assert alloc.grant_of(v).opportunistic
                    alloc.release(v)
        elif op == "gang":  # several pods, maybe kept within one cell, maybe some nodes vetoed
            vc = data.draw(st.sampled_from(vcs))
            chain = data.draw(st.sampled_from(sorted(spec.chains)))
            ch = spec.chains[chain]
            pods = data.draw(st.lists(st.integers(1, ch.node_gpus), min_size=1, max_size=4), label="pods")
            within = data.draw(st.one_of(st.none(), st.integers(1, ch.top_level)), label="within")
            vetoed = set(data.draw(st.lists(st.sampled_from(nodes), max_size=2), label="vetoed"))
            opp = data.draw(st.booleans(), label="opportunistic")
            before = _state(alloc)
            g = alloc.place(f"g{n}", vc, pods, chain=chain, within_level=within, opportunistic=opp,
                            node_ok=(lambda node, gpus, vetoed=vetoed: node not in vetoed) if vetoed else None)
            if g is None:
                _check_refusal_changed_nothing(alloc, before)
            else:
                assert sorted(g2 for _, g2 in g.held) == sorted(pods) and g.gpus == sum(pods)
                assert not vetoed & {p.node for p in g.pods}
        elif op == "roundtrip":  # a grant released and restored from its dict is the same grant
            owners = sorted(alloc.grants())
            if owners:
                owner = data.draw(st.sampled_from(owners))
                g = alloc.grant_of(owner)
                data_ = g.to_dict()
                was = (g.cells, g.opportunistic)
                alloc.release(owner)
                alloc.restore(data_)
                assert (alloc.grant_of(owner).cells, alloc.grant_of(owner).opportunistic) == was
        elif op == "reload":  # the same spec again, mid-run: the steps after it still check Theorem 1
            _reload_same_spec(alloc, doc)
        elif op == "opportunistic":
            vc = data.draw(st.sampled_from(vcs))
            gpus = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
            alloc.place(f"o{n}", vc, gpus, opportunistic=True)
        elif op == "release":
            owners = sorted(alloc.grants())
            if owners:
                alloc.release(data.draw(st.sampled_from(owners)))
        else:
            node = data.draw(st.sampled_from(nodes))
            ngpus = spec.chains[alloc.tree.node_chain[node]].node_gpus
            gpu = data.draw(st.one_of(st.none(), st.integers(0, ngpus - 1)))
            hit = alloc.set_health(node, gpu, data.draw(st.booleans()))
            assert all(h in alloc.grants() for h in hit)
        n += 1
        alloc.check_invariants()
        _check_no_double_binding(alloc)
    _reload_same_spec(alloc, doc)
    alloc.check_invariants()
    _check_no_double_binding(alloc)
    for owner in list(alloc.grants()):
        alloc.release(owner)
    for node in nodes:
        alloc.set_health(node, None, True)
    alloc.check_invariants()
    assert alloc.free_gpus() == spec.total_gpus
    if binding == "dynamic":
        assert _snapshot(alloc) == initial
        assert all(not d for v in alloc.vcs.values() for d in v.bound.values())


def _nested_pin(doc) -> bool:
    def walk(raw, inside):
        here = inside or "pinnedCellId" in raw
        return any((inside and "pinnedCellId" in raw) or walk(ch, here) for ch in raw.get("cellChildren", [])) \
            or (inside and "pinnedCellId" in raw)
    return any(walk(top, False) for top in doc["physicalCluster"]["physicalCells"])


@settings(max_examples=max(10, EXAMPLES // 2), deadline=None)
@given(doc=feasible_specs(nest=True))
def test_nested_pinned_cells_are_refused(doc):
    assume(_nested_pin(doc))
    with pytest.raises(SpecError, match=r"\.pinnedCellId: pinned cell 'pin\d+' lies inside pinned cell 'pin\d+' "
                                        r"\(at physicalCluster\.physicalCells\[\d+\].*\); pinned cells may not nest$"):
        load_spec(doc)


@settings(max_examples=max(10, EXAMPLES * 2 // 3), deadline=None)
@given(doc=feasible_specs())
def test_static_binding_fills_every_quota(doc):
    spec = load_spec(doc)
    alloc = Allocator(spec, binding="static")
    for vc, vs in spec.vcs.items():
        view = alloc.vc_view(vc)
        for key, n in vs.cells.items():
            pins = sum(1 for p in vs.pinned if (alloc.tree.pinned[p].chain, alloc.tree.pinned[p].level) == key)
            assert view.levels[key].total == n + pins
            assert view.levels[key].used == n + pins
    alloc.check_invariants()


@settings(max_examples=max(10, EXAMPLES * 2 // 3), deadline=None)
@given(doc=feasible_specs(), data=st.data())
def test_each_vc_alone_gets_all_its_cells(doc, data):
    """Sharing safety in its simplest form: a VC can always fill every cell it was promised."""
    spec = load_spec(doc)
    alloc = Allocator(spec)
    order = data.draw(st.permutations(sorted(spec.vcs)))
    for vc in order:
        for (chain, k), count in sorted(spec.vcs[vc].cells.items(), key=lambda x: -x[0][1]):
            for i in range(count):
                assert alloc.allocate(f"{vc}-{chain}-{k}-{i}", vc, k, chain=chain) is not None
        alloc.check_invariants()
    assert alloc.free_gpus() == spec.total_gpus - sum(spec.vc_gpus(v) for v in spec.vcs) + sum(
        alloc.tree.pinned[p].gpus for v in spec.vcs.values() for p in v.pinned)


def _reassigned(doc, data):
    """The same physical cells with the VC cells moved around: names permuted, some cells dropped."""
    vcs = doc["virtualClusters"]
    names = list(vcs)
    perm = data.draw(st.permutations(names), label="vc permutation")
    out = {}
    for old, new in zip(names, perm):
        body = {k: v for k, v in vcs[old].items() if k == "pinnedCells"}
        cells = []
        for vcell in vcs[new].get("virtualCells", []):
            n = data.draw(st.integers(0, vcell["cellNumber"]), label="keep")
            if n:
                cells.append({"cellType": vcell["cellType"], "cellNumber": n})
        if cells:
            body["virtualCells"] = cells
        if body:
            out[old] = body
    if not out:
        return None
    return dict(doc, virtualClusters=out)


@settings(max_examples=max(10, EXAMPLES * 2 // 3), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=feasible_specs(), data=st.data())
def test_reconfigure_loses_nothing(doc, data):
    note(f"spec: {doc}")
    spec = load_spec(doc)
    alloc = Allocator(spec)
    vcs = sorted(spec.vcs)
    for i in range(data.draw(st.integers(1, 25), label="jobs")):
        vc = data.draw(st.sampled_from(vcs))
        gpus = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=2))
        opp = data.draw(st.booleans())
        g = alloc.place(f"j{i}", vc, gpus, opportunistic=opp)
        if g is not None:
            for v in g.victims:
                alloc.release(v)
    node = data.draw(st.sampled_from(sorted(alloc.tree.nodes)))
    alloc.set_health(node, 0, False)
    new_doc = _reassigned(doc, data)
    if new_doc is None:
        return
    before = {o: (g.cells, g.opportunistic) for o, g in alloc.grants().items()}
    gone = {g.vc for g in alloc.grants().values()} - set(new_doc["virtualClusters"])
    if gone:  # a VC that still holds jobs may not disappear: refused, nothing changes
        with pytest.raises(BindingConflict, match=r"reconfiguration refused: VC '.*' is not in the new spec"):
            alloc.reconfigure(load_spec(new_doc))
        assert {o: (g.cells, g.opportunistic) for o, g in alloc.grants().items()} == before
        alloc.check_invariants()
        return
    down = alloc.reconfigure(load_spec(new_doc))
    after = alloc.grants()
    assert {o: g.cells for o, g in after.items()} == {o: c for o, (c, _) in before.items()}
    for o, g in after.items():
        assert g.opportunistic == (before[o][1] or o in down)
    assert set(down) <= {o for o, (_, opp) in before.items() if not opp}
    assert f"{node}/gpu0" in alloc.unhealthy()
    alloc.check_invariants()
    _check_no_double_binding(alloc)


@settings(max_examples=max(20, EXAMPLES * 2), deadline=None)
@given(demands=st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 64), min_size=1),
       weights=st.lists(st.integers(1, 32), min_size=6, max_size=6), capacity=st.integers(0, 256))
def test_weighted_max_min_properties(demands, weights, capacity):
    from hived.core.alloc.opportunistic import weighted_max_min
    w = {vc: float(weights[i]) for i, vc in enumerate(sorted(demands))}
    share = weighted_max_min(demands, w, capacity)
    eps = 1e-6
    assert all(-eps <= share[v] <= demands[v] + eps for v in demands)          # never above demand
    total = sum(share.values())
    assert total <= capacity + eps
    assert abs(total - min(capacity, sum(demands.values()))) < 1e-6           # work-conserving
    # max-min: a VC short of its demand has the highest share per weight of all
    hungry = [v for v in demands if share[v] < demands[v] - eps]
    if hungry:
        level = max(share[v] / w[v] for v in demands)
        assert all(abs(share[v] / w[v] - level) < 1e-6 for v in hungry)
