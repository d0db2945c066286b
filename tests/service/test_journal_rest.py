"""Through the REST API: while the journal cannot commit, a submission answers 503 with
the reason (not a bare 500) and changes nothing; once commits succeed it is accepted."""
import json
from pathlib import Path

import pytest
from tornado.httpclient import HTTPClientError

from service_helpers import FailingCommits

SPEC = Path(__file__).with_name("spec_small.yaml")


@pytest.fixture
def jp_server_config(tmp_path):
    return {
        "ServerApp": {"jpserver_extensions": {"hived.jupyter_ext": True},
                      "identity_provider_class": "hived.jupyter_ext.auth.HivedIdentityProvider"},
        "HivedIdentityProvider": {"user_tokens": {"tok-alice": "alice"}},
        "HivedExtension": {"spec_path": str(SPEC), "data_dir": str(tmp_path / "data"), "tick_seconds": 0.05},
    }


async def post_job(jp_fetch):
    try:
        r = await jp_fetch("hived", "api", "jobs", method="POST",
                           body=json.dumps({"vc": "vca", "command": "true", "gpus": 1}),
                           headers={"Authorization": "token tok-alice", "Content-Type": "application/json"})
    except HTTPClientError as exc:
        r = exc.response
    return r.code, json.loads(r.body.decode())


async def test_submit_answers_503_with_the_reason_while_degraded(jp_fetch, jp_serverapp):
    svc = jp_serverapp.web_app.settings["hived"].service
    disk = FailingCommits(svc.store).fail()
    code, doc = await post_job(jp_fetch)
    assert code == 503, doc
    assert "the journal cannot be written" in doc["error"] and "disk is full" in doc["error"]
    assert svc.list_jobs() == [] and svc.readiness()[0] is False
    disk.heal()
    code, doc = await post_job(jp_fetch)
    assert code in (200, 201) and doc["state"] == "queued"
    assert svc.readiness() == (True, "")
