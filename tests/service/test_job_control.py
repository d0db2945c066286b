"""Slurm-style job control through the real service and real processes: --time-limit,
--after, hold/release, requeue, and the nodes view."""
import pytest
from service_helpers import wait_until

from hived.core.engine import RequestError
from hived.service.scheduler import NotAuthorized


def _state(svc, jid):
    return svc.get_job(jid)["state"]


def test_a_job_past_its_time_limit_ends_as_timeout(make_service):
    svc = make_service()
    jid = svc.submit("alice", {"vc": "vca", "command": "sleep 60", "time_limit": 1})["id"]
    wait_until(lambda: _state(svc, jid) == "failed", what="timed out", timeout=30)
    job = svc.get_job(jid)
    assert job["failure_class"] == "timeout" and job["time_limit"] == 1
    assert job["reason"].startswith("time limit 1s reached: timeout: not retried")


def test_after_starts_when_the_first_succeeded_and_fails_when_it_failed(make_service):
    svc = make_service()
    a = svc.submit("alice", {"vc": "vca", "command": "sleep 1"})["id"]
    b = svc.submit("alice", {"vc": "vca", "command": "true", "after": [a]})["id"]
    assert svc.get_job(b)["after"] == [a]
    wait_until(lambda: _state(svc, b) == "succeeded", what="b after a", timeout=30)
    assert svc.get_job(b)["started"] >= svc.get_job(a)["ended"]
    # a finished job keeps where it ran, and the job table shows it
    from hived.service.job_table import job_rows
    done = svc.get_job(a)
    assert done["placement"] is None and done["last_placement"]["pods"][0]["node"] in ("node0", "node1")
    assert job_rows([done])[0][7].startswith(done["last_placement"]["pods"][0]["node"] + ":")
    bad = svc.submit("alice", {"vc": "vca", "command": "exit 3"})["id"]
    c = svc.submit("alice", {"vc": "vca", "command": "true", "after": [bad]})["id"]
    wait_until(lambda: _state(svc, c) == "failed", what="c fails with its dependency", timeout=30)
    assert svc.get_job(c)["failure_class"] == "dependency" and svc.get_job(c)["started"] is None
    with pytest.raises(RequestError, match=f"after: {bad} failed: a job after it would never start"):
        svc.submit("alice", {"vc": "vca", "command": "true", "after": [bad]})
    with pytest.raises(RequestError, match="after: unknown job 'j999'"):
        svc.submit("alice", {"vc": "vca", "command": "true", "after": ["j999"]})
    # another team's job answers as a job that does not exist
    other = svc.submit("bob", {"vc": "vcb", "command": "true"})["id"]
    with pytest.raises(RequestError, match=f"after: unknown job '{other}'"):
        svc.submit("alice", {"vc": "vca", "command": "true", "after": [other]})


def test_hold_release_and_requeue(make_service):
    svc = make_service()
    big = [svc.submit("alice", {"vc": "vca", "command": "sleep 30", "gpus": 4})["id"] for _ in range(2)]
    wait_until(lambda: all(_state(svc, j) == "running" for j in big), what="vca full")
    queued = svc.submit("alice", {"vc": "vca", "command": "true", "gpus": 4})["id"]
    held = svc.control(queued, "hold", "alice")
    assert held["held_by"] == "alice"
    assert svc.get_job(queued)["wait_reason"] == f"held by alice: hived release {queued} lets it start"
    with pytest.raises(NotAuthorized):
        svc.control(queued, "release", "bob")
    with pytest.raises(RequestError, match="action: must be one of hold, release, requeue"):
        svc.control(queued, "suspend", "alice")
    svc.cancel(big[0], "alice")
    wait_until(lambda: _state(svc, big[0]) == "cancelled", what="room")
    assert _state(svc, queued) == "queued"            # held: it does not take the room
    svc.control(queued, "release", "alice")
    wait_until(lambda: _state(svc, queued) == "succeeded", what="released job ran")
    svc.control(big[1], "requeue", "alice")
    wait_until(lambda: svc.get_job(big[1])["attempts"] == 2 and _state(svc, big[1]) == "running",
               what="requeued and running again", timeout=30)
    assert any(h["reason"] == "requeued by alice" for h in svc.get_job(big[1])["history"])


def test_nodes_view_counts_gpus_and_names_holders(make_service):
    from hived.cli.cmd_nodes import rows
    from hived.jupyter_ext.handlers.cluster import with_holders
    svc = make_service()
    jid = svc.submit("alice", {"vc": "vca", "command": "sleep 30", "gpus": 4})["id"]
    wait_until(lambda: _state(svc, jid) == "running", what="running")
    held = {j["id"]: j for j in svc.list_jobs(state="running")}
    table = rows(with_holders(svc.cluster(), held))
    assert [r[0] for r in table] == ["node0", "node1"] and all(r[1] == "T-NODE" and r[2] == 8 for r in table)
    busy = [r for r in table if r[4]]
    assert len(busy) == 1 and busy[0][3:6] == [4, 4, 0] and busy[0][6] == f"{jid} (alice, vca)"
