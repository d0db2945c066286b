"""Retention of finished jobs: per-VC policies set by admins (age and count), applied on
demand and by the timer; rows, memory and folders go, unfinished jobs and their folders
stay, ids never come back, and policies survive a restart."""
import sys
import time

import pytest
from service_helpers import FailingCommits, wait_until

from hived.core.engine import RequestError
from hived.service import retention
from hived.service.degraded import ServiceDegraded
from hived.service.scheduler import NotAuthorized, NotFound

PY = sys.executable


def finished(svc, n):
    """n finished jobs of vca, oldest end first (jobs run side by side: they may end in any order)."""
    ids = [svc.submit("alice", {"vc": "vca", "command": "true", "gpus": 1})["id"] for _ in range(n)]
    wait_until(lambda: svc.tick() is not None and all(svc.get_job(j)["state"] == "succeeded" for j in ids),
               what="jobs to finish")
    return sorted(ids, key=lambda j: (svc.get_job(j)["ended"], int(j[1:])))


def test_policies_are_for_admins_and_checked(make_service):
    svc = make_service(start=False)
    with pytest.raises(NotAuthorized, match="VC admins only: ada, root"):
        svc.set_retention("alice", "vca", keep=1)
    with pytest.raises(NotAuthorized, match="administers no VC"):
        svc.gc("alice")
    with pytest.raises(NotFound):
        svc.set_retention("root", "nope", keep=1)
    with pytest.raises(RequestError, match="keep: must be an integer or null, got 1.5"):
        svc.set_retention("ada", "vca", keep=1.5)
    with pytest.raises(RequestError, match="max_age: must be between 0 and"):
        svc.set_retention("ada", "vca", max_age=-1)
    assert svc.retention()["policies"] == {"vca": None, "vcb": None}
    assert svc.set_retention("ada", "vca", keep=2, max_age=3600)["policy"] == {"max_age": 3600, "keep": 2}
    with pytest.raises(NotAuthorized):
        svc.gc("ada", vc="vcb")
    assert svc.gc("ada")["vcs"] == ["vca"] and svc.gc("root")["vcs"] == ["vca", "vcb"]


def test_gc_keeps_the_newest_and_every_unfinished_job(make_service, tmp_path):
    data = tmp_path / "data"
    svc = make_service(data_dir=data, start=False)
    old = finished(svc, 3)
    running = svc.submit("alice", {"vc": "vca", "gpus": 1, "command": [
        PY, "-c", "import os, time; open(os.path.join(os.environ['HIVED_JOB_DIR'], 'ck'), 'w').write('1');"
                  " time.sleep(60)"]})["id"]
    wait_until(lambda: svc.tick() is not None and (data / "jobs" / running / "work" / "ck").exists(),
               what="the running job's checkpoint")
    other_vc = svc.submit("bob", {"vc": "vcb", "command": "true", "gpus": 1})["id"]
    wait_until(lambda: svc.tick() is not None and svc.get_job(other_vc)["state"] == "succeeded", what="vcb job")
    svc.set_retention("ada", "vca", keep=1)
    plan = svc.gc("ada", dry_run=True)
    assert plan["removed"] == sorted(old[:2], key=lambda j: int(j[1:])) and plan["dry_run"]
    assert plan["freed_bytes"] > 0
    assert all((data / "jobs" / j).exists() for j in old) and svc.store.count_jobs() == 5
    done = svc.gc("ada")
    assert done["removed"] == plan["removed"]
    for j in old[:2]:
        with pytest.raises(NotFound):
            svc.get_job(j)
        assert not (data / "jobs" / j).exists() and j not in {d["job_id"] for d in svc.store.load_jobs()}
    assert {j["id"] for j in svc.list_jobs()} == {old[2], running, other_vc}
    assert (data / "jobs" / running / "work" / "ck").exists() and svc.get_job(running)["state"] == "running"
    svc.close()

    again = make_service(data_dir=data, start=False)
    assert {j["id"] for j in again.list_jobs()} == {old[2], running, other_vc}
    assert again.retention()["policies"]["vca"] == {"max_age": None, "keep": 1}
    new = again.submit("alice", {"vc": "vca", "command": "true", "gpus": 1})["id"]
    assert int(new[1:]) > int(other_vc[1:]) and new not in old


def test_the_timer_applies_max_age(make_service, monkeypatch):
    monkeypatch.setattr(retention, "GC_INTERVAL", 0.0)
    offset = [0.0]
    svc = make_service(start=False, clock=lambda: time.time() + offset[0])
    ids = finished(svc, 2)
    svc.set_retention("root", "vca", max_age=3600)
    svc.tick()
    assert {j["id"] for j in svc.list_jobs()} == set(ids)
    offset[0] = 7200.0
    svc.tick()
    assert svc.list_jobs() == [] and svc.store.count_jobs() == 0


def test_gc_while_degraded_changes_nothing(make_service):
    svc = make_service(start=False)
    ids = finished(svc, 2)
    svc.set_retention("ada", "vca", keep=0)
    disk = FailingCommits(svc.store).fail()
    with pytest.raises(ServiceDegraded):
        svc.gc("ada")
    with pytest.raises(ServiceDegraded):
        svc.set_retention("ada", "vca", keep=5)
    assert {j["id"] for j in svc.list_jobs()} == set(ids) and svc.retention()["policies"]["vca"]["keep"] == 0
    assert all((svc.data_dir / "jobs" / j).exists() for j in ids)
    disk.heal()
    assert svc.gc("ada")["removed"] == sorted(ids, key=lambda j: int(j[1:]))


def hived(*args, env=None):
    import os
    import subprocess
    return subprocess.run([sys.executable, "-m", "hived.cli.main", *args], capture_output=True,
                          text=True, timeout=60, env={**os.environ, **(env or {})})


def test_hived_gc_command(make_service, tmp_path):
    import json
    data = tmp_path / "data"
    svc = make_service(data_dir=data, start=False)
    ids = finished(svc, 3)
    svc.close()
    r = hived("gc", "--data-dir", str(data), "--user", "alice")
    assert r.returncode == 3 and r.stderr.strip() == "hived gc: user 'alice' administers no VC: garbage " \
                                                      "collection is for admins"
    r = hived("gc", "--data-dir", str(data), "--user", "ada", "--keep", "1")
    assert r.returncode == 2 and "--vc: a policy is set for one VC" in r.stderr
    r = hived("gc", "--data-dir", str(data), "--user", "ada", "--vc", "vca", "--max-age", "soon")
    assert r.returncode == 2 and "want a duration like 3600, 90m, 12h or 7d, got 'soon'" in r.stderr
    r = hived("gc", "--data-dir", str(data), "--user", "ada", "--vc", "vca", "--keep", "0", "--dry-run")
    assert r.returncode == 0 and r.stdout.startswith("would remove 3 finished jobs (") and ids[0] in r.stdout
    r = hived("gc", "--data-dir", str(data), "--user", "ada", "--vc", "vca", "--keep", "1", "--max-age", "7d")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "vca: keep the 1 newest, 604800 s after the end"
    assert r.stdout.splitlines()[1].startswith("removed 2 finished jobs (")
    r = hived("gc", "--data-dir", str(data), "--user", "ada", "--json")
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["removed"] == [] and doc["vcs"] == ["vca"]
    again = make_service(data_dir=data, start=False)
    assert [j["id"] for j in again.list_jobs()] == [ids[2]]
    assert not (data / "jobs" / ids[0]).exists() and (data / "jobs" / ids[2]).exists()
