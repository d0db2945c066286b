"""Record and replay of NVML (service/nvml_capture.py, nvml_replay.py) on a
faked multi-GPU topology: a replay gives the discovery and the health
verdicts the recorded NVML gave, and answers nothing it was not asked."""
import json

import pynvml
import pytest

from hived.service.discovery import discover
from hived.service.health import HealthMonitor
from hived.service.nvml_capture import NvmlRecorder
from hived.service.nvml_replay import NvmlReplay, ReplayMiss

FACTS = {"host": "dgx", "cpus": 96, "mem_gb": 1000}


def dgx_topo(a, b):
    return 20 if a // 2 == b // 2 else 40 if a // 4 == b // 4 else 50


def test_recorded_topology_replays_to_the_same_spec(nvml_fake, tmp_path):
    nvml_fake(["NVIDIA A100-SXM4-40GB"] * 8, topo=dgx_topo, nvlink={0: [1], 1: [0]},
              fail={"nvmlDeviceGetNumaNodeId"})
    cap = tmp_path / "cap.jsonl"
    live = discover(nvml=NvmlRecorder(pynvml, cap, facts=FACTS), host="dgx")
    again = discover(nvml=NvmlReplay(cap))
    assert again.to_json() == live.to_json()
    assert again.spec == live.spec and again.nvlink == live.nvlink and again.topology == live.topology
    # the machine's CPUs and memory come from the capture, not from the machine replaying it
    node = again.spec["physicalCluster"]["cellTypes"]["A100-SXM4-40GB-NODE"]
    assert (node["cpus"], node["memoryGB"]) == (96, 1000)
    lines = [json.loads(x) for x in cap.read_text().splitlines()]
    assert lines[0]["capture"] == "hived-nvml" and lines[0]["host"] == "dgx"
    numa = next(x for x in lines if x.get("fn") == "nvmlDeviceGetNumaNodeId")
    assert numa["error"]["type"] == "NVMLError_NotSupported" and numa["error"]["value"] == 3


def test_health_replay_repeats_the_verdicts_in_order(nvml_fake, tmp_path):
    ecc = {}
    nvml_fake(["NVIDIA L4"] * 2, ecc=ecc, xids=[(1, 79)])
    cap = tmp_path / "health.jsonl"
    live = HealthMonitor({"n": [0, 1]}, nvml=NvmlRecorder(pynvml, cap, facts=FACTS))
    live.start()
    polls = [live.poll()]
    ecc[0] = 2
    polls += [live.poll(), live.poll()]
    assert polls == [[("n", 1, False, "XID 79: GPU has fallen off the bus")],
                     [("n", 0, False, "2 uncorrected ECC errors")], []]
    replayed = HealthMonitor({"n": [0, 1]}, nvml=NvmlReplay(cap))
    replayed.start()
    assert [replayed.poll() for _ in range(3)] == polls
    assert replayed.poll() == []     # past the capture: the last answers again, no new verdict


def test_a_call_never_recorded_is_refused_not_invented(nvml_fake, tmp_path):
    nvml_fake(["NVIDIA L4"])
    cap = tmp_path / "c.jsonl"
    discover(nvml=NvmlRecorder(pynvml, cap, facts=FACTS))
    nv = NvmlReplay(cap)
    with pytest.raises(ReplayMiss, match="nvmlDeviceGetPowerUsage"):
        nv.nvmlDeviceGetPowerUsage(nv.handle("device:0"))


def test_a_file_that_is_no_capture_is_refused_with_its_name(tmp_path):
    bad = tmp_path / "x.jsonl"
    bad.write_text('{"hello": 1}\n')
    with pytest.raises(ValueError, match="x.jsonl: not a hived NVML capture"):
        NvmlReplay(bad)
