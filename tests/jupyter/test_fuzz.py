"""Fuzz the API from its own OpenAPI document (schemathesis) against a real
``hived serve`` whose launcher runs nothing: no generated request, valid or
deliberately invalid, gets a 5xx; every answer's status is one the document
lists for that operation; every refusal is a JSON {error, where}.

Bounded by the number of examples per operation and mode (no clock: how long
it takes is the benchmarks' business); after each operation's examples the
server must still answer.
"""
from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode

from hived.jupyter_ext.handlers.schema import openapi

EXAMPLES = 12
SCHEMA = schemathesis.openapi.from_dict(openapi())
OPERATIONS = {f"{op.method.upper()} {op.path}": op for op in (r.ok() for r in SCHEMA.get_all_operations())}


def _can_be_wrong(op) -> bool:
    """Has something to make invalid: parameters, a body, or a token to leave out
    (the health checks have none of these: no negative case exists for them)."""
    raw = op.definition.raw
    return bool(raw.get("parameters") or raw.get("requestBody") or raw.get("security", True))


CASES = [(label, mode) for label in sorted(OPERATIONS)
         for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
         if mode is GenerationMode.POSITIVE or _can_be_wrong(OPERATIONS[label])]


@pytest.mark.parametrize("label,mode", CASES, ids=[f"{label}-{mode.value}" for label, mode in CASES])
def test_no_5xx(null_server, label, mode):
    base = null_server.api.rstrip("/")

    @given(case=OPERATIONS[label].as_strategy(generation_mode=mode))
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    def run(case):
        # alice: a VC user (refused on permission paths); root: a cluster admin (reaches the service)
        for user in ("alice", "root"):
            headers = {**(case.headers or {}), "Authorization": f"token tok-{user}"}
            response = case.call(base_url=base, headers=headers, timeout=15)
            what = (user, case.method, case.formatted_path, case.query, case.body, response.text[:300])
            assert response.status_code < 500, what
            documented = OPERATIONS[label].definition.raw["responses"]
            assert str(response.status_code) in documented, ("undocumented status", response.status_code, what)
            if response.status_code >= 400:
                doc = response.json()
                assert isinstance(doc, dict) and set(doc) == {"error", "where"} and doc["error"], what

    run()
    assert null_server.client("root").status()["ok"] is True   # nothing above broke the server
