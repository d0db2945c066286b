"""kill -9 a real service process at random instants while jobs are submitted
and run; after each restart nothing is lost or duplicated, no GPU is bound
twice and every holding job keeps the binding it had."""
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hived.core.jobs import HOLDING as HOLDING_STATES
from hived.core.jobs import state_values

HOLDING = state_values(HOLDING_STATES)
HERE = Path(__file__).parent
SPEC = HERE / "spec_small.yaml"


def read_store(data_dir: Path):
    if not (data_dir / "hived.db").exists():
        return {}, {}
    con = sqlite3.connect(data_dir / "hived.db")
    if not con.execute("SELECT name FROM sqlite_master WHERE name='jobs'").fetchone():
        return {}, {}     # killed before its first migration committed
    # a job's request is stored apart (job_requests), once, in its submission's transaction
    split = con.execute("SELECT name FROM sqlite_master WHERE name='job_requests'").fetchone()
    jobs = {}
    for j, r, q in con.execute("SELECT j.job_id, j.record, q.request FROM jobs AS j "
                               "LEFT JOIN job_requests AS q ON q.seq = j.seq" if split else
                               "SELECT job_id, record, NULL FROM jobs"):
        jobs[j] = json.loads(r)
        if q is not None:
            jobs[j]["request"] = json.loads(q)
    con.close()
    # the cells each job holds, as its record says (the record is the binding)
    bindings = {j: r["placement"] for j, r in jobs.items() if r["state"] in HOLDING}
    return jobs, bindings


def gpus_of(placement):
    return [(p["node"], g) for p in placement["pods"] for g in p["gpus"]]


def check_no_double_binding(holders: dict) -> None:
    seen = {}
    for jid, placement in holders.items():
        if placement.get("opportunistic"):
            continue
        for gpu in gpus_of(placement):
            assert gpu not in seen, f"GPU {gpu} bound to {seen[gpu]} and {jid}"
            seen[gpu] = jid


def acked(data_dir: Path) -> dict:
    out = {}
    p = data_dir / "acked.log"
    if p.exists():
        for line in p.read_text().splitlines():
            jid, name = line.split()
            assert jid not in out, f"job id {jid} acknowledged twice"
            out[jid] = name
    return out


def run_crashes(tmp_path: Path, n_jobs: int, kills: int, seed: int, finish_timeout: float,
                synchronous: str = "FULL", submitters: int = 1):
    rng = random.Random(seed)
    data = tmp_path / "data"
    data.mkdir()
    cmd = [sys.executable, str(HERE / "crash_service.py"), str(SPEC), str(data), str(n_jobs)]
    env = dict(os.environ, PYTHONUNBUFFERED="1", HIVED_TEST_SYNC=synchronous, HIVED_TEST_SUBMITTERS=str(submitters))
    recovered_checked = 0
    totals = {"adopted": 0, "lost": 0, "relaunch": 0}
    for k in range(kills + 1):
        before = read_store(data)
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        dump = data / f"recovered-{proc.pid}.json"
        early = k < kills and rng.random() < 0.2     # sometimes kill it while it starts up
        deadline = time.time() + 30
        while not early and not dump.exists() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        if k < kills:
            time.sleep(rng.uniform(0.0, 0.3) if early else rng.uniform(0.1, 1.5))
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            out = proc.communicate(timeout=30)[0].decode()
        else:
            out = proc.communicate(timeout=finish_timeout)[0].decode()
            assert proc.returncode == 0, out[-3000:]
        assert "Traceback" not in out, out[-3000:]
        if dump.exists():
            # what the restarted process rebuilt = what the killed one had stored
            rec = json.loads(dump.read_text())
            assert set(rec["jobs"]) == set(before[0]), "restart lost or invented jobs"
            lost = set(rec["summary"]["lost"])
            for key in totals:
                totals[key] += len(rec["summary"][key])
            for j, placement in before[1].items():
                if j in lost:
                    continue
                got = rec["jobs"][j]["placement"]
                assert got is not None and gpus_of(got) == gpus_of(placement), f"{j} re-bound elsewhere"
            recovered_checked += 1
        jobs, bindings = read_store(data)
        # every acknowledged job is stored, under the name it was given
        for jid, name in acked(data).items():
            assert jid in jobs and jobs[jid]["request"]["name"] == name
        names = [r["request"]["name"] for r in jobs.values()]
        assert len(names) == len(set(names)), "a job was stored twice"
        # every job holding cells names them, and nothing is bound twice
        assert all(p is not None for p in bindings.values())
        check_no_double_binding(bindings)
    jobs, bindings = read_store(data)
    assert len(jobs) == n_jobs and not bindings
    assert sorted(r["request"]["name"] for r in jobs.values()) == [f"job-{i:04d}" for i in range(n_jobs)]
    states = {r["state"] for r in jobs.values()}
    assert states == {"succeeded"}, {j: (r["state"], r["failure_class"]) for j, r in jobs.items()
                                     if r["state"] != "succeeded"}
    assert recovered_checked >= kills // 2
    return jobs, totals


def test_kill9_during_submission_and_runs(tmp_path):
    """The quick version (for -m 'not slow'); the 500-job one below is the proof.
    This one runs the store with synchronous=NORMAL: a killed process loses
    nothing in WAL mode without an fsync per commit (a power cut would)."""
    jobs, totals = run_crashes(tmp_path, n_jobs=30, kills=2, seed=1, finish_timeout=60, synchronous="NORMAL")
    assert len(jobs) == 30


def test_kill9_with_concurrent_submitters_loses_nothing_answered(tmp_path):
    """Group commit (synchronous=FULL): four threads submit at once and share fsyncs; every
    submission that was answered is there after each kill -9, none twice."""
    jobs, totals = run_crashes(tmp_path, n_jobs=60, kills=3, seed=5, finish_timeout=90, submitters=4)
    assert len(jobs) == 60


@pytest.mark.slow
def test_kill9_500_jobs(tmp_path):
    jobs, totals = run_crashes(tmp_path, n_jobs=500, kills=8, seed=7, finish_timeout=120)
    assert sum(r["attempts"] for r in jobs.values()) >= 500
    # the kills hit running work: restarts adopted live processes
    assert totals["adopted"] > 0, totals
    print("recovery totals over the restarts:", totals,
          "preempted runs:", sum(r["preemptions"] for r in jobs.values()))
