"""Small helpers shared by the Jupyter tests."""
from __future__ import annotations

import asyncio
import time

TERMINAL = ("succeeded", "failed", "cancelled")


async def wait_state(api, user, job_id, states=TERMINAL, timeout=20.0) -> dict:
    """Poll GET jobs/{id} until the job is in one of ``states``."""
    deadline = time.monotonic() + timeout
    while True:
        code, job = await api(user, "GET", "jobs", job_id)
        assert code == 200, job
        if job["state"] in states:
            return job
        assert time.monotonic() < deadline, f"{job_id} still {job['state']} after {timeout}s"
        await asyncio.sleep(0.05)


def assert_error(code, doc, status, *, where=None, says=None):
    """A refusal: the wanted status and a JSON {error, where} body naming the problem."""
    assert code == status, (code, doc)
    assert isinstance(doc, dict) and set(doc) == {"error", "where"}, doc
    assert isinstance(doc["error"], str) and doc["error"], doc
    if where is not None:
        assert doc["where"] == where, doc
    if says is not None:
        assert says in doc["error"], doc
