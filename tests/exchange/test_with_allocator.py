"""Exchanges carried out by the real Allocator: views move, windows end, spatial swaps."""
import pytest

from hived.core.allocator import Allocator
from hived.core.exchange import ExchangeArbiter, ExchangeState
from hived.core.spec import load_spec

H = 3600.0


@pytest.fixture
def world(spec_dict):
    alloc = Allocator(load_spec(spec_dict))
    return alloc, ExchangeArbiter(alloc)


def level(alloc, vc, k):
    lv = alloc.vc_view(vc).levels.get(("NODE", k))
    return (lv.total, lv.borrowed, lv.lent) if lv else (0, 0, 0)


def test_temporal_exchange_moves_the_right_to_use_and_returns_it(world):
    alloc, arb = world
    arb.proxy("big").offer("NODE", 4, 1, 0, 10 * H)
    arb.proxy("small").request("NODE", 4, 1, 0, 5 * H)
    (ex,) = arb.match(0)
    assert ex.state is ExchangeState.ACTIVE
    assert level(alloc, "small", 4) == (1, 1, 0) and level(alloc, "big", 4) == (0, 0, 1)
    # the borrower may now run a whole-node guaranteed job; the lender may not
    assert alloc.place("s8", "small", [8], within_level=4) is not None
    assert alloc.place("b1", "big", [1]) is None
    alloc.check_invariants()
    # the window ends with the job still running: downgraded, as reconfiguration does
    res = arb.tick(5 * H)
    assert res.ended == [ex] and ex.state is ExchangeState.RETURNED
    assert res.downgraded == ["s8"] and alloc.grant_of("s8").opportunistic
    assert level(alloc, "big", 4) == (1, 0, 0) and level(alloc, "small", 4) == (0, 0, 0)
    alloc.check_invariants()
    # both VCs fill their own cells again: the now-opportunistic job is preempted
    assert alloc.place("b8", "big", [8], within_level=4) is not None
    victims = set()
    for n in range(8):
        g = alloc.place(f"s1-{n}", "small", [1])
        assert g is not None
        victims |= g.victims
    assert victims == {"s8"}
    alloc.check_invariants()
    assert arb.ledger_view()["big"] == {"contributed": 40.0, "consumed": 0.0, "surplus": 40.0}


def test_idle_return_downgrades_nobody(world):
    alloc, arb = world
    arb.proxy("big").offer("NODE", 4, 1, 0, H)
    arb.proxy("small").request("NODE", 4, 1, 0, H)
    arb.match(0)
    alloc.place("s", "small", [8], within_level=4)
    alloc.release("s")
    res = arb.tick(H)
    assert res.downgraded == [] and level(alloc, "big", 4) == (1, 0, 0)


def test_lender_busy_at_window_start_fails_and_ledger_is_undone(world):
    alloc, arb = world
    arb.proxy("big").offer("NODE", 4, 1, H, 3 * H)
    arb.proxy("small").request("NODE", 4, 1, H, 2 * H)
    (ex,) = arb.match(0)
    assert ex.state is ExchangeState.PENDING and arb.ledger_view()["big"]["contributed"] == 8.0
    assert alloc.place("b8", "big", [8], within_level=4) is not None   # lender uses its cell meanwhile
    res = arb.tick(H)
    assert res.failed == [ex] and "allocator refused" in ex.reason and "in use" in ex.reason
    assert arb.ledger_view()["big"]["contributed"] == 0.0 and arb.ledger_view()["small"]["consumed"] == 0.0
    assert level(alloc, "small", 4) == (0, 0, 0)
    alloc.check_invariants()


def test_spatial_exchange_one_8gpu_cell_for_eight_1gpu_cells(world):
    alloc, arb = world
    # small needs a whole node for a gang; big runs many 1-GPU jobs
    arb.proxy("small").request("NODE", 4, 1, 0, 2 * H, gives=("NODE", 1, 8))
    arb.proxy("big").offer("NODE", 4, 1, 0, 2 * H, wants=("NODE", 1, 8))
    (ex,) = arb.match(0)
    assert ex.spatial and ex.state is ExchangeState.ACTIVE
    assert level(alloc, "small", 4)[0] == 1 and level(alloc, "small", 1)[0] == 0
    assert level(alloc, "big", 4)[0] == 0 and level(alloc, "big", 1)[0] == 8
    assert alloc.place("gang", "small", [8], within_level=4) is not None
    for n in range(8):
        assert alloc.place(f"b{n}", "big", [1]) is not None
    assert alloc.place("b9", "big", [1]) is None
    alloc.check_invariants()
    led = arb.ledger_view()
    assert led["big"]["contributed"] == led["small"]["contributed"] == 16.0
    assert led["big"]["surplus"] == led["small"]["surplus"] == 0.0
    res = arb.tick(2 * H)
    assert sorted(res.downgraded) == sorted(["gang"] + [f"b{n}" for n in range(8)])
    assert level(alloc, "small", 1)[0] == 8 and level(alloc, "big", 4)[0] == 1
    alloc.check_invariants()


