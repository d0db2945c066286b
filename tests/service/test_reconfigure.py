"""The one reconfiguration (``SchedulerService.reload_spec``) in the local service:
what it does to running jobs, what it journals and what it answers."""
from pathlib import Path

import pytest
from service_helpers import wait_until

from hived.core.engine import RequestError

SPEC_TEXT = Path(__file__).with_name("spec_small.yaml").read_text()
# vca keeps one socket of its two: of two 4-GPU jobs in vca, one fits it only as opportunistic
VCA_ONE_SOCKET = SPEC_TEXT.replace("        cellNumber: 2\n    users: [alice, anna]",
                                   "        cellNumber: 1\n    users: [alice, anna]")


def test_guaranteed_job_that_no_longer_fits_its_vc_is_downgraded_and_journaled(make_service, tmp_path):
    assert VCA_ONE_SOCKET != SPEC_TEXT
    svc = make_service(tmp_path / "d")
    four = {"vc": "vca", "command": "sleep 30", "gpus": 4, "job_class": "be"}
    first, second = (svc.submit("alice", four)["id"] for _ in range(2))
    small = svc.submit("bob", {**four, "vc": "vcb"})["id"]
    wait_until(lambda: {svc.get_job(j)["state"] for j in (first, second, small)} == {"running"}, what="running")
    out = svc.reload_spec(VCA_ONE_SOCKET)
    assert out == {"ok": True, "vcs": ["vca", "vcb"], "chains": ["T-NODE"], "downgraded": [second]}
    job = svc.get_job(second)
    assert job["state"] == "running" and job["placement"]["opportunistic"] is True
    assert "downgraded to opportunistic" in job["history"][-1]["reason"]
    assert not any(svc.get_job(j)["placement"]["opportunistic"] for j in (first, small))
    svc.eng.alloc.check_invariants()
    # journaled: the spec and the downgrade survive a restart
    assert svc.store.get_meta("spec") == VCA_ONE_SOCKET
    svc.stop()
    svc.close()
    from hived.service.scheduler import SchedulerService
    again = SchedulerService(VCA_ONE_SOCKET, tmp_path / "d", tick_seconds=0.05).start()
    try:
        assert again.get_job(second)["placement"]["opportunistic"] is True
        assert again.get_job(first)["placement"]["opportunistic"] is False
    finally:
        again.stop(cancel_jobs=True, timeout=5)
        again.close()


def test_a_job_that_fits_not_even_as_opportunistic_refuses_the_spec(make_service):
    svc = make_service()
    job = svc.submit("alice", {"vc": "vca", "command": "sleep 30", "gpus": 4, "job_class": "be"})["id"]
    wait_until(lambda: svc.get_job(job)["state"] == "running", what="running")
    with pytest.raises(RequestError) as err:
        svc.reload_spec(SPEC_TEXT.replace("  vca:\n", "  vcx:\n"))     # its VC is gone
    assert err.value.field == "spec" and err.value.problem.startswith(f"job {job} (running) does not fit")
    assert err.value.problem.endswith("nothing changed")
    assert sorted(svc.vcs()["vcs"]) == ["vca", "vcb"] and svc.get_job(job)["state"] == "running"
    assert svc.get_job(job)["placement"]["opportunistic"] is False


def test_a_reload_the_journal_refuses_leaves_the_allocator_as_it_was(make_service):
    from service_helpers import FailingCommits

    from hived.service.degraded import ServiceDegraded
    svc = make_service()
    four = {"vc": "vca", "command": "sleep 30", "gpus": 4, "job_class": "be"}
    jobs = [svc.submit("alice", four)["id"] for _ in range(2)]
    wait_until(lambda: {svc.get_job(j)["state"] for j in jobs} == {"running"}, what="running")
    alloc = svc.eng.alloc
    before = {o: (g.cells, g.opportunistic) for o, g in alloc.grants().items()}
    disk = FailingCommits(svc.store).fail()
    with pytest.raises(ServiceDegraded):
        svc.reload_spec(VCA_ONE_SOCKET)                    # the allocator reconfigured, the journal refused
    assert svc.eng.alloc is alloc and alloc.spec is svc.spec and alloc.spec.vcs["vca"].cells != {}
    assert {o: (g.cells, g.opportunistic) for o, g in alloc.grants().items()} == before   # nobody downgraded
    assert alloc.vc_view("vca").levels[("T-NODE", 2)].total == 2                              # the old spec
    alloc.check_invariants()
    disk.heal()
    out = svc.reload_spec(VCA_ONE_SOCKET)                   # the journal takes it now
    assert out["downgraded"] == [jobs[1]] and svc.eng.alloc.grant_of(jobs[1]).opportunistic


def test_the_service_reconfigures_through_the_allocator(make_service, monkeypatch):
    """reload_spec has no loop of its own: it is the allocator's reconfigure, journaled."""
    from hived.core.allocator import Allocator
    svc = make_service()
    calls = []
    real = Allocator.reconfigure

    def spy(self, new_spec):
        calls.append(self)
        return real(self, new_spec)

    monkeypatch.setattr(Allocator, "reconfigure", spy)
    svc.reload_spec(VCA_ONE_SOCKET)
    assert calls == [svc.eng.alloc]
