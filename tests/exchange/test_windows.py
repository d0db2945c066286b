"""Windows people can use: posts of the same length made a moment apart match, and every
time in a refusal reads as a date in the local zone, never as an epoch float."""
import re

import pytest

from hived.core.exchange import ExchangeArbiter, ExchangeError
from hived.core.exchange_policy import MATCH_TOLERANCE
from hived.core.spec import load_spec
from hived.core.timefmt import clock

NOW = 1_795_820_000.0   # a Unix time, as the service's clock gives


@pytest.fixture
def arb(spec_dict):
    return ExchangeArbiter(None, load_spec(spec_dict))


def body(vc, duration=240, **kw):
    return {"vc": vc, "cell_type": "NODE", "count": 1, "duration": duration, **kw}


@pytest.mark.parametrize("first,second", [("offer", "request"), ("request", "offer")])
def test_same_length_posts_a_moment_apart_match_over_their_overlap(arb, first, second):
    vcs = {"offer": "big", "request": "small"}
    arb.post_payload(first, body(vcs[first]), NOW)
    arb.post_payload(second, body(vcs[second]), NOW + 0.005)    # the second admin, 5 ms later
    (ex,) = arb.match(NOW + 0.005, start=False)
    assert (ex.start, ex.end) == (NOW + 0.005, NOW + 240)
    assert arb.board() == {"offers": [], "requests": []}
    # the ledger books the overlap both sides share: 8 GPUs x (240 - 0.005) s
    assert arb.ledger_view()["big"]["contributed"] == round(8 * (240 - 0.005) / 3600, 6)


def test_windows_further_apart_than_the_tolerance_do_not_match(arb):
    arb.post_payload("request", body("small"), NOW)
    arb.post_payload("offer", body("big"), NOW + MATCH_TOLERANCE + 1)
    assert arb.match(NOW + MATCH_TOLERANCE + 1, start=False) == []
    assert len(arb.board()["offers"]) == len(arb.board()["requests"]) == 1


def test_a_shorter_offer_within_the_tolerance_serves_a_clipped_window(arb):
    arb.post_payload("request", body("small", duration=3600), NOW)
    arb.post_payload("offer", body("big", duration=3600 - 30), NOW)
    (ex,) = arb.match(NOW, start=False)
    assert (ex.start, ex.end) == (NOW, NOW + 3570)


def test_refusals_show_local_dates_with_the_zone(arb):
    arb.post_payload("offer", body("big"), NOW)
    with pytest.raises(ExchangeError) as e:
        arb.post_payload("offer", body("big"), NOW)         # big has one NODE, already promised
    text = str(e.value)
    assert clock(NOW) in text and clock(NOW + 240) in text
    assert not re.search(r"\d\.\d+e\+\d\d", text), text
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S+", clock(NOW))