def test_return_downgrades_only_the_jobs_in_the_returned_cell():
    from hived.core.sim.cluster import node_spec
    d = node_spec(3, {"a": 16, "b": 8})       # a owns two NODE cells, b one
    alloc = Allocator(load_spec(d))
    arb = ExchangeArbiter(alloc)
    arb.proxy("b").offer("NODE", 4, 1, 0, H)
    arb.proxy("a").request("NODE", 4, 1, 0, H)
    arb.match(0)
    # a now holds three NODE cells: fill one, half-fill another, leave the third idle
    assert alloc.place("full", "a", [8], within_level=4) is not None
    assert alloc.place("half1", "a", [2]) is not None
    assert alloc.place("half2", "a", [2]) is not None
    res = arb.tick(H)
    assert res.downgraded == []                  # an idle cell could go back
    arb.proxy("b").offer("NODE", 4, 1, H, 2 * H)
    arb.proxy("a").request("NODE", 4, 1, H, 2 * H)
    arb.match(H)
    assert alloc.place("x", "a", [8], within_level=4) is not None   # no idle cell now: one must go back
    res = arb.tick(2 * H)
    # the least used bound cell (the two 2-GPU jobs') loses its guarantee; the full ones keep theirs
    assert sorted(res.downgraded) == ["half1", "half2"]
    assert all(alloc.grant_of(o).opportunistic for o in res.downgraded)
    assert not alloc.grant_of("full").opportunistic and not alloc.grant_of("x").opportunistic
    assert level(alloc, "a", 4) == (2, 0, 0) and level(alloc, "b", 4) == (1, 0, 0)
    alloc.check_invariants()


def test_engine_places_a_gang_on_borrowed_capacity(spec_dict):
    from hived.core.engine import Engine
    from hived.core.jobs import DecisionKind, JobClass, JobRequest, PodGroup
    alloc = Allocator(load_spec(spec_dict))
    eng = Engine(alloc, preemption_policy="none")
    arb = ExchangeArbiter(eng.alloc)
    gang = JobRequest(user="u", vc="small", job_class=JobClass.BE, groups=[PodGroup(1, 8)])
    with pytest.raises(Exception, match="(?i)never|cannot|larger|fit"):
        eng.validate(gang)        # small holds only 1-GPU cells: an 8-GPU pod never fits its VC
    arb.proxy("big").offer("NODE", 4, 1, 0, 10 * H)
    arb.proxy("small").request("NODE", 4, 1, 0, 10 * H)
    arb.match(0)
    eng.validate(gang)            # with the borrowed NODE cell it does
    jid = eng.submit(gang, 1.0)
    starts = [d for d in eng.step(1.0) if d.kind is DecisionKind.START]
    assert [d.job_id for d in starts] == [jid]
    assert not eng.job(jid).opportunistic and alloc.vc_view("small").gpus_used == 8


def test_return_waits_while_a_job_still_waits_for_its_victim(world):
    alloc, arb = world
    arb.proxy("big").offer("NODE", 4, 1, 0, H)
    arb.proxy("small").request("NODE", 4, 1, 0, H)
    (ex,) = arb.match(0)
    for n in range(2):                           # opportunistic work on both nodes
        assert alloc.place(f"opp{n}", "big", [8], opportunistic=True) is not None
    g = alloc.place("gang", "small", [8], within_level=4)
    assert g is not None and len(g.victims) == 1    # placed over a victim that has not left yet
    (victim,) = g.victims
    res = arb.tick(H)
    # the gang cannot become opportunistic on GPUs another opportunistic job still holds
    assert res.delayed == [ex] and ex.state is ExchangeState.ACTIVE and "return delayed" in ex.reason
    assert not alloc.grant_of("gang").opportunistic
    alloc.check_invariants()
    alloc.release(victim)                        # the victim's processes are gone
    res = arb.tick(H + 60)
    assert res.ended == [ex] and res.downgraded == ["gang"] and ex.state is ExchangeState.RETURNED
    assert level(alloc, "big", 4) == (1, 0, 0)
    alloc.check_invariants()


def test_give_back_never_leaves_a_downgraded_job_on_a_victims_gpus(world):
    alloc, arb = world
    # opportunistic work of "big" on sockets of both nodes (no cell holds a whole pod's node)
    assert alloc.place("o1", "big", [4, 4], opportunistic=True).cells == ["n0000/0", "n0000/1"]
    assert alloc.place("o2", "big", [4, 4], opportunistic=True).cells == ["n0001/0", "n0001/1"]
    arb.proxy("big").offer("NODE", 4, 1, 0, H)
    arb.proxy("small").request("NODE", 4, 1, 0, H)
    arb.match(0)
    g = alloc.place("s8", "small", [8], within_level=4)
    assert g.cells == ["n0000"] and g.victims == {"o1"}      # o1 is being preempted, not gone yet
    res = arb.tick(H)
    # s8 cannot become opportunistic on GPUs o1 still holds: it stays guaranteed and the return waits
    assert res.downgraded == [] and [e.id for e in res.delayed] == ["x1"]
    s8 = alloc.grant_of("s8")
    assert not s8.opportunistic and s8.victims == {"o1"}
    alloc.check_invariants()
    alloc.release("o1")                                       # the victim leaves
    res = arb.tick(H + 60)
    assert res.downgraded == ["s8"] and [e.id for e in res.ended] == ["x1"]
    assert alloc.grant_of("s8").opportunistic and level(alloc, "big", 4) == (1, 0, 0)
    held = {}
    for owner, gr in alloc.grants().items():
        for pod in gr.pods:
            for gpu in pod.gpus:
                assert (pod.node, gpu) not in held, f"{pod.node}/{gpu}: {held.get((pod.node, gpu))} and {owner}"
                held[(pod.node, gpu)] = owner
    alloc.check_invariants()
