"""A job's request is stored once: a state change rewrites only the small rest of its record.

A member posting 190 KB jobs (long command or env) used to make every state change of those
jobs rewrite 190 KB under the service lock. The request never changes after submission: it is
written once, in ``job_requests``, and loading joins it back, byte for byte."""
import json
import sqlite3
from pathlib import Path

import pytest
from service_helpers import wait_until
from test_snapshot import crash, service

from hived.core.engine_records import request_to_dict
from hived.service import store as store_mod
from hived.service.store import SCHEMA_VERSION, SqliteStore, StoreDamaged

SPEC = Path(__file__).with_name("spec_small.yaml")
BIG_ENV = {f"BLOB{k}": "x" * 60_000 + "é\u2028\"\\" for k in range(3)}   # ~190 KB, with escapes
OLD_SCHEMA = store_mod.REQUEST_SCHEMA - 1


def big_record(job_id, state="queued", history=None, **more):
    return {"job_id": job_id,
            "request": {"user": "alice", "vc": "vca", "command": "run " + "y" * 5_000, "env": BIG_ENV,
                        "name": "big", "workdir": None, "labels": {"k": "v"}},
            "state": state, "submitted": 1.0,
            "history": history if history is not None else [[1.0, "queued", "submitted"]], **more}


def moved(rec, n):
    """The record after its n-th state change (a longer history, a new state)."""
    state = ("placed", "running", "preempting", "queued")[n % 4]
    return {**rec, "state": state, "queue_key": float(n),
            "history": rec["history"] + [[float(k + 2), "x", "y"] for k in range(n)]}


def wal_bytes(db: Path) -> int:
    wal = db.with_name(db.name + "-wal")
    return wal.stat().st_size if wal.exists() else 0


def truncate_wal(db: Path) -> None:
    con = sqlite3.connect(db)
    busy, _, _ = con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    con.close()
    assert busy == 0 and wal_bytes(db) == 0


def bytes_per_change(s: SqliteStore, rec: dict, changes: int = 4) -> float:
    truncate_wal(s.path)
    for n in range(1, changes + 1):
        s.update_job(moved(rec, n), now=float(n))
    return wal_bytes(s.path) / changes


def old_schema(monkeypatch):
    """Open stores at the schema before requests were stored apart (records written whole)."""
    monkeypatch.setattr(store_mod, "MIGRATIONS", store_mod.MIGRATIONS[:OLD_SCHEMA])
    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", OLD_SCHEMA)


def test_a_big_jobs_state_change_writes_only_the_small_part(tmp_path, monkeypatch):
    rec = big_record("j1")
    assert len(json.dumps(rec["request"])) > 185_000
    s = SqliteStore(tmp_path / "new")
    s.add_job(rec, now=1.0)
    new = bytes_per_change(s, rec)
    s.close()
    old_schema(monkeypatch)
    s = SqliteStore(tmp_path / "old")
    s.add_job(rec, now=1.0)
    old = bytes_per_change(s, rec)
    s.close()
    # a few pages (the row, the revision index, the commit frame) against the whole request again
    assert new < 20_000, new
    assert old > 185_000, old


def test_the_request_is_stored_once_and_joined_back(tmp_path):
    s = SqliteStore(tmp_path)
    rec = big_record("j1")
    s.add_job(rec, now=1.0)
    s.update_job(moved(rec, 3), now=2.0)
    [(stored_record,)] = s._db.execute("SELECT record FROM jobs").fetchall()
    [(stored_request,)] = s._db.execute("SELECT request FROM job_requests").fetchall()
    assert "request" not in json.loads(stored_record) and len(stored_record) < 2_000
    assert stored_request == store_mod._dumps(rec["request"])
    s.close()
    s = SqliteStore(tmp_path)
    [loaded] = s.load_jobs()
    assert loaded == moved(rec, 3)
    assert store_mod._dumps(loaded["request"]) == store_mod._dumps(rec["request"])
    assert s.load_jobs_by_id(["j1"]) == [(moved(rec, 3), 3.0)]


def test_forgotten_jobs_take_their_requests_with_them(tmp_path):
    s = SqliteStore(tmp_path)
    for j in ("j1", "j2", "j3"):
        s.add_job(big_record(j), now=1.0)
    s.delete_jobs(["j1", "j3"])
    assert [r["job_id"] for r in s.load_jobs()] == ["j2"]
    assert s._db.execute("SELECT COUNT(*) FROM job_requests").fetchone()[0] == 1
    assert s.load_jobs()[0]["request"]["env"] == BIG_ENV


def test_an_unreadable_request_is_refused_naming_the_job(tmp_path):
    s = SqliteStore(tmp_path)
    s.add_job(big_record("j7"), now=1.0)
    s._db.execute("UPDATE job_requests SET request='{\"user\": trunc'")
    with pytest.raises(StoreDamaged, match=r"the request of job j7 is not JSON") as err:
        s.load_jobs()
    assert "\n" not in str(err.value)


