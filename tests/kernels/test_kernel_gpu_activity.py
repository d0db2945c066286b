"""GPU utilization as the second idle signal: a kernel job whose GPUs show work is not released,
even when its provisioner reported no cell. The service runs in this process with a manual clock
(no wall-clock waits) on the spec of the real H100 machine (tests/gpu/captures/h100-2026-11-27),
its NVML answered by the replay backend (``HIVED_NVML_REPLAY``) so the local GPU mapping,
discovery included, is the machine's own. Launches go to the no-op launcher: what is tested is
the release decision, not a kernel process (tests/kernels/test_kernel_idle.py runs a real one).

SIMULATED: the real capture holds no ``nvmlDeviceGetUtilizationRates`` (on_device.sh did not
ask it). The busy case replays that capture with utilization answers appended by this test,
in the capture's own format (``"synthetic"`` in the header says so);
tests/gpu/record_utilization.py records the real thing on a GPU machine for a later session.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from hived.core.kernel_idle import gpus_in_use, release_reason
from hived.service.scheduler import SchedulerService
from hived.testing.launcher_noop import NoopLauncher

CAPTURE = Path(__file__).parents[1] / "gpu" / "captures" / "h100-2026-11-27"
MACHINE = json.loads((CAPTURE / "discover.json").read_text())
TIMEOUT = 30


def test_any_gpu_at_work_counts_and_unknown_counts_as_nothing():
    assert gpus_in_use([0, 12]) and gpus_in_use([None, 1])
    assert not gpus_in_use([0, 0]) and not gpus_in_use([None]) and not gpus_in_use([])


def synthetic_capture(tmp_path: Path, utilization: list[int]) -> Path:
    """The real serve capture, then one utilization answer per look, in order (the last repeats)."""
    lines = (CAPTURE / "capture-serve.jsonl").read_text().splitlines()
    head = {**json.loads(lines[0]), "synthetic": "utilization answers appended by a test; not recorded"}
    out = [json.dumps(head), *lines[1:]]
    out += [json.dumps({"fn": "nvmlDeviceGetUtilizationRates", "args": [{"handle": "device:0"}],
                        "ok": {"struct": "c_nvmlUtilization_t", "fields": {"gpu": u, "memory": 0}}})
            for u in utilization]
    path = tmp_path / "capture-utilization.jsonl"
    path.write_text("\n".join(out) + "\n")
    return path


class Service:
    """The service on the H100's spec, VC default with kernelIdleTimeout, ticked by hand; its health monitor
    (health="auto") is what maps the spec's node to the replayed GPU."""

    def __init__(self, tmp_path: Path, capture: Path, monkeypatch):
        monkeypatch.setenv("HIVED_NVML_REPLAY", str(capture))
        spec = json.loads(json.dumps(MACHINE["spec"]))
        spec["virtualClusters"]["default"].update(users=["ann"], kernelIdleTimeout=TIMEOUT)
        self.t = [1000.0]
        self.svc = SchedulerService(spec, tmp_path / "data", launcher=NoopLauncher(),
                                    tick_seconds=0.05, clock=lambda: self.t[0])
        assert self.svc.local is not None and self.svc.local.nodes == {"vm": [0]}   # mapped from the replay

    def kernel(self) -> str:
        job = self.svc.submit("ann", {"vc": "default", "gpus": 1, "labels": {"kernel": "k-1"},
                                      "command": [sys.executable, "-c", "pass"]})["id"]
        for _ in range(5):
            self.svc.tick()
        assert self.svc.get_job(job)["state"] == "running"
        return job

    def at(self, t: float, job: str) -> str:
        """The state of ``job`` after a round at ``t`` seconds past the start."""
        self.t[0] = 1000.0 + t
        self.svc.tick()
        self.svc.tick()     # the cancel's exit comes back from the launcher at the next poll
        return self.svc.get_job(job)["state"]

    def close(self):
        self.svc.stop(cancel_jobs=True, timeout=5)
        self.svc.close()


@pytest.fixture
def service(tmp_path, monkeypatch):
    made = []

    def make(capture: Path) -> Service:
        made.append(Service(tmp_path, capture, monkeypatch))
        return made[-1]
    yield make
    for s in made:
        s.close()


def test_a_kernel_whose_gpu_works_is_not_released_until_it_has_been_idle_for_the_timeout(service, tmp_path):
    s = service(synthetic_capture(tmp_path, [0, 97, 95, 0]))
    job = s.kernel()
    assert s.at(10, job) == "running"          # GPU at 0 %, idle for 10 s
    assert s.at(20, job) == "running"          # 97 %: at work
    assert s.at(30, job) == "running"          # 95 %: at work (by cell activity alone it would go now)
    assert s.at(40, job) == "running"          # 0 % again: idle since 30
    assert s.at(59, job) == "running"
    assert s.at(60, job) == "cancelled"        # 30 s after the GPU's last work
    history = [h["reason"] for h in s.svc.get_job(job)["history"]]
    assert release_reason("default", TIMEOUT) in history
    assert s.svc._kernel_gpu.notes == []       # every look was answered


def test_on_the_real_h100_capture_without_utilization_the_kernel_is_judged_on_cells(service, tmp_path):
    s = service(CAPTURE / "capture-serve.jsonl")
    job = s.kernel()
    assert s.at(29, job) == "running"
    assert s.at(30, job) == "cancelled"
    notes = s.svc._kernel_gpu.notes
    assert len(notes) == 1 and notes[0].startswith("GPU 0: utilization not readable (ReplayMiss")
