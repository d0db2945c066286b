"""Replay of a real H100's NVML answers (tests/gpu/captures/h100-2026-11-27).

The capture was recorded by tests/gpu/on_device.sh on a lent GPU machine
(docs/gpu.md): one NVIDIA H100 80GB HBM3 in a Firecracker VM, driver
580.159.04. Discovery, the health watcher and the service replay it here.
"""
import json
import subprocess
import sys
import time
from pathlib import Path

import pynvml
import pytest

from hived.service.discovery import discover
from hived.service.health import HealthMonitor
from hived.service.nvml_replay import NvmlReplay, ReplayMiss

CAPTURE = Path(__file__).parent / "captures" / "h100-2026-11-27"
MACHINE = json.loads((CAPTURE / "discover.json").read_text())     # what `hived discover --json` printed there
SUMMARY = json.loads((CAPTURE / "summary.json").read_text())
UUID = "GPU-9839e09b-9350-0666-2b36-ba498690ce79"


def replay(name):
    return NvmlReplay(CAPTURE / f"capture-{name}.jsonl")


def test_discovery_from_the_capture_gives_the_machines_spec_model_and_memory():
    d = discover(nvml=replay("discover"))
    assert d.to_json() == {**MACHINE, "nodes": {k: v for k, v in MACHINE["nodes"].items()}}
    assert d.spec == MACHINE["spec"]
    (gpu,) = d.gpus
    # as the machine reported them: nvidia-smi -L and NVML's memory total
    assert gpu.model == "NVIDIA H100 80GB HBM3" and gpu.model in SUMMARY["nvidia_smi"]["L"]
    total = SUMMARY["facts"]["memory [GPU 0]"]["ok"]["fields"]["total"]
    assert gpu.memory_mib == total // (1 << 20) == 81559
    assert gpu.uuid == UUID and gpu.mig_enabled is False
    assert list(d.spec["physicalCluster"]["cellTypes"]) == ["H100-80GB-HBM3-NODE"]
    assert d.gpu_ids == {("vm", 0): UUID}
    assert d.notes == ["NUMA node unavailable (nvmlDeviceGetNumaNodeId: Not Supported)",
                       "NVLink state unavailable (nvmlDeviceGetNvLinkState: Not Supported)"]


def test_hived_discover_replays_the_capture_from_the_command_line(tmp_path):
    env = {"HIVED_NVML_REPLAY": str(CAPTURE / "capture-discover.jsonl"), "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-m", "hived.cli.main", "discover", "--json"], capture_output=True,
                       text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == MACHINE


def test_errors_come_back_as_the_same_nvml_error_class():
    nv = replay("discover")
    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotSupported) as caught:
        nv.nvmlDeviceGetNvLinkState(h, 0)
    assert str(caught.value) == "Not Supported"
    with pytest.raises(ReplayMiss, match="nvmlDeviceGetNvLinkState"):
        nv.nvmlDeviceGetNvLinkState(h, 7)      # never asked on the machine: no made-up answer


def test_health_replay_gives_the_verdicts_the_machine_gave():
    watched = SUMMARY["health"]
    assert watched["polls"] == 30 and watched["verdicts"] == []
    mon = HealthMonitor(MACHINE["nodes"], nvml=replay("health"))
    mon.start()
    assert [mon.poll() for _ in range(watched["polls"])] == [[]] * watched["polls"]
    # ECC counts and XID events answered; retired-page status refused, as on the machine
    assert mon.notes == watched["notes"] == ["retired-page status not available (Not Supported)"]


def test_the_service_binds_jobs_by_the_h100s_uuid_from_the_replay(tmp_path, monkeypatch):
    from hived.service.scheduler import SchedulerService
    monkeypatch.setenv("HIVED_NVML_REPLAY", str(CAPTURE / "capture-serve.jsonl"))
    # this suite's Python lives where a per-VC account cannot reach it (under /root in CI): the job
    # runs as the server's account; on the machine itself the jobs ran as the VC's own uid
    monkeypatch.setenv("HIVED_JOB_ACCOUNT", "server")
    spec = dict(MACHINE["spec"])
    spec["virtualClusters"] = {"default": {**MACHINE["spec"]["virtualClusters"]["default"], "users": ["ann"]}}
    svc = SchedulerService(spec, tmp_path / "data", tick_seconds=0.05).start()
    try:
        assert svc.local is not None and svc.local.gpu_ids == {("vm", 0): UUID}
        assert svc.health is not None
        job = svc.submit("ann", {"vc": "default", "gpus": 1, "command": [
            sys.executable, "-c", "import os; print('cvd', os.environ['CUDA_VISIBLE_DEVICES'], flush=True)"]})["id"]
        deadline = time.monotonic() + 60
        while svc.get_job(job)["state"] not in ("succeeded", "failed") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert svc.get_job(job)["state"] == "succeeded"
        assert f"cvd {UUID}" in svc.logs(job)[0]
        assert svc.status()["unhealthy"] == []
    finally:
        svc.stop(cancel_jobs=True, timeout=5)
        svc.close()


def test_the_jobs_on_the_machine_saw_exactly_their_bound_gpu():
    """What the machine itself said (kept with the capture): CUDA through libcuda in each job."""
    assert all(c["ok"] for c in SUMMARY["checks"].values()) and not SUMMARY["dry_run"]
    for j in SUMMARY["jobs"]:
        assert j["state"] == "succeeded" and j["bound_uuids"] == [UUID]
        assert j["seen"]["count"] == 1 and [d["uuid"] for d in j["seen"]["devices"]] == [UUID]
        assert j["seen"]["uid"] != 0 and j["seen"]["devices"][0]["alloc_1mib"] is True
