"""The cell exchange survives a restart: the board, the exchanges in their window and the
GPU-hour ledger are journaled in the real SQLite store and loaded before the jobs."""
import time
from pathlib import Path

import pytest
from service_helpers import FailingCommits

from hived.service.degraded import ServiceDegraded
from hived.service.scheduler import SchedulerService

SPEC = Path(__file__).with_name("spec_small.yaml")   # vca, vcb: 2 x 4-GPU sockets each
H = 3600.0
SOCKET = {"cell_type": "T-SOCKET", "count": 1}


@pytest.fixture
def open_service(tmp_path):
    t = [1000.0]   # the services' clock, moved by the tests (ticks are driven by hand)
    made = []

    def make():
        s = SchedulerService(str(SPEC), tmp_path / "data", tick_seconds=0.05, scheme="hived", clock=lambda: t[0])
        made.append(s)
        return s

    make.t = t
    yield make
    last = made[-1]
    last.stop(cancel_jobs=True, timeout=5)
    for s in made:
        s.close()


def gpus_total(s, vc):
    return s.vc(vc)["view"]["gpus_total"]


def tick_until(s, cond, what, timeout=15.0):
    deadline = time.time() + timeout
    while not cond():
        assert time.time() < deadline, what
        s.tick()
        time.sleep(0.05)


def test_board_exchanges_and_ledger_survive_a_restart(open_service):
    svc = open_service()
    open_offer = svc.exchange.post_offer("ada", {"vc": "vca", **SOCKET, "duration": 4 * H, "start": H})
    svc.exchange.post_request("root", {"vc": "vcb", **SOCKET, "duration": H})
    (ex,) = svc.exchange.post_offer("ada", {"vc": "vca", **SOCKET, "duration": 2 * H})["matched"]
    assert ex["state"] == "active" and gpus_total(svc, "vcb") == 12
    # a gang that fits vcb only with the borrowed socket runs guaranteed
    job = svc.submit("bob", {"vc": "vcb", "command": "sleep 60", "pods": 3, "gpus": 4, "job_class": "be"})["id"]
    tick_until(svc, lambda: svc.get_job(job)["state"] == "running", "the gang runs")
    board, ledger = svc.exchange.board(), svc.exchange.ledger()
    assert ledger["ledger"]["vcb"]["consumed"] == 4.0
    svc.close()   # jobs keep running; the next service adopts them

    again = open_service()
    assert again.exchange.board() == board and again.exchange.ledger() == ledger
    assert [o["id"] for o in again.exchange.offers()["offers"]] == [open_offer["id"]]
    assert gpus_total(again, "vcb") == 12 and gpus_total(again, "vca") == 4
    assert again.recovered["unrestorable"] == [] and job in again.recovered["adopted"]
    restored = again.get_job(job)
    assert restored["state"] == "running" and restored["placement"]["opportunistic"] is False
    again.eng.alloc.check_invariants()
    # the window ends after the restart as it would have: cells back, the gang downgraded
    open_service.t[0] += H + 1
    again.tick()
    assert again.exchange.board()["exchanges"][0]["state"] == "returned"
    assert gpus_total(again, "vcb") == 8 and again.get_job(job)["placement"]["opportunistic"] is True
    # a later post goes on numbering where the journal left off
    nxt = again.exchange.post_request("root", {"vc": "vcb", **SOCKET, "duration": H})
    assert int(nxt["id"][1:]) > int(open_offer["id"][1:])


def test_a_window_that_ended_while_down_is_returned_at_the_first_tick(open_service):
    svc = open_service()
    svc.exchange.post_request("root", {"vc": "vcb", **SOCKET, "duration": H})
    svc.exchange.post_offer("ada", {"vc": "vca", **SOCKET, "duration": H})
    svc.close()
    open_service.t[0] += 2 * H
    again = open_service()
    again.tick()
    (ex,) = again.exchange.board()["exchanges"]
    assert ex["state"] == "returned"
    assert gpus_total(again, "vcb") == 8 and gpus_total(again, "vca") == 8
    assert again.exchange.ledger()["ledger"]["vca"]["contributed"] == 4.0
    again.eng.alloc.check_invariants()


def test_a_post_the_journal_refuses_is_forgotten(open_service):
    svc = open_service()
    svc.exchange.post_request("root", {"vc": "vcb", **SOCKET, "duration": H})
    before = svc.exchange.board(), svc.exchange.ledger()
    disk = FailingCommits(svc.store).fail()
    with pytest.raises(ServiceDegraded):   # it would have matched: nothing of the match stays
        svc.exchange.post_offer("ada", {"vc": "vca", **SOCKET, "duration": H})
    assert (svc.exchange.board(), svc.exchange.ledger()) == before
    assert gpus_total(svc, "vcb") == 8
    disk.heal()
    svc.tick()
    svc.close()
    again = open_service()
    assert (again.exchange.board(), again.exchange.ledger()) == before
