"""Fixtures for the service tests: a small two-VC spec and a service on it."""
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # service_helpers (--import-mode=importlib)

SPEC = Path(__file__).with_name("spec_small.yaml")
# "quota" runs the same tests on the baseline allocator
SCHEME = os.environ.get("HIVED_TEST_SCHEME", "hived")


@pytest.fixture(autouse=True)
def server_job_account(request, monkeypatch):
    """The service tests' jobs run this suite's python and write into pytest's temporary
    folders: as the server's account (hived.testing.job_account says why). The default account
    is what test_local_reach.py, test_local_isolation.py and test_demo.py run with."""
    from hived.testing.job_account import server_account_unless_marked
    server_account_unless_marked(request, monkeypatch)


@pytest.fixture
def make_service(tmp_path):
    from hived.service.scheduler import SchedulerService
    made = []

    def make(data_dir=None, start=True, **kw):
        kw.setdefault("tick_seconds", 0.05)
        kw.setdefault("scheme", SCHEME)
        svc = SchedulerService(str(SPEC), data_dir or tmp_path / "data", **kw)
        made.append(svc)
        return svc.start() if start else svc

    yield make
    for svc in made:
        try:
            svc.stop(cancel_jobs=True, timeout=5)
            svc.close()
        except Exception:
            pass


def fake_nvml(monkeypatch, models, topo=None, nvlink=None, numa=None, fail=(), init_error=None, mig=(),
              fail_on=None, error=None, ecc=None, pending=None, xids=None):
    """Patch the pynvml functions discovery and health use (no GPU in CI).

    ``fail``: function names that raise ``error`` (default NotSupported) on
    every call; ``fail_on``: {name: set of handles} raising only for those
    GPUs. ``ecc``/``pending``: dicts handle -> count/flag the test may change
    later; ``xids``: a list of (handle, xid) events the test may append to.
    Returns the list of called function names.
    """
    from types import SimpleNamespace

    import pynvml
    code = pynvml.NVML_ERROR_NOT_SUPPORTED if error is None else error
    n = len(models)
    bus = [f"00000000:{0x10 + i:02X}:00.0" for i in range(n)]
    calls = []
    fail_on = fail_on or {}
    ecc = ecc if ecc is not None else {}
    pending = pending if pending is not None else {}
    xids = xids if xids is not None else []

    def f(name, impl):
        def wrapper(*a):
            calls.append(name)
            if name in fail or (a and a[0] in fail_on.get(name, ())):
                raise pynvml.NVMLError(code)
            return impl(*a)
        monkeypatch.setattr(pynvml, name, wrapper)

    def init():
        if init_error is not None:
            raise pynvml.NVMLError(init_error)
    monkeypatch.setattr(pynvml, "nvmlInit", init)
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: None)
    f("nvmlDeviceGetCount", lambda: n)
    f("nvmlDeviceGetHandleByIndex", lambda i: i)
    f("nvmlDeviceGetName", lambda h: models[h])
    f("nvmlDeviceGetUUID", lambda h: f"GPU-{h:04d}")
    f("nvmlDeviceGetPciInfo", lambda h: SimpleNamespace(busId=bus[h]))
    f("nvmlDeviceGetMemoryInfo", lambda h: SimpleNamespace(total=80 << 30))
    f("nvmlDeviceGetMigMode", lambda h: [1 if h in mig else 0, 0])
    f("nvmlDeviceGetNumaNodeId", lambda h: (numa or {}).get(h, 0))
    f("nvmlDeviceGetTopologyCommonAncestor", lambda a, b: (topo or (lambda a, b: 50))(a, b))

    def link_state(h, link):
        peers = (nvlink or {}).get(h, [])
        if link >= max(len(peers), 4):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return 1 if link < len(peers) else 0
    f("nvmlDeviceGetNvLinkState", link_state)
    f("nvmlDeviceGetNvLinkRemotePciInfo", lambda h, link: SimpleNamespace(busId=bus[nvlink[h][link]]))
    # health
    f("nvmlDeviceGetTotalEccErrors", lambda h, *_: ecc.get(h, 0))
    f("nvmlDeviceGetRetiredPagesPendingStatus", lambda h: pending.get(h, 0))
    f("nvmlEventSetCreate", lambda: "events")
    f("nvmlDeviceRegisterEvents", lambda h, t, s: None)

    def wait(es, timeout_ms):
        if not xids:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
        dev, xid = xids.pop(0)
        return SimpleNamespace(device=dev, eventData=xid)
    f("nvmlEventSetWait_v2", wait)
    return calls


@pytest.fixture
def nvml_fake(monkeypatch):
    """``nvml_fake(models, **kw)``: see ``fake_nvml``."""
    def make(models, **kw):
        return fake_nvml(monkeypatch, models, **kw)
    return make
