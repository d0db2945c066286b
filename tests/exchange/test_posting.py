"""Posting rules of the arbiter (no cells move here, so no allocator is involved)."""
import math

import pytest

from hived.core.exchange import ExchangeArbiter, ExchangeError
from hived.core.spec import load_spec

H = 3600.0


@pytest.fixture
def arb(spec_dict):
    return ExchangeArbiter(None, load_spec(spec_dict))


def test_offer_limited_by_quota_and_overlapping_promises(arb):
    big = arb.proxy("big")
    big.offer("NODE", 4, 1, 0, 10 * H)
    with pytest.raises(ExchangeError, match=r"offer.count: VC big can lend at most 0 more NODE level-4"):
        big.offer("NODE", 4, 1, 5 * H, 20 * H)
    big.offer("NODE", 4, 1, 10 * H, 20 * H)            # the next window is free again
    small = arb.proxy("small")
    with pytest.raises(ExchangeError, match="can lend at most 0"):
        small.offer("NODE", 4, 1, 0, H)                  # holds no level-4 cell
    small.offer("NODE", 1, 8, 0, H)
    assert len(arb.board()["offers"]) == 3


@pytest.mark.parametrize("args, where", [
    (("NOPE", 4, 1, 0, H), "offer.chain"),
    (("NODE", 5, 1, 0, H), "offer.level"),
    (("NODE", 0, 1, 0, H), "offer.level"),
    (("NODE", 4, 0, 0, H), "offer.count"),
    (("NODE", 4, 1.5, 0, H), "offer.count"),
    (("NODE", 4, 1, H, H), "end"),
    (("NODE", 4, 1, 0, math.inf), "end"),
    (("NODE", 4, 1, float("nan"), H), "start"),
])
def test_bad_offers_name_the_field(arb, args, where):
    with pytest.raises(ExchangeError) as e:
        arb.proxy("big").offer(*args)
    assert e.value.where == where
    assert arb.board() == {"offers": [], "requests": []}


def test_windows_already_over_and_unknown_vc(arb):
    with pytest.raises(ExchangeError, match="already over"):
        arb.proxy("big").offer("NODE", 4, 1, 0, H, now=2 * H)
    with pytest.raises(ExchangeError, match="unknown VC 'nobody'"):
        arb.proxy("nobody")
    with pytest.raises(ExchangeError, match="kind"):
        arb.post("swap", "big", "NODE", 4, 1, 0, H)


def test_spatial_posts_must_trade_equal_gpus_of_other_levels(arb):
    small = arb.proxy("small")
    with pytest.raises(ExchangeError, match="trades equal GPUs"):
        small.request("NODE", 4, 1, 0, H, gives=("NODE", 1, 4))
    with pytest.raises(ExchangeError, match="different levels"):
        small.request("NODE", 1, 2, 0, H, gives=("NODE", 1, 2))
    with pytest.raises(ExchangeError, match="in_return.count: VC small can lend at most 8"):
        small.request("NODE", 4, 2, 0, H, gives=("NODE", 1, 16))
    small.request("NODE", 4, 1, 0, H, gives=("NODE", 1, 8))
    # the 8 GPUs it pays with are promised now
    with pytest.raises(ExchangeError, match="at most 0"):
        small.offer("NODE", 1, 1, 0, H)


def test_withdraw_only_own_posts_and_expiry(arb):
    p = arb.proxy("big").offer("NODE", 4, 1, 0, H)
    with pytest.raises(ExchangeError, match="belongs to VC big"):
        arb.proxy("small").withdraw(p.id)
    assert arb.proxy("big").withdraw(p.id) is p
    with pytest.raises(ExchangeError, match="no open post"):
        arb.proxy("big").withdraw(p.id)
    q = arb.proxy("small").request("NODE", 4, 1, 0, H)
    res = arb.tick(H)
    assert res.expired == [q] and arb.board()["requests"] == []


def test_cell_type_names_and_rest_payload(arb):
    assert arb.resolve_cell_type("NODE") == ("NODE", 4)
    assert arb.resolve_cell_type("NODE.GPU") == ("NODE", 1)
    assert arb.resolve_cell_type("SOCKET") == ("NODE", 3)
    with pytest.raises(ExchangeError, match="unknown cell type 'RACK'"):
        arb.resolve_cell_type("RACK")
    with pytest.raises(ExchangeError, match="not in chain"):
        arb.resolve_cell_type("NODE.RACK")
    p = arb.post_payload("offer", {"vc": "big", "cell_type": "NODE", "count": 1, "duration": 600, "start": 60},
                         now=1000)
    assert (p.start, p.end, p.cells.level) == (1060, 1660, 4)
    with pytest.raises(ExchangeError, match="duration: is required"):
        arb.post_payload("offer", {"vc": "big", "cell_type": "NODE", "count": 1}, now=0)
    with pytest.raises(ExchangeError, match="start: must be a number"):
        arb.post_payload("offer", {"vc": "big", "cell_type": "NODE", "count": 1, "duration": 5, "start": -1}, 0)
    r = arb.post_payload("request", {"vc": "small", "cell_type": "NODE", "count": 1, "duration": 600,
                                     "in_return": {"cell_type": "GPU", "count": 8}}, now=0)
    assert r.in_return.level == 1 and r.to_dict()["in_return"]["count"] == 8


def test_dry_match_books_ledger_without_moving_cells(arb):
    arb.proxy("big").offer("NODE", 4, 1, 0, 10 * H)
    arb.proxy("small").request("NODE", 4, 1, 0, 5 * H)
    made = arb.match(0, start=False)
    assert len(made) == 1 and made[0].state.value == "pending"
    assert arb.ledger_view()["big"]["contributed"] == 40.0        # 8 GPUs x 5 h
    assert arb.ledger_view()["small"]["surplus"] == -40.0
    assert arb.board() == {"offers": [], "requests": []}
