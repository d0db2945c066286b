"""Cell exchange inside SchedulerService (real SQLite store, local launcher):
an offer and a request match, the borrower's VC view grows, a gang runs on
the borrowed cell guaranteed, and at the window's end it is downgraded."""
import time
from pathlib import Path

import pytest

from hived.core.engine import RequestError
from hived.service.scheduler import NotAuthorized, NotFound, SchedulerService

SPEC = Path(__file__).parents[1] / "service" / "spec_small.yaml"   # vca, vcb: 2 x 4-GPU sockets each
H = 3600.0



@pytest.fixture(autouse=True)
def server_job_account(request, monkeypatch):
    """The borrower's job runs from a data dir in pytest's root-only temp folder: as the
    server's account (hived.testing.job_account says why)."""
    from hived.testing.job_account import server_account_unless_marked
    server_account_unless_marked(request, monkeypatch)


@pytest.fixture
def svc(tmp_path):
    t = [1000.0]   # the service's clock, moved by the tests (ticks are driven by hand)
    s = SchedulerService(str(SPEC), tmp_path / "data", tick_seconds=0.05, scheme="hived", clock=lambda: t[0])
    s.t = t
    yield s
    s.stop(cancel_jobs=True, timeout=5)
    s.close()


def gpus_total(s, vc):
    return s.vc(vc)["view"]["gpus_total"]


def test_offer_and_request_match_and_the_borrower_runs_on_borrowed_cells(svc):
    gang = {"vc": "vcb", "command": "sleep 30", "pods": 3, "gpus": 4, "job_class": "be"}
    with pytest.raises(RequestError):     # 12 GPUs never fit vcb's own 8
        svc.submit("bob", gang)
    req = svc.exchange.post_request("root", {"vc": "vcb", "cell_type": "T-SOCKET", "count": 1, "duration": H})
    assert req["kind"] == "request" and req["matched"] == []
    assert [r["id"] for r in svc.exchange.requests()["requests"]] == [req["id"]]
    off = svc.exchange.post_offer("ada", {"vc": "vca", "cell_type": "T-SOCKET", "count": 1, "duration": 2 * H})
    (ex,) = off["matched"]
    assert ex["state"] == "active" and ex["legs"] == [
        {"lender": "vca", "borrower": "vcb", "chain": "T-NODE", "level": 2, "count": 1}]
    board = svc.exchange.board()
    assert board["offers"] == board["requests"] == [] and board["exchanges"][0]["id"] == ex["id"]
    assert gpus_total(svc, "vcb") == 12 and gpus_total(svc, "vca") == 4
    assert svc.exchange.ledger()["ledger"]["vca"] == {"contributed": 4.0, "consumed": 0.0, "surplus": 4.0}
    # the gang now fits vcb and runs guaranteed on the borrowed socket
    job = svc.submit("bob", gang)
    svc.tick()
    deadline = time.time() + 15
    while svc.get_job(job["id"])["state"] != "running":
        assert time.time() < deadline, svc.get_job(job["id"])
        svc.tick()
        time.sleep(0.05)
    assert svc.get_job(job["id"])["placement"]["opportunistic"] is False
    assert svc.vc("vcb")["gpus_used"] == 12
    # the window ends while it runs: cells go back, the job keeps its GPUs as opportunistic
    svc.t[0] += H + 1
    svc.tick()
    after = svc.get_job(job["id"])
    assert after["state"] == "running" and after["placement"]["opportunistic"] is True
    assert any("now opportunistic" in h["reason"] for h in after["history"])
    assert svc.exchange.board()["exchanges"][0]["state"] == "returned"
    assert gpus_total(svc, "vcb") == 8 and gpus_total(svc, "vca") == 8
    assert svc.vc("vcb")["gpus_used"] == 0
    svc.eng.alloc.check_invariants()


def test_bad_posts_change_nothing(svc):
    body = {"vc": "vca", "cell_type": "T-SOCKET", "count": 1, "duration": H}
    with pytest.raises(NotAuthorized, match="VC admins only"):
        svc.exchange.post_offer("alice", body)           # a member, not an admin
    with pytest.raises(NotAuthorized):
        svc.exchange.post_offer("bob", body)             # another VC
    with pytest.raises(NotFound):
        svc.exchange.post_offer("root", {**body, "vc": "nope"})
    with pytest.raises(RequestError) as e:
        svc.exchange.post_offer("ada", {**body, "count": 3})   # vca has only 2 sockets
    assert e.value.field == "offer.count" and "at most 2" in e.value.problem
    with pytest.raises(RequestError) as e:
        svc.exchange.post_request("ada", {**body, "cell_type": "T-NOPE"})
    assert e.value.field == "cell_type"
    with pytest.raises(RequestError) as e:
        svc.exchange.post_request("ada", {"vc": "vca", "count": 1, "duration": H})
    assert e.value.field == "cell_type"
    assert svc.exchange.board() == {"offers": [], "requests": [], "exchanges": []}
    assert gpus_total(svc, "vca") == 8


def test_reload_waits_for_active_exchanges(svc):
    svc.exchange.post_offer("ada", {"vc": "vca", "cell_type": "T-SOCKET", "count": 1, "duration": H})
    svc.exchange.post_request("root", {"vc": "vcb", "cell_type": "T-SOCKET", "count": 1, "duration": H})
    with pytest.raises(RequestError, match="pending or active"):
        svc.reload_spec(str(SPEC))
    assert gpus_total(svc, "vcb") == 12
    svc.t[0] += H
    svc.tick()
    assert gpus_total(svc, "vcb") == 8
    ledger = svc.exchange.ledger()["ledger"]
    assert svc.reload_spec(str(SPEC))["ok"] is True
    assert svc.exchange.ledger()["ledger"] == ledger and svc.exchange.board()["exchanges"] == []


def wait_state(s, job_id, state, limit=15.0):
    deadline = time.time() + limit
    while s.get_job(job_id)["state"] != state:
        assert time.time() < deadline, s.get_job(job_id)
        s.tick()
        time.sleep(0.05)


def test_the_lender_queues_a_full_size_gang_during_the_loan_and_it_starts_at_the_return(svc):
    """Lending takes cells for a window, never the right to queue for them."""
    svc.exchange.post_offer("ada", {"vc": "vca", "cell_type": "T-SOCKET", "count": 1, "duration": H})
    svc.exchange.post_request("root", {"vc": "vcb", "cell_type": "T-SOCKET", "count": 1, "duration": H})
    assert gpus_total(svc, "vca") == 4
    gang = {"vc": "vca", "command": "sleep 30", "pods": 2, "gpus": 4, "job_class": "be", "affinity": "soft"}
    job = svc.submit("alice", gang)                        # the spec's 8 GPUs: accepted, waits
    svc.tick()
    queued = svc.get_job(job["id"])
    assert queued["state"] == "queued" and "4 more GPUs are lent by cell exchange" in queued["wait_reason"]
    with pytest.raises(RequestError, match="never fits"):   # more than the spec guarantees: still refused
        svc.submit("alice", {**gang, "pods": 3})
    svc.t[0] += H                                            # the window ends: the socket comes back
    svc.tick()
    assert gpus_total(svc, "vca") == 8
    wait_state(svc, job["id"], "running")
    assert svc.get_job(job["id"])["placement"]["opportunistic"] is False
