"""Disk quota under attack: a VC's jobs try to break the measurement, dodge it, or make it stall
the other teams. The measurement must hold for every VC, run off the service lock, and a
failure in one VC's walk must stay that VC's."""
import os
import sys
import threading

import pytest
from service_helpers import wait_until

from hived.service import disk_walk, quota

PY = sys.executable


def nest(root, depth, name="d" * 200, payload=1 << 20):
    """A folder ``depth`` levels deep with long names (the path is far over PATH_MAX) and
    ``payload`` bytes at the bottom; made through descriptors, as a job can."""
    os.makedirs(root, exist_ok=True)
    fd = os.open(root, os.O_RDONLY)
    for _ in range(depth):
        os.mkdir(name, dir_fd=fd)
        nfd = os.open(name, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = nfd
    f = os.open("blob", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd)
    os.write(f, b"x" * payload)
    os.close(f)
    os.close(fd)


@pytest.fixture(autouse=True)
def measure_every_tick(monkeypatch):
    monkeypatch.setattr(quota, "QUOTA_INTERVAL", 0.0)


def finished_job(svc, user, vc):
    jid = svc.submit(user, {"vc": vc, "command": "true", "gpus": 1})["id"]
    wait_until(lambda: svc.tick() is not None and svc.get_job(jid)["state"] == "succeeded", what=f"{jid} to end")
    return jid


def test_a_folder_nested_1500_deep_is_measured_and_removed(make_service, tmp_path):
    svc = make_service(data_dir=tmp_path / "data", start=False)
    jid = finished_job(svc, "alice", "vca")
    nest(tmp_path / "data" / "jobs" / jid / "work", 1500)
    limit = sys.getrecursionlimit()
    assert limit < 1500    # what made the old walk raise RecursionError
    out = svc.set_disk_quota("ada", "vca", 512 << 10)
    assert out["used_bytes"] is not None and out["used_bytes"] >= 1 << 20, out
    assert svc.disk_quotas()["quotas"]["vca"]["over"] is True and "error" not in svc.disk_quotas()["quotas"]["vca"]
    svc.set_retention("ada", "vca", keep=0)
    done = svc.gc("ada", vc="vca")
    assert done["removed"] == [jid] and done["freed_bytes"] >= 1 << 20
    assert not (tmp_path / "data" / "jobs" / jid).exists()
    assert not [n for n in os.listdir(tmp_path / "data" / "jobs") if n.startswith(".removed-")]
    assert svc.disk_quotas()["quotas"]["vca"]["over"] is False


def test_writing_into_a_finished_folder_of_the_vc_is_counted_and_stopped(make_service, tmp_path):
    svc = make_service(data_dir=tmp_path / "data", start=False)
    old = finished_job(svc, "alice", "vca")
    svc.set_disk_quota("ada", "vca", 1 << 20)
    # the writer's own folder stays empty: it fills the finished job's folder instead
    writer = [PY, "-c", "import os, time\n"
              f"p = os.path.join(os.environ['HIVED_JOB_DIR'], '..', '..', {old!r}, 'work', 'hidden')\n"
              "f = open(p, 'wb'); f.write(b'x' * (3 << 20)); f.flush()\n"
              "while True:\n    time.sleep(0.2); f.write(b'y' * 4096); f.flush()\n"]
    jid = svc.submit("anna", {"vc": "vca", "command": writer, "gpus": 1})["id"]
    wait_until(lambda: svc.tick() is not None and svc.get_job(jid)["state"] == "cancelled", timeout=60,
               what="the job writing into a finished folder to be stopped")
    assert svc.disk_quotas()["quotas"]["vca"]["used_bytes"] >= 3 << 20
    assert any("over its disk quota" in h["reason"] for h in svc.get_job(jid)["history"])


def test_the_walk_holds_no_lock_while_another_team_reads(make_service, tmp_path, monkeypatch):
    svc = make_service(data_dir=tmp_path / "data", start=False)
    big = finished_job(svc, "alice", "vca")
    theirs = finished_job(svc, "bob", "vcb")
    work = tmp_path / "data" / "jobs" / big / "work"
    for i in range(5000):
        (work / f"f{i}").touch()
    seen = []
    real_list = disk_walk.TreeWalk._list

    def listing(self, top, deadline):
        if self.root == str(work.parent) and top.name == "work" and not seen:
            # in the middle of the big walk, from another thread: the lock is free and the other
            # team's request is answered before the walk goes on
            out = {}

            def other_team():
                out["free"] = svc._lock.acquire(blocking=False)
                if out["free"]:
                    svc._lock.release()
                out["job"] = svc.get_job(theirs)

            t = threading.Thread(target=other_team)
            t.start()
            t.join(60)
            seen.append(out)
        return real_list(self, top, deadline)

    svc.set_disk_quota("ada", "vca", 1 << 30)
    monkeypatch.setattr(disk_walk.TreeWalk, "_list", listing)
    svc.quota.meter.start()           # the measuring thread alone, as `hived serve` runs it
    svc.quota.meter.poke()
    wait_until(lambda: seen, what="the walk of the big folder")
    assert seen[0]["free"] is True and seen[0]["job"]["id"] == theirs
    svc.quota.meter.stop()


def test_one_vcs_broken_walk_is_reported_for_it_and_the_others_go_on(make_service, tmp_path, monkeypatch):
    svc = make_service(data_dir=tmp_path / "data", start=False)
    bad = finished_job(svc, "alice", "vca")
    finished_job(svc, "bob", "vcb")
    real_start = disk_walk.TreeWalk._start

    def start(self):
        if f"/{bad}" in self.root:
            raise OSError(5, "Input/output error")   # a disk fault under one VC's folders
        return real_start(self)

    monkeypatch.setattr(disk_walk.TreeWalk, "_start", start)
    svc.set_disk_quota("ada", "vca", 1 << 30)
    svc.set_disk_quota("root", "vcb", 1 << 30)
    svc.tick()
    quotas = svc.disk_quotas()["quotas"]
    assert "Input/output error" in quotas["vca"]["error"] and bad in quotas["vca"]["error"]
    assert quotas["vcb"]["used_bytes"] is not None and "error" not in quotas["vcb"]
    assert svc.gc("root")["vcs"] == ["vca", "vcb"]           # gc goes on too
    assert svc.submit("bob", {"vc": "vcb", "command": "true", "gpus": 1})["state"] == "queued"
