"""The data directory on a real, small file system that fills up (a 4 MiB tmpfs, mounted
for the test; it needs root, and is skipped, saying why, where mounting is not allowed)."""
import errno
import subprocess

import pytest
from service_helpers import wait_until

from hived.service.degraded import ServiceDegraded


@pytest.fixture
def small_disk(tmp_path):
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0755", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or r.returncode}): this test needs root")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(disk):
    """Write until the file system is full; returns the filler file."""
    f = disk / "filler"
    with open(f, "wb") as out:
        try:
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return f


def test_full_disk_degrades_and_recovers_without_losing_or_rerunning(make_service, small_disk):
    data = small_disk / "data"
    svc = make_service(data_dir=data, start=False)
    first = svc.submit("alice", {"vc": "vca", "command": "true", "gpus": 1})["id"]
    filler = fill(small_disk)
    try:
        # submit during the failure: refused, nothing queued
        with pytest.raises(ServiceDegraded) as err:
            svc.submit("alice", {"vc": "vca", "command": "true", "gpus": 1})
        assert "disk is full" in err.value.reason
        assert [j["id"] for j in svc.list_jobs()] == [first]
        # a launch decision during the failure: not acted on
        for _ in range(3):
            svc.tick()
        assert svc.readiness()[0] is False
        assert not (data / "jobs" / first).exists()
        assert [r["state"] for r in svc.store.load_jobs()] == ["queued"]
        # a restart while the disk is still full: it opens, degraded, with what was acknowledged
        svc.close()
        svc = make_service(data_dir=data, start=False)
        assert [j["id"] for j in svc.list_jobs()] == [first]
        svc.tick()
        assert svc.readiness()[0] is False and not (data / "jobs" / first).exists()
    finally:
        filler.unlink()
    # room again: it recovers by itself, then launches
    svc.tick()
    assert svc.readiness() == (True, "")
    wait_until(lambda: svc.tick() is not None and svc.get_job(first)["state"] == "succeeded", what="success")
    second = svc.submit("alice", {"vc": "vca", "command": "true", "gpus": 1})["id"]
    assert second != first
    wait_until(lambda: svc.tick() is not None and svc.get_job(second)["state"] == "succeeded", what="success")
    assert [(j["id"], j["attempts"]) for j in svc.list_jobs()] == [(first, 1), (second, 1)]
