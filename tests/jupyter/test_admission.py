"""Admission limits against a real ``hived serve``: a member who floods the service with jobs, or
with bytes, is refused with 429 and one line naming the limit (and when to try again, for
rates), and nothing of the refused submission is stored; the other team is not touched."""
from __future__ import annotations

import pytest
import requests

from .conftest import SPEC, LiveServer

LIMITS = {"vca": "    admission: {maxQueued: 3, maxQueuedPerUser: 2, maxJournalBytes: 5000, "
                 "maxJournalBytesPerUser: 3000}\n",
          "vcb": "    admission: {submitsPerSecondPerUser: 0.001}\n"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("admission")
    text = SPEC.read_text()
    text = text.replace("    admins: [ada]\n", "    admins: [ada]\n" + LIMITS["vca"])
    text = text.replace("    users: [bob]\n", "    users: [bob]\n" + LIMITS["vcb"])
    spec = tmp / "spec.yaml"
    spec.write_text(text)
    srv = LiveServer(tmp, launcher="hived.testing.launcher_noop.NoopLauncher", spec=spec)
    yield srv
    srv.stop()


def submit(server, user, vc, env_bytes=0, gpus=4):
    body = {"vc": vc, "command": "true", "gpus": gpus, **({"env": {"X": "a" * env_bytes}} if env_bytes else {})}
    return requests.post(server.api + "jobs", json=body, headers={"Authorization": f"token tok-{user}"}, timeout=30)


def jobs_of(server, vc):
    r = requests.get(server.api + "jobs", params={"vc": vc}, headers={"Authorization": "token tok-root"}, timeout=30)
    return r.json()["jobs"]


def refused(r, key):
    assert r.status_code == 429, r.text
    doc = r.json()
    assert f"(admission.{key})" in doc["error"] and "\n" not in doc["error"], doc
    return doc


def test_submissions_per_second_are_limited_with_retry_after(server):
    first = submit(server, "bob", "vcb")
    assert first.status_code == 201, first.text
    r = submit(server, "bob", "vcb")
    doc = refused(r, "submitsPerSecondPerUser")
    assert doc["error"].startswith("user 'bob' submits more than 0.001 jobs per second"), doc
    assert int(r.headers["Retry-After"]) >= 1
    assert [j["user"] for j in jobs_of(server, "vcb")].count("bob") == 1    # the refused one is not stored


def test_queued_jobs_and_journal_bytes_are_limited_per_user_and_per_vc(server):
    assert submit(server, "ada", "vca", env_bytes=2500).status_code == 201      # 2505 bytes, runs
    refused(submit(server, "ada", "vca", env_bytes=600), "maxJournalBytesPerUser")
    assert submit(server, "alice", "vca", env_bytes=2400).status_code == 201    # VC: 4910 bytes, runs
    doc = refused(submit(server, "anna", "vca", env_bytes=200), "maxJournalBytes")
    assert "would take 5115 bytes, over its limit of 5000" in doc["error"], doc
    for _ in range(2):
        assert submit(server, "alice", "vca").status_code == 201                # alice: 2 queued
    doc = refused(submit(server, "alice", "vca"), "maxQueuedPerUser")
    assert doc["error"].startswith("user 'alice' has 2 queued jobs in VC 'vca'"), doc
    assert "Retry-After" not in submit(server, "alice", "vca").headers
    assert submit(server, "anna", "vca").status_code == 201                     # VC: 3 queued
    doc = refused(submit(server, "root", "vca"), "maxQueued")
    assert doc["error"].startswith("VC 'vca' has 3 queued jobs"), doc
    assert len(jobs_of(server, "vca")) == 5
    # the other team is not held back by vca's limits (root: bob's one submission may be spent
    # by the rate test, which may run before or after this one)
    r = submit(server, "root", "vcb")
    assert r.status_code == 201, r.text
    assert {j["state"] for j in jobs_of(server, "vcb")} <= {"queued", "placed", "running"}
