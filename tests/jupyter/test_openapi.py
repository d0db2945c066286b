"""The OpenAPI document and the registered routes agree, both ways."""
from __future__ import annotations

import re

from hived.jupyter_ext.handlers import ROUTES, handlers
from hived.jupyter_ext.handlers.schema import openapi

METHODS = ("get", "post", "put", "delete", "patch")


def documented() -> set[tuple[str, str]]:
    return {(path, m) for path, item in openapi()["paths"].items() for m in item if m in METHODS}


def served() -> set[tuple[str, str]]:
    """(OpenAPI path, method) for every method a registered handler defines itself."""
    out = set()
    for _, cls, paths in ROUTES:
        for path in (paths,) if isinstance(paths, str) else paths:
            for m in METHODS:  # defined by hived's classes, not inherited from tornado's
                if any(m in base.__dict__ for base in cls.__mro__ if base.__module__.startswith("hived.")):
                    out.add((path, m))
    return out


def test_every_route_is_documented_and_every_documented_route_served():
    # exchange/board and /ledger are GET only: the handler refuses POST there with a 404
    posted_views = {("/exchange/board", "post"), ("/exchange/ledger", "post")}
    assert served() - posted_views == documented()


def test_route_patterns_match_documented_paths():
    patterns = [re.compile(p) for p, _ in handlers("/")]
    for path in openapi()["paths"]:
        concrete = "/hived/api" + re.sub(r"\{[^}]+\}", "x1", path)
        matches = [i for i, p in enumerate(patterns) if p.match(concrete)]
        assert matches and matches[0] < len(ROUTES), f"{path} is not served by a route of ROUTES"


def test_every_operation_documents_its_refusals():
    """Each operation that can refuse lists the 4xx it answers, with the Error body."""
    doc = openapi()
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if method not in METHODS:
                continue
            if op.get("security") == []:   # health checks: no token needed, nothing to refuse
                assert not any(code.startswith("4") for code in op["responses"]), (path, method)
                continue
            assert "403" in op["responses"], (path, method)   # no token: 403 everywhere
            for code, resp in op["responses"].items():
                if code.startswith("4"):
                    schema = resp["content"]["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/Error"}, (path, method, code)


async def test_answers_match_documented_schemas(api, service):
    """Real answers validate against the document's response schemas."""
    from jsonschema import Draft4Validator
    doc = openapi()

    def check(path, method, code, body):
        resp = doc["paths"][path][method]["responses"][str(code)]
        schema = resp["content"]["application/json"]["schema"]
        root = {"components": doc["components"], **schema}
        errors = [e.message for e in Draft4Validator(root).iter_errors(_nullable_ok(body))]
        assert not errors, (path, method, code, errors[:3])

    code, job = await api("alice", "POST", "jobs", body={"vc": "vca", "command": "true"})
    check("/jobs", "post", code, job)
    for path, route in (("/status", ("status",)), ("/cluster", ("cluster",)), ("/vcs", ("vcs",)),
                        ("/vcs/{vc}", ("vcs", "vca")), ("/jobs", ("jobs",)),
                        ("/jobs/{job_id}", ("jobs", job["id"])),
                        ("/jobs/{job_id}/logs", ("jobs", job["id"], "logs"))):
        code, body = await api("alice", "GET", *route)
        check(path, "get", code, body)
    code, body = await api("bob", "GET", "jobs", job["id"])
    check("/jobs/{job_id}", "get", code, body)
    code, body = await api("alice", "POST", "jobs", body={"vc": "vca"})
    check("/jobs", "post", code, body)
    code, body = await api("alice", "POST", "jobs", job["id"], "cancel")
    check("/jobs/{job_id}/cancel", "post", code, body)


def _nullable_ok(value):
    """Draft 4 has no ``nullable``: drop nulls so optional nullable fields validate."""
    if isinstance(value, dict):
        return {k: _nullable_ok(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_nullable_ok(v) for v in value]
    return value
