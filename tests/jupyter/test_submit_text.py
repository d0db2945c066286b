"""Text a job cannot run with, or that would break every listing, is refused
at submit with the field named: NUL bytes, a relative working directory
(resolved against the server's own directory otherwise), lone surrogates."""
from __future__ import annotations

import pytest

from .helpers import assert_error


@pytest.mark.parametrize("extra,where,says", [
    ({"command": "echo a\x00b"}, "body.command", "NUL"),
    ({"command": ["echo", "a\x00b"]}, "body.command[1]", "NUL"),
    ({"env": {"A": "x\x00y"}}, "body.env.A", "NUL"),
    ({"name": "n\x00"}, "body.name", "NUL"),
    ({"workdir": "relative/dir"}, "body.workdir", "absolute path"),
    ({"workdir": "/tmp/a\x00b"}, "body.workdir", "NUL"),
])
async def test_unrunnable_text_is_refused(api, service, extra, where, says):
    body = {"vc": "vca", "command": "true", **extra}
    code, doc = await api("alice", "POST", "jobs", body=body)
    assert_error(code, doc, 400, where=where, says=says)
    code, doc = await api("root", "GET", "jobs")
    assert doc["jobs"] == []


async def test_lone_surrogate_is_refused(api, service):
    raw = '{"vc": "vca", "command": "true", "name": "x\\ud800y"}'
    code, doc = await api("alice", "POST", "jobs", raw=raw)
    assert_error(code, doc, 400, where="body", says="surrogate")
    code, doc = await api("alice", "POST", "jobs", body={"vc": "vca", "command": "true", "workdir": "/tmp",
                                                          "name": "ok \u00e9\u4e2d"})
    assert code == 201, doc
