"""The cell-exchange REST routes on a real jupyter-server with hived's
extension: views answer 200, a VC admin's offer and a cluster admin's
request match, and the borrower's VC view grows."""
from __future__ import annotations

from .helpers import assert_error

H = 3600


async def test_views_answer_200(api, service):
    code, doc = await api("alice", "GET", "exchange", "board")
    assert code == 200 and doc == {"offers": [], "requests": [], "exchanges": []}, doc
    code, doc = await api("bob", "GET", "exchange", "ledger")
    assert code == 200 and set(doc["ledger"]) == {"vca", "vcb"}, doc
    assert doc["ledger"]["vca"] == {"contributed": 0.0, "consumed": 0.0, "surplus": 0.0}
    for what in ("offers", "requests"):
        code, doc = await api("alice", "GET", "exchange", what)
        assert code == 200 and doc == {what: []}, doc


async def test_post_offer_and_request_then_the_borrower_grows(api, service):
    offer = {"vc": "vca", "cell_type": "T-SOCKET", "count": 1, "duration": 2 * H}
    code, doc = await api("ada", "POST", "exchange", "offers", body=offer)
    assert code == 201 and doc["kind"] == "offer" and doc["vc"] == "vca" and doc["matched"] == [], doc
    code, doc = await api("bob", "GET", "exchange", "offers")
    assert code == 200 and [o["id"] for o in doc["offers"]] == [doc["offers"][0]["id"]] and \
        doc["offers"][0]["count"] == 1
    # more than vca holds beyond what it already promised: 400 naming the field, board unchanged
    code, doc = await api("ada", "POST", "exchange", "offers", body={**offer, "count": 2})
    assert_error(code, doc, 400, where="offer.count", says="at most 1")
    code, doc = await api("root", "POST", "exchange", "requests",
                          body={"vc": "vcb", "cell_type": "T-SOCKET", "count": 1, "duration": H})
    assert code == 201 and len(doc["matched"]) == 1 and doc["matched"][0]["state"] == "active", doc
    code, doc = await api("bob", "GET", "vcs", "vcb")
    assert code == 200 and doc["view"]["gpus_total"] == 12, doc
    code, doc = await api("ada", "GET", "exchange", "ledger")
    assert code == 200 and doc["ledger"]["vca"]["contributed"] == 4.0 and doc["ledger"]["vcb"]["consumed"] == 4.0
    code, doc = await api("alice", "GET", "exchange", "board")
    assert code == 200 and doc["offers"] == doc["requests"] == [] and len(doc["exchanges"]) == 1, doc
