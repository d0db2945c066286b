"""The service's Prometheus metrics while the loop runs real jobs: queue length per VC, jobs by
state, GPU use per VC, job class and cells, preemptions, round time and journal commit time."""
import sys

from service_helpers import scrape, value, wait_until

PY = sys.executable


def test_metrics_follow_a_preemption_by_a_te_job(make_service):
    svc = make_service(tick_seconds=60.0)
    bes = [svc.submit("alice", {"vc": "vca", "command": "sleep 60", "gpus": 4, "job_class": "be",
                                "grace_period": 0})["id"] for _ in range(2)]
    wait_until(lambda: all(svc.get_job(j)["state"] == "running" for j in bes), timeout=10, what="BE jobs running")
    m = scrape(svc)
    assert value(m, "hived_gpus_in_use", vc="vca", job_class="be", cells="guaranteed") == 8
    assert value(m, "hived_gpus_in_use", vc="vca", job_class="te", cells="guaranteed") == 0
    assert value(m, "hived_jobs", vc="vca", state="running") == 2
    assert value(m, "hived_queue_length", vc="vca") == 0
    assert value(m, "hived_preemptions_total", vc="vca") == 0      # reads 0, never missing

    te = svc.submit("anna", {"vc": "vca", "command": "sleep 60", "gpus": 4, "job_class": "te"})["id"]
    wait_until(lambda: svc.get_job(te)["state"] == "running", timeout=15, what="the TE job running")
    m = scrape(svc)
    assert value(m, "hived_preemptions_total", vc="vca") == 1
    assert value(m, "hived_gpus_in_use", vc="vca", job_class="te", cells="guaranteed") == 4
    assert value(m, "hived_gpus_in_use", vc="vca", job_class="be", cells="guaranteed") == 4
    assert value(m, "hived_queue_length", vc="vca") == 1           # the preempted BE job waits again
    assert value(m, "hived_jobs", vc="vca", state="queued") == 1
    assert value(m, "hived_jobs", vc="vca", state="running") == 2
    assert value(m, "hived_vc_gpus", vc="vca") == 8
    # every round is timed, and so is every journal commit (submits and rounds alike)
    assert value(m, "hived_round_seconds_count") >= 3 and value(m, "hived_round_seconds_sum") > 0
    assert value(m, "hived_journal_commit_seconds_count") >= 3 + 1
    assert 0 < value(m, "hived_journal_commit_seconds_sum") < 10


def test_round_time_counts_each_round(make_service):
    svc = make_service(start=False)
    before = value(scrape(svc), "hived_round_seconds_count")
    for _ in range(3):
        svc.tick()
    assert value(scrape(svc), "hived_round_seconds_count") == before + 3
