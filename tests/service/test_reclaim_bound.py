"""The lender, not the borrower, bounds how long a borrowed GPU stays borrowed (real service,
local launcher, real processes).

Team B runs a job opportunistically on team A's idle node, asking a day of grace and
ignoring SIGTERM (``trap '' TERM``). When A's guaranteed job wants the node, the borrower
gets A's ``opportunisticGrace`` (1 s here), then the kill (its whole process tree); A's job
starts after the kill. A cancel of a borrower that is being preempted kills it at once.
The assertions are on order and state; the only clocks are the waits' timeouts, far
shorter than the grace the borrower asked.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from service_helpers import dead_or_zombie, wait_until

SPEC = Path(__file__).with_name("spec_small.yaml")
# prints its pid, then ignores SIGTERM (so does its sleep, which inherits the ignored signal)
STUBBORN = "trap '' TERM; echo pid $$; sleep 600"
DAY = 86400


def _spec(tmp_path, **vca) -> str:
    doc = yaml.safe_load(SPEC.read_text())
    for vc in doc["virtualClusters"].values():   # one whole node each: 8-GPU jobs fit
        vc["virtualCells"] = [{"cellType": "T-NODE", "cellNumber": 1}]
    doc["virtualClusters"]["vca"].update(vca)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


@pytest.fixture
def service(tmp_path):
    from hived.service.scheduler import SchedulerService
    made = []

    def make(**vca):
        svc = SchedulerService(_spec(tmp_path, **vca), tmp_path / "data", tick_seconds=0.05, scheme="hived")
        made.append(svc)
        return svc.start()

    yield make
    for svc in made:
        svc.stop(cancel_jobs=True, timeout=5)
        svc.close()


def _borrow(svc) -> tuple[str, int]:
    """B fills its own node, then runs the stubborn job on A's idle node."""
    own = svc.submit("bob", {"vc": "vcb", "command": "sleep 600", "gpus": 8, "job_class": "be"})["id"]
    wait_until(lambda: svc.get_job(own)["state"] == "running", what="B's own job running")
    opp = svc.submit("bob", {"vc": "vcb", "command": STUBBORN, "gpus": 8, "job_class": "opportunistic",
                             "grace_period": DAY})["id"]
    wait_until(lambda: svc.get_job(opp)["state"] == "running", what="the borrower running")
    line = wait_until(lambda: next((x for x in svc.logs(opp)[0].splitlines() if x.startswith("pid ")), None),
                      what="the borrower's pid")
    return opp, int(line.split()[1])


def _entered(job: dict, state: str, after: float = 0.0) -> float:
    """When ``job`` first entered ``state`` at or after ``after`` (its history, engine clock)."""
    return next(h["time"] for h in job["history"] if h["state"] == state and h["time"] >= after)


def test_a_borrower_ignoring_sigterm_is_killed_at_the_lenders_grace_and_the_owner_starts(service):
    svc = service(opportunisticGrace=1)
    opp, pid = _borrow(svc)
    owner = svc.submit("alice", {"vc": "vca", "command": "echo mine; sleep 600", "gpus": 8, "job_class": "be"})["id"]
    # the owner's job is placed on its cells and waits for the borrower, which is told to stop
    wait_until(lambda: svc.get_job(opp)["state"] == "preempting", what="the borrower preempting")
    pre = next(h for h in svc.get_job(opp)["history"] if h["state"] == "preempting")
    assert "grace 1 s" in pre["reason"] and f"asked {DAY}" in pre["reason"]
    # after the lender's grace the kill is certain: the borrower is gone, the owner's job ran
    wait_until(lambda: svc.get_job(owner)["state"] == "running", timeout=30, what="the owner's job running")
    wait_until(lambda: dead_or_zombie(pid), what="the borrower's shell killed")
    b, o = svc.get_job(opp), svc.get_job(owner)
    assert b["state"] == "queued" and b["preemptions"] == 1   # back in its queue, nothing to run on
    preempted_at = pre["time"]
    left_at = _entered(b, "queued", preempted_at)
    assert preempted_at < left_at <= o["started"]            # killed first, then the owner starts
    wait_until(lambda: "mine" in svc.logs(owner)[0], what="the owner's output")


def test_a_cancel_of_a_preempting_borrower_kills_it_without_waiting_for_its_grace(service):
    svc = service(opportunisticGrace=DAY)    # the lender is patient; its admin is not
    opp, pid = _borrow(svc)
    owner = svc.submit("alice", {"vc": "vca", "command": "echo mine", "gpus": 8, "job_class": "be"})["id"]
    wait_until(lambda: svc.get_job(opp)["state"] == "preempting", what="the borrower preempting")
    assert svc.get_job(owner)["state"] == "placed"
    assert svc.cancel(opp, "root")["state"] == "preempting"  # the KILL goes out; the exit is booked next
    wait_until(lambda: svc.get_job(opp)["state"] == "cancelled", timeout=30, what="the borrower cancelled")
    wait_until(lambda: svc.get_job(owner)["state"] == "succeeded", timeout=30, what="the owner's job done")
    assert dead_or_zombie(pid)
    b, o = svc.get_job(opp), svc.get_job(owner)
    assert b["ended"] <= o["started"]
    assert any("killed at once" in h["reason"] for h in b["history"])


def test_the_borrowers_owner_may_hurry_it_too(service):
    svc = service(opportunisticGrace=DAY)
    opp, pid = _borrow(svc)
    svc.submit("alice", {"vc": "vca", "command": "echo mine", "gpus": 8, "job_class": "be"})
    wait_until(lambda: svc.get_job(opp)["state"] == "preempting", what="the borrower preempting")
    svc.cancel(opp, "bob")
    wait_until(lambda: svc.get_job(opp)["state"] == "cancelled", timeout=30, what="the borrower cancelled")
    wait_until(lambda: dead_or_zombie(pid), what="the borrower's shell killed")
