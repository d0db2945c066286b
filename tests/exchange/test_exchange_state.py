"""exchange_state: an arbiter saved to JSON and loaded into a new one over a fresh allocator
is the same arbiter (board, exchanges, ledger, the cells of active windows moved again)."""
import json

import pytest

from hived.core import exchange_state
from hived.core.allocator import Allocator
from hived.core.exchange import ExchangeArbiter, ExchangeState
from hived.core.spec import load_spec

H = 3600.0


def level(alloc, vc, k):
    lv = alloc.vc_view(vc).levels.get(("NODE", k))
    return (lv.total, lv.borrowed, lv.lent) if lv else (0, 0, 0)


def fresh(spec_dict):
    alloc = Allocator(load_spec(spec_dict))
    return alloc, ExchangeArbiter(alloc)


def test_save_and_load_give_back_the_same_arbiter(spec_dict):
    alloc, arb = fresh(spec_dict)
    arb.proxy("big").offer("NODE", 4, 1, 0, 10 * H)
    arb.proxy("small").request("NODE", 4, 1, 0, 5 * H)
    (active,) = arb.match(0)
    later = arb.proxy("big").offer("NODE", 4, 1, 20 * H, 30 * H, now=0)
    doc = json.loads(json.dumps(exchange_state.save(arb)))

    alloc2, arb2 = fresh(spec_dict)
    res = exchange_state.load(arb2, doc)
    assert res.dropped == [] and res.moved_vcs == ["big", "small"]
    assert arb2.board() == arb.board() and arb2.ledger_view() == arb.ledger_view()
    assert [e.to_dict() for e in arb2.exchanges.values()] == [e.to_dict() for e in arb.exchanges.values()]
    assert level(alloc2, "small", 4) == level(alloc, "small", 4) == (1, 1, 0)
    assert level(alloc2, "big", 4) == (0, 0, 1)
    alloc2.check_invariants()
    assert exchange_state.save(arb2) == doc
    # it goes on as the first would: the window ends, the cells go back
    assert arb2.tick(5 * H).ended[0].id == active.id
    assert level(alloc2, "big", 4) == (1, 0, 0) and level(alloc2, "small", 4) == (0, 0, 0)
    assert int(arb2.proxy("small").request("NODE", 4, 1, 6 * H, 7 * H, now=6 * H).id[1:]) > int(later.id[1:])


def test_what_the_spec_no_longer_has_is_dropped_with_the_reason(spec_dict):
    _, arb = fresh(spec_dict)
    arb.proxy("small").offer("NODE", 1, 2, 0, H)
    doc = exchange_state.save(arb)
    other = dict(spec_dict)
    other["virtualClusters"] = {"big": spec_dict["virtualClusters"]["big"]}
    _, arb2 = fresh(other)
    res = exchange_state.load(arb2, doc)
    assert res.dropped == ["offer o1: VC small is not in the spec"] and arb2.board()["offers"] == []


def test_a_document_of_another_version_or_shape_is_refused(spec_dict):
    _, arb = fresh(spec_dict)
    with pytest.raises(ValueError, match="version 7 is not 1"):
        exchange_state.load(arb, {"version": 7})
    with pytest.raises(ValueError, match="malformed document"):
        exchange_state.load(arb, {"version": 1, "offers": []})
    arb.proxy("big").offer("NODE", 4, 1, 0, H)
    with pytest.raises(ValueError, match="new arbiter"):
        exchange_state.load(arb, exchange_state.save(arb))


def test_a_returned_leg_is_not_moved_again(spec_dict):
    """A spatial swap whose return was delayed half-way: only the leg still out moves again."""
    alloc, arb = fresh(spec_dict)
    arb.proxy("big").offer("NODE", 4, 1, 0, H, wants=("NODE", 1, 8))
    arb.proxy("small").request("NODE", 4, 1, 0, H, gives=("NODE", 1, 8))
    (ex,) = arb.match(0)
    assert ex.state is ExchangeState.ACTIVE and len(ex.legs) == 2
    ex.returned_legs.add(1)          # as if the second leg had gone back and the first had not
    g = ex.legs[1]
    alloc.transfer(g.borrower, g.lender, g.cells.chain, g.cells.level, g.cells.count)
    doc = exchange_state.save(arb)
    alloc2, arb2 = fresh(spec_dict)
    exchange_state.load(arb2, doc)
    for vc in ("big", "small"):
        for k in (1, 4):
            assert level(alloc2, vc, k) == level(alloc, vc, k)
    alloc2.check_invariants()
