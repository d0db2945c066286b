"""A job body is bounded once (``hived.service.payload.LIMITS``): the REST API's
JSON schema and the service's own parsing refuse and accept the same bodies,
with the same words for a number out of range."""
from __future__ import annotations

import pytest

from hived.core.engine import RequestError
from hived.jupyter_ext.handlers.schema import first_error, openapi
from hived.service.payload import FIELDS, LIMITS, parse_job

BASE = {"vc": "vca", "command": "true"}
NUMBERS = [k for k, b in LIMITS.items() if "maximum" in b]


def service_problem(body):
    try:
        parse_job("alice", body)
    except RequestError as exc:
        return exc.field, exc.problem
    return None


def rest_problem(body):
    found = first_error("JobSubmit", body)
    return None if found is None else (found[1].removeprefix("body."), found[0])


def test_the_schema_names_every_field_the_service_takes():
    assert set(openapi()["components"]["schemas"]["JobSubmit"]["properties"]) == set(FIELDS)


@pytest.mark.parametrize("key,flat", [(k, True) for k in NUMBERS] +
                         [(k, False) for k in ("pods", "gpus", "cpus", "memory_gb")])
def test_numbers_at_and_over_their_bounds(key, flat):
    """``flat=False``: the same bound on a field of a pod group."""
    lo, hi = LIMITS[key]["minimum"], LIMITS[key]["maximum"]

    def body(v):
        return {**BASE, key: v} if flat else {**BASE, "groups": [{key: v}]}
    where = key if flat else f"groups[0].{key}"
    for ok in (lo, hi):
        assert rest_problem(body(ok)) is None and service_problem(body(ok)) is None, (key, ok)
    for bad in (hi * 2 if hi else 1, lo - 1):
        want = (where, f"must be between {lo:g} and {hi:g}, got {bad:g}")
        assert rest_problem(body(bad)) == want
        assert service_problem(body(bad)) == want


LONG = [
    ("vc", lambda n: {**BASE, "vc": "v" * n}, LIMITS["vc"]["maxLength"]),
    ("command", lambda n: {**BASE, "command": "x" * n}, LIMITS["command"]["maxLength"]),
    ("command[0]", lambda n: {**BASE, "command": ["x" * n]}, LIMITS["command"]["maxLength"]),
    ("command", lambda n: {**BASE, "command": ["x"] * n}, LIMITS["command"]["maxItems"]),
    ("name", lambda n: {**BASE, "name": "x" * n}, LIMITS["name"]["maxLength"]),
    ("env", lambda n: {**BASE, "env": {f"V{i}": "x" for i in range(n)}}, LIMITS["env"]["maxProperties"]),
    ("env.V", lambda n: {**BASE, "env": {"V": "x" * n}}, LIMITS["env"]["maxLength"]),
    ("labels", lambda n: {**BASE, "labels": {f"l{i}": "x" for i in range(n)}}, LIMITS["labels"]["maxProperties"]),
    ("labels.l", lambda n: {**BASE, "labels": {"l": "x" * n}}, LIMITS["labels"]["maxLength"]),
    ("groups", lambda n: {**BASE, "groups": [{"gpus": 1}] * n}, LIMITS["groups"]["maxItems"]),
]


@pytest.mark.parametrize("where,make,limit", LONG, ids=[f"{w}-{i}" for i, (w, _, _) in enumerate(LONG)])
def test_sizes_at_and_over_their_bounds(where, make, limit):
    assert rest_problem(make(limit)) is None and service_problem(make(limit)) is None
    rest, service = rest_problem(make(limit + 1)), service_problem(make(limit + 1))
    assert rest is not None and service is not None
    assert rest[0] == service[0] == where, (rest, service)


def test_env_values_are_strings_at_every_door():
    body = {**BASE, "env": {"N": 3}}
    assert rest_problem(body)[0] == service_problem(body)[0] == "env.N"


@pytest.mark.parametrize("body,where", [({**BASE, "pods": None}, "pods"), ({**BASE, "gpus": None}, "gpus"),
                                        ({**BASE, "groups": [{"pods": None}]}, "groups[0].pods"),
                                        ({**BASE, "grace_period": None}, "grace_period")])
def test_null_is_refused_where_a_field_has_a_value_by_default(body, where):
    """pods, gpus and grace_period default to a value: null is no way to ask for that default."""
    rest, service = rest_problem(body), service_problem(body)
    assert rest is not None and service is not None
    assert rest[0] == service[0] == where, (rest, service)
    assert "None" in service[1]
