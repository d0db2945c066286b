"""Health polling with NVML faked: ECC, retired pages, XID -> the allocator stops using the GPU."""
from types import SimpleNamespace

import pynvml

from hived.service.health import HealthMonitor


class FakeNvml(SimpleNamespace):
    pass


def fake(ecc=None, pending=None, xids=None, unsupported=()):
    ecc = ecc if ecc is not None else {}
    pending = pending if pending is not None else {}
    xids = xids if xids is not None else []

    def maybe(name, fn):
        def call(*a):
            if name in unsupported:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
            return fn(*a)
        return call

    def wait(es, timeout):
        if not xids:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
        dev, xid = xids.pop(0)
        return SimpleNamespace(device=dev, eventData=xid)

    return FakeNvml(
        NVMLError=pynvml.NVMLError, NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1, NVML_VOLATILE_ECC=0,
        NVML_FEATURE_ENABLED=1, nvmlEventTypeXidCriticalError=8,
        nvmlInit=lambda: None, nvmlDeviceGetHandleByIndex=lambda i: f"h{i}",
        nvmlDeviceGetTotalEccErrors=maybe("ecc", lambda h, *_: ecc.get(h, 0)),
        nvmlDeviceGetRetiredPagesPendingStatus=maybe("retired", lambda h: pending.get(h, 0)),
        nvmlEventSetCreate=maybe("events", lambda: "set"),
        nvmlDeviceRegisterEvents=maybe("events", lambda h, t, s: None),
        nvmlEventSetWait_v2=wait), ecc, pending, xids


def test_ecc_retired_pages_and_xid_mark_gpus_bad_once():
    nv, ecc, pending, xids = fake()
    mon = HealthMonitor({"node0": [0, 1, 2, 3]}, nvml=nv)
    mon.start()
    assert mon.poll() == []
    ecc["h1"] = 2
    pending["h2"] = 1
    xids.append(("h3", 79))
    xids.append(("h0", 13))          # a program's own fault: not the GPU's
    got = mon.poll()
    assert got == [("node0", 1, False, "2 uncorrected ECC errors"),
                   ("node0", 2, False, "retired memory pages pending (reset needed)"),
                   ("node0", 3, False, "XID 79: GPU has fallen off the bus")]
    assert mon.poll() == []          # reported once


def test_unsupported_checks_are_skipped_with_notes():
    nv, ecc, pending, xids = fake(unsupported={"ecc", "retired", "events"})
    mon = HealthMonitor({"n": [0]}, nvml=nv)
    mon.start()
    assert mon.poll() == []
    text = " ".join(mon.notes)
    assert "XID events not available" in text and "ECC error counts not available" in text
    assert "retired-page status not available" in text


def test_service_moves_jobs_off_an_unhealthy_gpu(make_service):
    import time
    svc = make_service()
    job = svc.submit("alice", {"vc": "vca", "command": "sleep 30", "gpus": 4, "job_class": "be"})["id"]
    deadline = time.time() + 10
    while svc.get_job(job)["state"] != "running" and time.time() < deadline:
        time.sleep(0.05)
    pod = svc.get_job(job)["placement"]["pods"][0]
    out = svc.set_health(pod["node"], pod["gpus"][0], False, "XID 79")
    assert out["preempted"] == [job]
    gpu = next(g for g in svc.cluster()["chains"]["T-NODE"]["nodes"][pod["node"]]["gpus"]
               if g["index"] == pod["gpus"][0])
    assert gpu["healthy"] is False and gpu["problem"] == "XID 79"
