"""Errors are one line and tell nothing the caller may not know: no file
contents, no owner or VC of someone else's job, no traceback; a degraded
service answers 503 with its reason and readiness false."""
from __future__ import annotations

from hived.service.degraded import ServiceDegraded

from .helpers import assert_error


async def test_spec_reload_by_path_reads_no_other_file(api, service, tmp_path, jp_serverapp):
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$very-secret-hash:19000:0:99999:7:::\n")
    for user in ("alice", "ada"):   # not cluster admins
        code, doc = await api(user, "POST", "spec", "reload", body={"path": str(secret)})
        assert_error(code, doc, 403, says="cluster admins only")
    code, doc = await api("root", "POST", "spec", "reload", body={"path": str(secret)})
    assert_error(code, doc, 400, where="body.path", says="only the server's own spec file")
    assert "secret" not in doc["error"] and "root:" not in doc["error"]
    configured = jp_serverapp.web_app.settings["hived"].config.spec_path
    code, doc = await api("root", "POST", "spec", "reload", body={"path": configured})   # the server's own: fine
    assert code == 200, doc


async def test_foreign_job_refusal_names_no_owner_or_vc(api, service):
    code, job = await api("alice", "POST", "jobs", body={"vc": "vca", "command": "sleep 5", "name": "private"})
    assert code == 201
    for method, path in (("GET", ("jobs", job["id"])), ("POST", ("jobs", job["id"], "cancel")),
                         ("GET", ("jobs", job["id"], "logs"))):
        code, doc = await api("bob", method, *path)
        assert_error(code, doc, 404, where=f"jobs/{job['id']}")   # as if it did not exist
        assert "alice" not in doc["error"] and "vca" not in doc["error"] and "private" not in doc["error"], doc
    code, doc = await api("anna", "POST", "jobs", job["id"], "cancel")   # same VC, not the owner
    assert_error(code, doc, 403, says=f"may not cancel job {job['id']}")
    assert "alice" not in doc["error"]


async def test_a_bug_is_a_one_line_500_without_details(api, service, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("internal detail /var/lib/hived/hived.db\nTraceback (most recent call last):")
    monkeypatch.setattr(service, "list_jobs", broken)
    code, doc = await api("alice", "GET", "jobs")
    assert code == 500 and set(doc) == {"error", "where"}
    assert "\n" not in doc["error"] and "internal detail" not in doc["error"] and "Traceback" not in doc["error"]


async def test_degraded_service_answers_503_with_its_reason(api, service, monkeypatch):
    def degraded(*args, **kwargs):
        raise ServiceDegraded("journal cannot commit: No space left on device")
    monkeypatch.setattr(service, "submit", degraded)
    code, doc = await api("alice", "POST", "jobs", body={"vc": "vca", "command": "true"})
    assert_error(code, doc, 503, where="service", says="No space left on device")
    assert "nothing was changed" in doc["error"]


async def test_readiness_follows_the_service(api, service, jp_serverapp, jp_fetch, monkeypatch):
    import json

    from tornado.httpclient import HTTPClientError

    async def readyz():
        try:
            r = await jp_fetch("hived", "api", "readyz", headers={})   # no token
        except HTTPClientError as exc:
            r = exc.response
        return r.code, json.loads(r.body)

    assert await readyz() == (200, {"ready": True})
    monkeypatch.setattr(service, "readiness", lambda: (False, "journal cannot commit: disk full"), raising=False)
    assert await readyz() == (503, {"ready": False, "reason": "journal cannot commit: disk full"})
    state = jp_serverapp.web_app.settings["hived"]
    state.service = None   # put back below: the service fixture stops it after the test
    try:
        code, doc = await readyz()
    finally:
        state.service = service
    assert code == 503 and doc["ready"] is False and "not started" in doc["reason"]
    r = await jp_fetch("hived", "api", "healthz", headers={})
    assert r.code == 200
