"""AlloX chosen in the spec, without Python: on a live `hived serve`, a VC with
``queuePolicy: allox`` starts the job with the shorter ``--estimate`` first, a VC
without it (FIFO) starts them in submission order; job views echo the estimate."""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from hived.service.client import HivedClient
from hived.testing.served import EXE, served_hived

SPEC = Path(__file__).parents[1] / "service" / "spec_small.yaml"   # vca, vcb: two 4-GPU sockets each


@pytest.fixture
def served(tmp_path):
    doc = yaml.safe_load(SPEC.read_text())
    doc["virtualClusters"]["vca"]["queuePolicy"] = "allox"
    with served_hived(doc, tmp_path) as env:
        def cli(*argv):
            p = subprocess.run(EXE + list(argv), env=env, capture_output=True, text=True, timeout=60)
            assert p.returncode == 0, p.stderr
            return p.stdout.strip()
        cli.client = lambda user: HivedClient(data_dir=env["HIVED_DATA_DIR"], user=user)
        yield cli


def submit(cli, vc, user, *extra):
    return json.loads(cli("submit", "--vc", vc, "--user", user, "--gpus", "4", "--json", *extra,
                          "--", "sleep", "600"))["id"]


def wait_running(client, job_id, limit=30.0):
    deadline = time.time() + limit
    while client.job(job_id)["state"] != "running":
        assert time.time() < deadline, json.dumps(client.job(job_id))
        time.sleep(0.1)


def test_allox_vc_starts_short_first_and_fifo_vc_in_submit_order(served):
    jobs = {}
    for vc, user in (("vca", "alice"), ("vcb", "bob")):
        client = served.client(user)
        blockers = [submit(served, vc, user) for _ in range(2)]   # both sockets busy
        for b in blockers:
            wait_running(client, b)
        long = submit(served, vc, user, "--estimate", "36000")
        short = submit(served, vc, user, "--estimate", "5")
        jobs[vc] = (client, blockers, long, short)
    for client, blockers, long, short in jobs.values():
        assert client.job(long)["estimate"] == 36000 and client.job(short)["estimate"] == 5
        client.cancel(blockers[0])                       # one socket frees
    a_client, _, a_long, a_short = jobs["vca"]
    b_client, _, b_long, b_short = jobs["vcb"]
    wait_running(a_client, a_short)
    wait_running(b_client, b_long)
    assert a_client.job(a_long)["state"] == "queued"     # AlloX: the 5 s job went first
    assert b_client.job(b_short)["state"] == "queued"    # FIFO: submission order
    est = a_client.job(a_long)["estimated"]
    assert est["value"] == 36000 and est["source"] == "hint"


def test_a_job_without_an_estimate_shows_the_policys_default(served):
    client = served.client("alice")
    job = submit(served, "vca", "alice")
    est = client.job(job)["estimated"]
    assert client.job(job)["estimate"] is None and est["source"] == "default" and est["value"] == 3600
    assert "  run time none given; estimated 3600 s (default, confidence 0.05)" in served("status", job, "--user",
                                                                                         "alice").splitlines()


def test_an_unknown_queue_policy_is_refused_naming_the_field(tmp_path):
    doc = yaml.safe_load(SPEC.read_text())
    doc["virtualClusters"]["vcb"]["queuePolicy"] = "sjf"
    spec = tmp_path / "cluster.yaml"
    spec.write_text(yaml.safe_dump(doc))
    p = subprocess.run(EXE + ["spec", "check", str(spec)], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "virtualClusters.vcb.queuePolicy: unknown queue policy 'sjf'; known: allox, fifo" in p.stderr + p.stdout