def test_an_old_journal_is_migrated_record_for_record(tmp_path, monkeypatch):
    """A journal written whole-record (schema 6, made here with that layout) opens with each
    request moved apart, the same records loaded, its old snapshot dropped (its hashes were of
    whole rows), and a record that is not JSON still refused by name."""
    old_schema(monkeypatch)
    s = SqliteStore(tmp_path)
    recs = [big_record("j1"), {**big_record("j2"), "request": {"user": "bob", "vc": "vcb", "command": "true"}}]
    for r in recs:
        s.add_job(r, now=1.0)
    recs[0] = moved(recs[0], 2)
    s.update_job(recs[0], now=2.0)
    s.save_snapshot("key", "", b"body", now=3.0)
    assert "job_requests" not in {r[0] for r in s._db.execute("SELECT name FROM sqlite_master")}
    old_rows = dict(s._db.execute("SELECT job_id, record FROM jobs").fetchall())
    assert old_rows["j1"] == store_mod._dumps(recs[0])     # the old layout: whole records
    s.close()
    monkeypatch.undo()

    s = SqliteStore(tmp_path)
    assert s.schema_version() == SCHEMA_VERSION
    assert s.load_jobs() == [{**r, "queue_key": r.get("queue_key")} for r in recs]
    requests = [q for (q,) in s._db.execute("SELECT request FROM job_requests ORDER BY seq")]
    assert requests == [store_mod._dumps(r["request"]) for r in recs]   # byte for byte
    assert all("request" not in json.loads(t) for (t,) in s._db.execute("SELECT record FROM jobs"))
    assert s.load_snapshot() is None
    # from now on a state change of the big job writes the small part only
    assert bytes_per_change(s, recs[0]) < 20_000
    s.close()


def test_a_damaged_record_stays_refused_after_the_migration(tmp_path, monkeypatch):
    old_schema(monkeypatch)
    s = SqliteStore(tmp_path)
    s.add_job(big_record("j1"), now=1.0)
    s.add_job(big_record("j2"), now=1.0)
    s._db.execute("UPDATE jobs SET record='{\"job_id\": \"j2\", trunc' WHERE job_id='j2'")
    s.close()
    monkeypatch.undo()
    s = SqliteStore(tmp_path)
    assert s.schema_version() == SCHEMA_VERSION
    with pytest.raises(StoreDamaged, match=r"the record of job j2 is not JSON"):
        s.load_jobs()
    assert s.load_jobs_by_id(["j1"])[0][0]["request"]["env"] == BIG_ENV


# ---------------------------------------------------------------- through the service


BIG_JOB = {"vc": "vca", "command": "python train.py " + "--flag " * 2_000, "env": BIG_ENV, "name": "big one",
           "gpus": 4, "job_class": "be"}


def running(svc, ids):
    def all_run():
        svc.tick()
        return all(svc.get_job(j)["state"] == "running" for j in ids)
    wait_until(all_run, what="the jobs to run")


def requests_of(svc):
    return {r.job_id: store_mod._dumps(request_to_dict(r.request)) for r in svc.eng.jobs()}


@pytest.mark.parametrize("stop", ["clean", "crash"])
def test_the_request_is_byte_identical_after_a_restart(tmp_path, stop):
    svc = service(tmp_path)
    big = svc.submit("alice", BIG_JOB)["id"]
    small = svc.submit("bob", {"vc": "vcb", "command": "true", "gpus": 1})["id"]
    running(svc, [big, small])
    svc.cancel(big, "alice")
    svc.tick()
    before = requests_of(svc)
    svc.close() if stop == "clean" else crash(svc)
    again = service(tmp_path)
    try:
        assert again.recovered["snapshot"] is (stop == "clean")
        assert requests_of(again) == before and set(before) == {big, small}
        stored = dict(again.store._db.execute(
            "SELECT j.job_id, r.request FROM jobs j JOIN job_requests r ON r.seq = j.seq").fetchall())
        assert stored == before
    finally:
        again.close()


def test_a_request_changed_behind_hived_is_not_hidden_by_the_snapshot(tmp_path):
    svc = service(tmp_path)
    jid = svc.submit("alice", BIG_JOB)["id"]
    svc.tick()
    svc.close()
    con = sqlite3.connect(tmp_path / "hived.db")
    con.execute("UPDATE job_requests SET request = replace(request, 'big one', 'big two')")
    con.commit()
    con.close()
    again = service(tmp_path)
    try:
        assert again.recovered["snapshot"] is False
        assert again.get_job(jid)["name"] == "big two"
    finally:
        again.close()


def test_a_service_journal_of_the_old_layout_restarts_the_same(tmp_path, monkeypatch):
    old_schema(monkeypatch)
    svc = service(tmp_path)
    ids = [svc.submit("alice", BIG_JOB)["id"], svc.submit("alice", BIG_JOB)["id"],
           svc.submit("bob", {"vc": "vcb", "command": "true", "gpus": 2})["id"]]
    running(svc, ids)
    before = {j: (svc.get_job(j)["state"], svc.get_job(j)["placement"]) for j in ids}
    reqs = requests_of(svc)
    crash(svc)
    monkeypatch.undo()
    svc = service(tmp_path)
    try:
        assert svc.store.schema_version() == SCHEMA_VERSION
        assert {j: (svc.get_job(j)["state"], svc.get_job(j)["placement"]) for j in ids} == before
        assert requests_of(svc) == reqs
    finally:
        svc.close()
