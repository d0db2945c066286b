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


def test_a_reloaded_spec_outlives_a_restart_on_the_old_command_line(make_service, tmp_path, caplog):
    """The restart names the spec file it was first started with; the reload stays in force,
    and the log says loudly that the file was not used and how to apply it."""
    svc = make_service(tmp_path / "d")
    four = {"vc": "vca", "command": "sleep 30", "gpus": 4, "job_class": "be"}
    first, second = (svc.submit("alice", four)["id"] for _ in range(2))
    wait_until(lambda: {svc.get_job(j)["state"] for j in (first, second)} == {"running"}, what="running")
    downgraded = svc.reload_spec(VCA_ONE_SOCKET)["downgraded"]   # [second] with cells (the quota scheme differs)
    svc.stop()
    svc.close()
    with caplog.at_level("WARNING", logger="hived.service"):
        again = make_service(tmp_path / "d")          # started with spec_small.yaml, as the first time
    assert again.spec_source == "reload"
    assert again.vc("vca")["gpus_spec"] == 4           # the reloaded spec: one socket
    for j in (first, second):       # as the reload left them
        assert again.get_job(j)["placement"]["opportunistic"] is (j in downgraded)
    warned = [r.getMessage() for r in caplog.records if "NOT used" in r.getMessage()]
    assert len(warned) == 1 and "spec_small.yaml" in warned[0] and "hived spec reload" in warned[0]
    # reloading the file through the one reconfiguration applies it, and that too lasts
    assert again.reload_spec(SPEC_TEXT)["ok"] is True
    again.stop()
    again.close()
    caplog.clear()
    with caplog.at_level("WARNING", logger="hived.service"):
        third = make_service(tmp_path / "d")
    assert third.vc("vca")["gpus_spec"] == 8 and not [r for r in caplog.records if "NOT used" in r.getMessage()]


def test_a_spec_given_at_start_replaces_one_given_at_an_earlier_start(make_service, tmp_path):
    from hived.service.scheduler import SchedulerService
    first = SchedulerService(VCA_ONE_SOCKET, tmp_path / "d", tick_seconds=0.05)
    first.close()
    svc = make_service(tmp_path / "d")                 # no reload in between: the command line applies
    assert svc.spec_source == "start" and svc.vc("vca")["gpus_spec"] == 8
    assert svc.store.get_meta("spec") == SPEC_TEXT


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
