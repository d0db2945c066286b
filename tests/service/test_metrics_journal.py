"""Metrics an operator can graph: counters come from the journal (they survive gc and
restarts), job counts read 0 rather than vanish, cell exchange has its series."""
import sys

import pytest
from service_helpers import scrape, value, wait_until

PY = sys.executable
H = 3600.0


def test_counters_survive_gc_and_restart_and_counts_read_zero(make_service, tmp_path):
    svc = make_service(data_dir=tmp_path / "d")
    bes = [svc.submit("alice", {"vc": "vca", "command": "sleep 60", "gpus": 4, "job_class": "be",
                                "grace_period": 0})["id"] for _ in range(2)]
    wait_until(lambda: all(svc.get_job(j)["state"] == "running" for j in bes), timeout=15, what="BE jobs running")
    te = svc.submit("anna", {"vc": "vca", "command": "true", "gpus": 4, "job_class": "te"})["id"]
    wait_until(lambda: svc.get_job(te)["state"] == "succeeded", timeout=20, what="the TE job done")
    for j in bes:
        svc.cancel(j, "root")
    wait_until(lambda: all(svc.get_job(j)["state"] == "cancelled" for j in bes), timeout=15, what="cancelled")
    m = scrape(svc)
    assert value(m, "hived_preemptions_total", vc="vca") == 1
    assert value(m, "hived_jobs_submitted_total", vc="vca") == 3
    assert value(m, "hived_queue_wait_seconds_count", vc="vca") >= 3    # every start, the requeued one too
    svc.set_retention("root", "vca", keep=0)
    assert sorted(svc.gc("root", "vca")["removed"]) == sorted([te, *bes])
    m = scrape(svc)
    assert value(m, "hived_jobs", vc="vca", state="cancelled") == 0       # reads 0 after gc, not missing
    assert value(m, "hived_jobs", vc="vca", state="succeeded") == 0
    assert value(m, "hived_preemptions_total", vc="vca") == 1             # counters never go back
    assert value(m, "hived_jobs_submitted_total", vc="vca") == 3
    svc.stop(timeout=5)
    svc.close()
    again = make_service(data_dir=tmp_path / "d")
    m = scrape(again)
    assert value(m, "hived_preemptions_total", vc="vca") == 1             # from the journal
    assert value(m, "hived_jobs_submitted_total", vc="vca") == 3
    assert value(m, "hived_jobs_submitted_total", vc="vcb") == 0


def test_exchange_series(make_service):
    svc = make_service()
    if svc.exchange.arb is None:     # the quota scheme trades no cells
        return
    svc.exchange.post_offer("ada", {"vc": "vca", "cell_type": "T-SOCKET", "count": 1, "duration": H})
    m = scrape(svc)
    assert value(m, "hived_exchange_posts", kind="offer") == 1
    assert value(m, "hived_exchange_posts", kind="request") == 0
    svc.exchange.post_request("root", {"vc": "vcb", "cell_type": "T-SOCKET", "count": 1, "duration": H})
    m = scrape(svc)
    assert value(m, "hived_exchanges", state="active") == 1
    assert value(m, "hived_exchange_gpus", vc="vca", direction="lent") == 4
    assert value(m, "hived_exchange_gpus", vc="vcb", direction="borrowed") == 4
    # 4 GPUs x 1 h, less the moment between the two posts (the window is their overlap)
    assert value(m, "hived_exchange_gpu_hours", vc="vca", side="contributed") == pytest.approx(4.0, abs=0.01)
    assert value(m, "hived_exchange_gpu_hours", vc="vcb", side="consumed") == pytest.approx(4.0, abs=0.01)
    assert value(m, "hived_vc_gpus", vc="vca") == 4 and value(m, "hived_vc_gpus", vc="vcb") == 12
    assert value(m, "hived_vc_spec_gpus", vc="vca") == 8
    assert svc.vc("vca")["gpus_total"] == 4 and svc.vc("vca")["gpus_lent"] == 4
    assert svc.vc("vca")["view"]["gpus_total"] == svc.vc("vca")["gpus_total"]
