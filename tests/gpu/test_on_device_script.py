"""tests/gpu/on_device.sh without a GPU: it says so at once, and its dry run
(FAKE NVML, fake CUDA) goes through every step and records a capture that
replays to the spec it printed."""
import json
import os
import subprocess
import sys
from pathlib import Path

from hived.service.discovery import discover
from hived.service.nvml_replay import NvmlReplay

SCRIPT = Path(__file__).with_name("on_device.sh")


def run(tmp_path, *args, **env):
    e = {k: v for k, v in os.environ.items() if not k.startswith("HIVED_")}
    e.update(OUT=str(tmp_path / "out"), HIVED_GPU_PYTHON=sys.executable, **env)
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=e, timeout=400)


def test_without_a_gpu_it_exits_at_once_saying_so(tmp_path):
    r = run(tmp_path, PATH="/usr/bin:/bin")
    assert r.returncode == 3
    assert "no NVIDIA GPU on this machine" in r.stderr
    assert not (tmp_path / "out" / "summary.json").exists()


def test_dry_run_goes_through_every_step_and_its_capture_replays(tmp_path):
    r = run(tmp_path, "--dry-run", HIVED_GPU_WATCH="3")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "DRY RUN with the FAKE NVML" in r.stdout
    out = tmp_path / "out"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["dry_run"] is True
    assert set(summary["checks"]) == {"discover exits 0", "job j1 sees exactly its bound GPU",
                                      "job j2 sees exactly its bound GPU",
                                      "health: no GPU marked unhealthy while idle"}
    assert all(c["ok"] for c in summary["checks"].values())
    # the second job waited for the only GPU, then saw the same one
    assert [j["bound_uuids"] for j in summary["jobs"]] == [["GPU-00000000-fake-fake-fake-000000000000"]] * 2
    printed = json.loads((out / "discover.json").read_text())
    assert discover(nvml=NvmlReplay(out / "capture-discover.jsonl")).to_json() == printed
    facts = summary["facts"]
    assert facts["NUMA node [GPU 0]"] == {"error": "NVMLError_NotSupported: Not Supported"}
    assert "missing" in facts["BAR1 memory"]      # the fake has no such function: said, not invented
