"""The cell-exchange REST routes on a real jupyter-server with hived's
extension: views answer 200, a VC admin's offer and a cluster admin's
request match, and the borrower's VC view grows."""
from __future__ import annotations

from .helpers import assert_error

H = 3600


async def test_views_answer_200(api, service):
    code, doc = await api("alice", "GET", "exchange", "board")
    assert code == 200 and doc == {"offers": [], "requests": [], "exchanges": []}, doc
    code, doc = await api("ada", "GET", "exchange", "ledger")
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


async def test_the_ledger_is_for_admins(api, service):
    for member in ("alice", "bob"):
        code, doc = await api(member, "GET", "exchange", "ledger")
        assert_error(code, doc, 403, where="exchange/ledger", says="VC admins only")
    for admin in ("ada", "root"):
        code, doc = await api(admin, "GET", "exchange", "ledger")
        assert code == 200 and set(doc["ledger"]) == {"vca", "vcb"}, doc


async def test_unknown_vc_is_404_naming_the_vcs(api, service):
    code, doc = await api("root", "POST", "exchange", "offers",
                          body={"vc": "nope", "cell_type": "T-SOCKET", "count": 1, "duration": H})
    assert_error(code, doc, 404, where="body.vc", says="no VC named 'nope'; VCs: vca, vcb")


async def test_spatial_post_takes_in_return_as_the_docs_say(api, service):
    swap = {"vc": "vca", "cell_type": "T-SOCKET", "count": 1, "duration": H,
            "in_return": {"cell_type": "T-GPU", "count": 4}}
    code, doc = await api("ada", "POST", "exchange", "offers", body=swap)
    assert code == 201 and doc["in_return"] == {"chain": "T-NODE", "level": 1, "count": 4}, doc
    code, doc = await api("ada", "POST", "exchange", "offers", body={**swap, "in_return": {"count": 4}})
    assert_error(code, doc, 400, where="body.in_return", says="cell_type")


async def test_withdraw_a_post(api, service):
    offer = {"vc": "vca", "cell_type": "T-SOCKET", "count": 1, "duration": H}
    code, posted = await api("ada", "POST", "exchange", "offers", body=offer)
    assert code == 201
    pid = posted["id"]
    code, doc = await api("alice", "DELETE", "exchange", "offers", pid)      # a member, not an admin
    assert_error(code, doc, 403, where=f"exchange/offers/{pid}", says="VC admins only")
    code, doc = await api("ada", "DELETE", "exchange", "requests", pid)     # it is an offer
    assert_error(code, doc, 404, where=f"exchange/requests/{pid}", says=f"no open post '{pid}'")
    code, doc = await api("ada", "DELETE", "exchange", "offers", pid)
    assert code == 200 and doc["id"] == pid and doc["withdrawn"] is True, doc
    code, doc = await api("ada", "GET", "exchange", "offers")
    assert doc == {"offers": []}
    code, doc = await api("ada", "DELETE", "exchange", "offers", pid)       # gone: 404, not 500
    assert_error(code, doc, 404, where=f"exchange/offers/{pid}", says="matched, withdrawn or expired")
    # the cells promised are free to offer again
    code, doc = await api("ada", "POST", "exchange", "offers", body={**offer, "count": 2})
    assert code == 201, doc
