"""The service on a spec discovered from this machine (NVML faked): UUIDs in
CUDA_VISIBLE_DEVICES by position, and NVML health moving jobs off a bad GPU."""
import sys

import pynvml
import pytest
from service_helpers import wait_until

from hived.service.discovery import discover
from hived.service.health import HealthMonitor
from hived.service.local_gpus import match_local
from hived.service.scheduler import SchedulerService

PY = sys.executable


def crossed(a, b):
    """4 GPUs whose PCIe switches pair 0 with 2 and 1 with 3: positions != NVML indices."""
    return 20 if a % 2 == b % 2 else 50




@pytest.fixture
def local_service(tmp_path, nvml_fake):
    ecc, made = {}, []
    nvml_fake(["NVIDIA L4"] * 4, topo=crossed, ecc=ecc)
    d = discover(vcs=["va", "vb"])
    assert list(d.nodes.values()) == [[0, 2, 1, 3]]
    d.spec["virtualClusters"]["va"]["users"] = ["alice"]   # discovery names no members

    def make():
        svc = SchedulerService(d.spec, tmp_path / "data", tick_seconds=0.05)
        made.append(svc)
        return svc.start()
    yield make, d, ecc
    for svc in made:
        svc.stop(cancel_jobs=True, timeout=5)
        svc.close()


def test_uuids_by_position_and_ecc_errors_move_the_job(local_service):
    make, d, ecc = local_service
    svc = make()
    assert svc.local is not None and svc.health is not None
    (node,) = d.nodes
    job = svc.submit("alice", {"vc": "va", "gpus": 2, "job_class": "be", "command": [
        PY, "-c", "import os, time; print('cvd', os.environ['CUDA_VISIBLE_DEVICES'],"
                  " os.environ['NVIDIA_VISIBLE_DEVICES'], flush=True); time.sleep(30)"]})["id"]
    wait_until(lambda: "cvd " in svc.logs(job)[0], what="the job's output")
    pod = svc.get_job(job)["placement"]["pods"][0]
    want = ",".join(d.gpu_ids[(node, g)] for g in pod["gpus"])
    line = next(x for x in svc.logs(job)[0].splitlines() if x.startswith("cvd "))
    assert line == f"cvd {want} {want}"
    assert want in ("GPU-0000,GPU-0002", "GPU-0001,GPU-0003")   # a switch pair, not 0,1
    # an uncorrected ECC error on the job's first GPU: the next tick sees it
    bad_index = d.nodes[node][pod["gpus"][0]]
    ecc[bad_index] = 1
    wait_until(lambda: svc.get_job(job)["preemptions"] == 1, what="the job moved off the bad GPU")
    gpu = next(g for g in svc.cluster()["chains"]["L4-NODE"]["nodes"][node]["gpus"] if g["index"] == pod["gpus"][0])
    assert gpu["healthy"] is False and gpu["problem"] == "1 uncorrected ECC errors"
    assert svc.status()["unhealthy"] == [{"node": node, "gpu": pod["gpus"][0], "reason": "1 uncorrected ECC errors"}]
    # it runs again, elsewhere: never on the bad GPU
    wait_until(lambda: svc.get_job(job)["state"] == "running" and svc.get_job(job)["attempts"] == 2,
               what="the job restarted")
    again = svc.get_job(job)["placement"]["pods"][0]
    assert pod["gpus"][0] not in again["gpus"]


def test_no_mapping_for_a_spec_of_other_nodes_or_without_nvml(nvml_fake, make_service, monkeypatch):
    nvml_fake(["NVIDIA L4"] * 4)
    svc = make_service(start=False)          # spec_small: node0/node1, not this host
    assert svc.local is None and svc.health is None and svc.launcher.gpu_ids == {}
    d = discover(vcs=["va", "vb"])
    monkeypatch.setenv("HIVED_NVML", "0")
    from hived.core.engine import Engine
    assert match_local(Engine(d.spec).spec, Engine(d.spec).alloc) is None


def test_spec_with_other_gpu_count_is_not_mapped(nvml_fake):
    nvml_fake(["NVIDIA L4"] * 4)
    d = discover(vcs=["va", "vb"])
    from hived.core.engine import Engine
    eng = Engine(d.spec)
    nvml_fake(["NVIDIA L4"] * 2)             # the machine lost two GPUs since discovery
    assert match_local(eng.spec, eng.alloc) is None


def test_health_monitor_without_nvml_or_with_a_gpu_it_cannot_open(nvml_fake):
    nvml_fake([], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    mon = HealthMonitor({"n": [0, 1]})
    mon.start()
    assert mon.poll() == [] and "health checks off: NVML did not start (Driver Not Loaded)" in mon.notes
    nvml_fake(["NVIDIA L4"] * 2, fail_on={"nvmlDeviceGetHandleByIndex": {1}}, error=pynvml.NVML_ERROR_GPU_IS_LOST)
    mon = HealthMonitor({"n": [0, 1]})
    mon.start()
    got = mon.poll()
    assert len(got) == 1 and got[0][:3] == ("n", 1, False) and "cannot open the GPU" in got[0][3]
    assert mon.poll() == []
