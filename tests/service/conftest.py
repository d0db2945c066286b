"""Fixtures for the service tests: a small two-VC spec and a service on it."""
import os
import time
from pathlib import Path

import pytest

SPEC = Path(__file__).with_name("spec_small.yaml")
# "quota" runs the same tests on the baseline allocator
SCHEME = os.environ.get("HIVED_TEST_SCHEME", "hived")


@pytest.fixture
def make_service(tmp_path):
    from hived.jupyter_ext.service.service import SchedulerService
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
