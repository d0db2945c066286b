"""Per-VC disk quota for job folders: a VC over its quota gets its writing jobs stopped and
its submissions refused; other VCs go on; removing finished jobs ends it; quotas are for
admins and survive a restart."""
import re
import sys

import pytest
from service_helpers import wait_until

from hived.core.engine import RequestError
from hived.service import quota
from hived.service.scheduler import NotAuthorized

PY = sys.executable
# writes 3 MiB into $HIVED_JOB_DIR, then more every 0.2 s, until stopped
WRITER = [PY, "-c", "import os, time\n"
          "f = open(os.path.join(os.environ['HIVED_JOB_DIR'], 'blob'), 'wb')\n"
          "f.write(b'x' * (3 << 20)); f.flush()\n"
          "while True:\n    time.sleep(0.2); f.write(b'y' * 4096); f.flush()\n"]


@pytest.fixture(autouse=True)
def measure_every_tick(monkeypatch):
    monkeypatch.setattr(quota, "QUOTA_INTERVAL", 0.0)


def test_quotas_are_for_admins_and_checked(make_service):
    svc = make_service(start=False)
    with pytest.raises(NotAuthorized, match="VC admins only"):
        svc.set_disk_quota("alice", "vca", 1 << 20)
    with pytest.raises(RequestError, match="max_bytes: must be an integer or null, got 'lots'"):
        svc.set_disk_quota("ada", "vca", "lots")
    assert svc.set_disk_quota("ada", "vca", 1 << 20) == {"vc": "vca", "max_bytes": 1 << 20, "used_bytes": 0}
    assert svc.disk_quotas()["quotas"]["vcb"] == {"max_bytes": None, "used_bytes": None, "over": False}


def test_a_vc_over_its_quota_is_stopped_and_refused_and_others_go_on(make_service, tmp_path):
    data = tmp_path / "data"
    svc = make_service(data_dir=data, start=False)
    svc.set_disk_quota("ada", "vca", 1 << 20)
    writer = svc.submit("alice", {"vc": "vca", "command": WRITER, "gpus": 1})["id"]
    wait_until(lambda: svc.tick() is not None and svc.get_job(writer)["state"] == "cancelled",
               what="the writing job to be stopped")
    reasons = [h["reason"] for h in svc.get_job(writer)["history"]]
    assert any(re.match(r"stopped: VC 'vca' job folders hold [\d.]+ MiB, over its disk quota of 1\.0 MiB, "
                        r"and this job was writing$", r) for r in reasons), reasons
    assert svc.disk_quotas()["quotas"]["vca"]["over"] is True
    with pytest.raises(RequestError, match=r"vc: VC 'vca' job folders hold [\d.]+ MiB, over its disk quota of "
                                           r"1\.0 MiB: remove finished jobs \(hived gc\)"):
        svc.submit("alice", {"vc": "vca", "command": "true", "gpus": 1})
    other = svc.submit("bob", {"vc": "vcb", "command": "true", "gpus": 1})["id"]
    wait_until(lambda: svc.tick() is not None and svc.get_job(other)["state"] == "succeeded", what="vcb job")
    svc.close()

    again = make_service(data_dir=data, start=False)
    again.tick()
    assert again.disk_quotas()["quotas"]["vca"] == {"max_bytes": 1 << 20, "used_bytes": again.disk_quotas()[
        "quotas"]["vca"]["used_bytes"], "over": True}
    with pytest.raises(RequestError, match="over its disk quota"):
        again.submit("alice", {"vc": "vca", "command": "true", "gpus": 1})
    again.set_retention("ada", "vca", keep=0)
    assert again.gc("ada", vc="vca")["removed"] == [writer]
    assert again.disk_quotas()["quotas"]["vca"]["over"] is False
    assert again.submit("alice", {"vc": "vca", "command": "true", "gpus": 1})["state"] == "queued"


def test_quota_through_hived_gc(make_service, tmp_path):
    import json
    import os
    import subprocess
    data = tmp_path / "data"
    make_service(data_dir=data, start=False).close()

    def hived(*args):
        return subprocess.run([sys.executable, "-m", "hived.cli.main", "gc", "--data-dir", str(data),
                               "--user", "ada", *args], capture_output=True, text=True, timeout=60, env=os.environ)
    r = hived("--disk-quota", "lots", "--vc", "vca")
    assert r.returncode == 2 and "want a size like 500M, 20G or none, got 'lots'" in r.stderr
    r = hived("--disk-quota", "2G")
    assert r.returncode == 2 and "--vc: a disk quota is set for one VC" in r.stderr
    r = hived("--disk-quota", "512M", "--vc", "vca")
    assert r.returncode == 0 and r.stdout.splitlines()[0] == \
        "vca: disk quota 512.0 MiB for job folders, 0.0 MiB used", r.stdout + r.stderr
    r = hived("--disk-quota", "none", "--vc", "vca", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["quota"]["max_bytes"] is None
