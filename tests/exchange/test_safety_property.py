"""Property: sharing safety holds for every VC through any sequence of exchanges.

Random jobs (guaranteed and opportunistic), releases, offers, requests
(temporal and spatial), matches and window ends run against the real
Allocator. After every step the allocator's invariants hold; at the end (and
mid-way) every VC can still bind *all* the cells its current view says it
has free: its guaranteed capacity, grown or shrunk by exchanges, is really
there whatever the other VCs do.
"""
import copy

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from hived.core.allocator import Allocator
from hived.core.exchange import ExchangeArbiter, ExchangeError
from hived.core.sim.cluster import node_spec
from hived.core.spec import load_spec

H = 3600.0
VCS = ("a", "b", "c")


def spec():
    # 4 nodes (32 GPUs), 28 reserved: a = 1 NODE, b = 8 GPU cells, c = 1 NODE + 1 SOCKET
    d = node_spec(4, {"a": 8, "b": 8, "c": 8})
    d["virtualClusters"]["b"] = {"virtualCells": [{"cellType": "NODE.GPU", "cellNumber": 8}]}
    d["virtualClusters"]["c"] = {"virtualCells": [{"cellType": "NODE", "cellNumber": 1},
                                                  {"cellType": "NODE.SOCKET", "cellNumber": 1}]}
    return load_spec(d)


SPEC = spec()
GPUS = {1: 1, 2: 2, 3: 4, 4: 8}

vc = st.sampled_from(VCS)
lvl = st.sampled_from([1, 3, 4])
LEVELS = {"a": [4], "b": [1], "c": [4, 3]}   # levels each VC holds (a trade lends one of them)
trade = st.tuples(st.just("trade"), vc, vc, st.integers(0, 1), st.integers(1, 2), st.integers(1, 3))
tick = st.tuples(st.just("tick"), st.integers(0, 2))
place = st.tuples(st.just("place"), vc, st.sampled_from([1, 2, 4, 8]), st.booleans())
op = st.one_of(  # trades, ticks and jobs twice as likely: most examples then exchange cells under load
    place, place, trade, trade, tick, tick,
    st.tuples(st.just("release"), st.integers(0, 30)),
    st.tuples(st.just("offer"), vc, lvl, st.integers(1, 2), st.integers(1, 3)),
    st.tuples(st.just("request"), vc, lvl, st.integers(1, 2), st.integers(1, 3)),
    st.tuples(st.just("swap"), vc, vc),
    st.tuples(st.just("fill"), vc),       # the VC binds every free cell of its view (borrowed ones too)
)


def assert_safe(alloc: Allocator) -> None:
    """Every VC binds every free cell of its view (largest first), in a copy of the cluster."""
    for v in VCS:
        trial = copy.deepcopy(alloc)
        free = trial.vc_view(v).free_cells
        n = 0
        for (chain, k), count in sorted(free.items(), key=lambda x: -x[0][1]):
            for _ in range(count):
                n += 1
                g = trial.place(f"safety-{v}-{n}", v, [GPUS[k]], chain=chain, within_level=k)
                assert g is not None, f"VC {v} cannot bind a free level-{k} cell of its view {free}"
                for victim in g.victims:
                    assert trial.grant_of(victim).opportunistic, f"{victim} preempted by a guaranteed job"
        trial.check_invariants()


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, min_size=12, max_size=30))
def test_sharing_safety_holds_under_exchanges(ops):
    alloc = Allocator(SPEC)
    arb = ExchangeArbiter(alloc)
    now, jobs = 0.0, []
    for step, o in enumerate(ops):
        kind = o[0]
        if kind == "place":
            _, v, g, opp = o
            jid = f"j{step}"
            got = alloc.place(jid, v, [g], opportunistic=opp)
            if got is not None:
                jobs.append(jid)
                for victim in got.victims:      # strict priority: only opportunistic work is hit
                    assert alloc.grant_of(victim).opportunistic
                    alloc.release(victim)
        elif kind == "fill":
            free = alloc.vc_view(o[1]).free_cells
            for (chain, k), count in sorted(free.items(), key=lambda x: -x[0][1]):
                for n in range(count):
                    got = alloc.place(f"j{step}-{k}-{n}", o[1], [GPUS[k]], chain=chain, within_level=k)
                    assert got is not None, f"VC {o[1]} cannot bind a free level-{k} cell of its view"
                    jobs.append(got.owner)
                    for victim in got.victims:
                        assert alloc.grant_of(victim).opportunistic
                        alloc.release(victim)
        elif kind == "release" and jobs:
            alloc.release(jobs.pop(o[1] % len(jobs)))
        elif kind in ("offer", "request"):
            _, v, k, count, hours = o
            try:
                arb.post(kind, v, "NODE", k, count, now, now + hours * H, now=now)
            except ExchangeError:
                pass                              # refused posts change nothing
        elif kind == "trade" and o[1] != o[2]:   # a lender and a borrower that fit each other
            _, lender, borrower, k, count, hours = o
            k = LEVELS[lender][k % len(LEVELS[lender])]
            try:
                arb.proxy(lender).offer("NODE", k, count, now, now + hours * H, now=now)
                arb.proxy(borrower).request("NODE", k, count, now, now + hours * H, now=now)
            except ExchangeError:
                pass
        elif kind == "swap" and o[1] != o[2]:
            try:   # spatial: one NODE cell for eight GPU cells
                arb.proxy(o[1]).request("NODE", 4, 1, now, now + H, gives=("NODE", 1, 8), now=now)
                arb.proxy(o[2]).offer("NODE", 4, 1, now, now + H, wants=("NODE", 1, 8), now=now)
            except ExchangeError:
                pass
        elif kind == "tick":
            now += o[1] * H
            arb.match(now)
            res = arb.tick(now)
            for owner in res.downgraded:          # as after reconfiguration: opportunistic now
                assert alloc.grant_of(owner).opportunistic
        alloc.check_invariants()
        if step == len(ops) // 2:
            assert_safe(alloc)
    # views agree with the arbiter's book of who holds what
    for v in VCS:
        for k in (1, 3, 4):
            lv = alloc.vc_view(v).levels.get(("NODE", k))
            assert (lv.total if lv else 0) == arb.holding(v, "NODE", k)
    led = arb.ledger.entries
    assert abs(sum(e.contributed for e in led.values()) - sum(e.consumed for e in led.values())) < 1e-9
    assert_safe(alloc)
    # every window over: each VC is back to exactly its own cells, still safe
    res = arb.tick(now + 10 * H)
    for owner in res.downgraded:
        assert alloc.grant_of(owner).opportunistic
    for e in arb.exchanges.values():
        event(f"exchange {e.state.value}" + (" with downgrades" if e.downgraded else ""))
    for v in VCS:
        view = alloc.vc_view(v)
        for k in (1, 3, 4):
            lv = view.levels.get(("NODE", k))
            assert (lv.total if lv else 0) == SPEC.vcs[v].cells.get(("NODE", k), 0)
            assert not lv or (lv.borrowed, lv.lent) == (0, 0)
    alloc.check_invariants()
    assert_safe(alloc)
