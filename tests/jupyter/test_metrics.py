"""``hived/api/metrics``: Prometheus text that follows the service's jobs,
for cluster admins and the server account only."""
from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from .helpers import assert_error, wait_state


async def scrape(jp_fetch, token: str) -> dict:
    """{(sample name, sorted labels): value} of one scrape."""
    r = await jp_fetch("hived", "api", "metrics", headers={"Authorization": f"token {token}"})
    assert r.code == 200
    assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    samples = {}
    for family in text_string_to_metric_families(r.body.decode()):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))))


async def test_metrics_follow_queues_jobs_and_gpu_use(api, service, jp_fetch):
    # vca has two 4-GPU sockets: two jobs take them, the third waits; vcb runs one
    running = []
    for _ in range(2):
        code, job = await api("alice", "POST", "jobs", body={"vc": "vca", "command": "sleep 30", "gpus": 4})
        assert code == 201, job
        running.append(job)
        await wait_state(api, "alice", job["id"], ("running",))
    code, waiting = await api("anna", "POST", "jobs", body={"vc": "vca", "command": "sleep 30", "gpus": 4})
    assert code == 201, waiting
    code, b = await api("bob", "POST", "jobs", body={"vc": "vcb", "command": "sleep 30", "gpus": 4})
    assert code == 201, b
    await wait_state(api, "bob", b["id"], ("running",))

    m = await scrape(jp_fetch, "tok-root")
    assert value(m, "hived_queue_length", vc="vca") == 1
    assert value(m, "hived_queue_length", vc="vcb") == 0
    assert value(m, "hived_jobs", vc="vca", state="running") == 2
    assert value(m, "hived_jobs", vc="vca", state="queued") == 1
    assert value(m, "hived_jobs", vc="vcb", state="running") == 1
    # jobs are TE unless they say otherwise
    assert value(m, "hived_gpus_in_use", vc="vca", job_class="te", cells="guaranteed") == 8
    assert value(m, "hived_gpus_in_use", vc="vcb", job_class="te", cells="guaranteed") == 4
    assert value(m, "hived_gpus_in_use", vc="vcb", job_class="te", cells="opportunistic") == 0
    assert value(m, "hived_gpus_in_use", vc="vcb", job_class="be", cells="guaranteed") == 0
    assert value(m, "hived_gpus_in_use", vc="vcb", job_class="opportunistic", cells="opportunistic") == 0
    assert value(m, "hived_vc_gpus", vc="vca") == 8
    assert value(m, "hived_degraded") == 0 and value(m, "hived_unhealthy_gpus") == 0
    # every submit and every round that moved a job was a commit; rounds run all the time
    assert value(m, "hived_journal_commit_seconds_count") >= 3
    assert value(m, "hived_round_seconds_count") >= 1
    assert value(m, "hived_preemptions_total", vc="vca") == 0      # nothing preempted yet: 0, not missing
    assert value(m, "hived_jobs", vc="vcb", state="failed") == 0
    assert value(m, "hived_jobs_submitted_total", vc="vca") == 3
    assert value(m, "hived_queue_wait_seconds_count", vc="vca") == 2

    await api("alice", "POST", "jobs", running[0]["id"], "cancel")
    await wait_state(api, "anna", waiting["id"], ("running",))
    m = await scrape(jp_fetch, "tok-root")
    assert value(m, "hived_queue_length", vc="vca") == 0
    assert value(m, "hived_jobs", vc="vca", state="cancelled") == 1
    assert value(m, "hived_gpus_in_use", vc="vca", job_class="te", cells="guaranteed") == 8


async def test_opportunistic_use_and_preemptions_per_vc(api, service, jp_fetch):
    # vcb fills its 8 GPUs, then borrows 4 of vca's idle ones as low priority
    for _ in range(2):
        code, own = await api("bob", "POST", "jobs", body={"vc": "vcb", "command": "sleep 30", "gpus": 4})
        assert code == 201, own
        await wait_state(api, "bob", own["id"], ("running",))
    code, lent = await api("bob", "POST", "jobs", body={"vc": "vcb", "command": "sleep 30", "gpus": 4,
                                                        "allow_opportunistic": True, "grace_period": 0})
    assert code == 201, lent
    job = await wait_state(api, "bob", lent["id"], ("running",))
    assert job["placement"]["opportunistic"] is True, job
    m = await scrape(jp_fetch, "tok-root")
    assert value(m, "hived_gpus_in_use", vc="vcb", job_class="te", cells="opportunistic") == 4
    assert value(m, "hived_gpus_in_use", vc="vcb", job_class="te", cells="guaranteed") == 8
    assert value(m, "hived_preemptions_total", vc="vcb") == 0

    # vca claims both its sockets back: the borrowed job is preempted
    for _ in range(2):
        code, back = await api("alice", "POST", "jobs", body={"vc": "vca", "command": "sleep 30", "gpus": 4})
        assert code == 201, back
        await wait_state(api, "alice", back["id"], ("running",))
    m = await scrape(jp_fetch, "tok-root")
    assert value(m, "hived_preemptions_total", vc="vcb") == 1
    assert value(m, "hived_preemptions_total", vc="vca") == 0
    assert value(m, "hived_gpus_in_use", vc="vca", job_class="te", cells="guaranteed") == 8
    assert value(m, "hived_gpus_in_use", vc="vcb", job_class="te", cells="opportunistic") == 0


@pytest.mark.parametrize("user", ["alice", "ada", "bob", "eve"])
async def test_members_and_vc_admins_are_refused(api, service, user):
    code, doc = await api(user, "GET", "metrics")
    assert_error(code, doc, 403, where="metrics", says="cluster admins only")


async def test_no_token_is_refused(api, service):
    code, doc = await api(None, "GET", "metrics")
    assert_error(code, doc, 403, says="token not accepted")


async def test_server_account_may_scrape(jp_fetch, jp_serverapp, service):
    """The server's own token (what a scraper on the service's account holds) is let in."""
    r = await jp_fetch("hived", "api", "metrics")   # pytest-jupyter sends the server token
    assert r.code == 200
    names = {f.name for f in text_string_to_metric_families(r.body.decode())}
    assert {"hived_queue_length", "hived_jobs", "hived_gpus_in_use", "hived_round_seconds",
            "hived_journal_commit_seconds", "hived_preemptions", "hived_degraded"} <= names
