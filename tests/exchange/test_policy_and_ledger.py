"""Exchange policies (Algorithm 2 of HiveD (earlier version)) and the GPU-hour ledger, without an allocator."""
import pytest

from hived.core.exchange_policy import BalancedExchange, FirstFit, make_policy, qualifies
from hived.core.exchange_types import Cells, Ledger, Post, PostKind

H = 3600.0


def post(pid, kind, vc, count=1, level=4, start=0.0, end=10 * H, back=None, seq=None):
    return Post(pid, PostKind(kind), vc, Cells("NODE", level, count), start, end, back, 0.0,
                seq if seq is not None else int(pid[1:]))


def gh(r, o):
    return r.cells.count * 8 * r.hours


def test_qualifies_rules():
    r = post("r1", "request", "a", 2, start=H, end=5 * H)
    assert qualifies(r, post("o2", "offer", "b", 3))
    assert not qualifies(r, post("o3", "offer", "a", 3))                 # own VC
    assert not qualifies(r, post("o4", "offer", "b", 1))                 # too few
    assert not qualifies(r, post("o5", "offer", "b", 2, level=3))        # other level
    assert not qualifies(r, post("o6", "offer", "b", 2, start=2 * H))    # window not covered
    assert not qualifies(r, post("o7", "offer", "b", 2, end=4 * H))
    # spatial: exact reciprocal only
    sr = post("r8", "request", "a", 1, level=4, back=Cells("NODE", 1, 8))
    assert qualifies(sr, post("o9", "offer", "b", 1, level=4, back=Cells("NODE", 1, 8)))
    assert not qualifies(sr, post("o10", "offer", "b", 1, level=4))
    assert not qualifies(post("r11", "request", "a"), post("o12", "offer", "b", back=Cells("NODE", 1, 8)))


def test_balanced_serves_highest_surplus_first_from_lowest_surplus_lender():
    led = Ledger(["rich", "poor", "l1", "l2"])
    led.record("rich", "x", 100)      # rich contributed 100 GPU-h
    led.record("x", "poor", 50)       # poor consumed 50
    led.record("l2", "x", 30)         # l2 has surplus 30, l1 has 0
    reqs = [post("r1", "request", "poor"), post("r2", "request", "rich")]
    offers = [post("o3", "offer", "l2"), post("o4", "offer", "l1")]
    pairs = BalancedExchange().match(reqs, offers, led, gh)
    # rich (surplus 100) first, gets l1's offer (surplus 0 < 30); poor gets what is left
    assert [(r.id, o.id) for r, o in pairs] == [("r2", "o4"), ("r1", "o3")]
    # first-fit ignores the ledger
    pairs = FirstFit().match(reqs, offers, led, gh)
    assert [(r.id, o.id) for r, o in pairs] == [("r1", "o3"), ("r2", "o4")]


def test_balanced_updates_surplus_within_a_round():
    led = Ledger(["a", "b", "l1", "l2"])
    led.record("a", "z", 1)   # a slightly ahead of b: a's requests all go first (Algorithm 2
    # walks tenants in the order of the round's start), b gets what is left
    reqs = [post("r1", "request", "a"), post("r2", "request", "a", seq=5), post("r3", "request", "b", seq=6)]
    offers = [post("o4", "offer", "l1", 3, seq=4)]
    pairs = BalancedExchange().match(reqs, offers, led, gh)
    assert [r.id for r, _ in pairs] == ["r1", "r2", "r3"]
    assert all(o.id == "o4" for _, o in pairs)
    pairs = BalancedExchange().match(reqs, [post("o4", "offer", "l1", 2, seq=4)], led, gh)
    assert [r.id for r, _ in pairs] == ["r1", "r2"]


def test_ledger_surplus_and_dict():
    led = Ledger(["a"])
    led.record("a", "b", 8.0)
    led.record("b", "a", 3.0)
    assert led.surplus("a") == 5.0 and led.surplus("b") == -5.0
    assert led.to_dict()["a"] == {"contributed": 8.0, "consumed": 3.0, "surplus": 5.0}
    with pytest.raises(ValueError, match="gpu_hours"):
        led.record("a", "b", -1)


def test_make_policy():
    assert make_policy(None).name == "balanced"
    assert make_policy("first_fit").name == "first_fit"
    with pytest.raises(ValueError, match="unknown 'auction'"):
        make_policy("auction")
    with pytest.raises(ValueError, match="no match"):
        make_policy(object())
