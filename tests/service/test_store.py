"""SqliteStore: round trips, transactions, schema versions, refusals."""
import sqlite3

import pytest

from hived.service import store as store_mod
from hived.service.store import SCHEMA_VERSION, SqliteStore, StoreError


def record(job_id, state="queued", history=None):
    return {"job_id": job_id, "state": state, "submitted": 1.0,
            "request": {"user": "alice", "vc": "vc1"},
            "history": history if history is not None else [[1.0, "queued", "submitted"]]}


def test_round_trip_keeps_submission_order(tmp_path):
    s = SqliteStore(tmp_path)
    for i in (3, 1, 2):
        s.add_job(record(f"j{i}"), now=1.0)
    placement = {"chain": "A", "opportunistic": False, "pods": [{"rank": 0, "node": "n0", "gpus": [0, 1]}]}
    s.update_job({**record("j1", "running", [[1.0, "queued", "submitted"], [2.0, "running", "started"]]),
                  "placement": placement, "queue_key": 7}, now=2.0)
    s.close()

    s = SqliteStore(tmp_path)
    assert [r["job_id"] for r in s.load_jobs()] == ["j3", "j1", "j2"]
    j1 = s.load_jobs()[1]
    assert j1["state"] == "running" and j1["placement"] == placement
    assert j1["history"] == [[1.0, "queued", "submitted"], [2.0, "running", "started"]]
    assert [k for _, k in s.load_jobs_with_keys()] == [None, 7, None]
    assert s._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert s.schema_version() == SCHEMA_VERSION


def test_duplicate_job_id_is_refused_and_transaction_rolls_back(tmp_path):
    s = SqliteStore(tmp_path)
    s.add_job(record("a"), now=1.0)
    with pytest.raises(sqlite3.IntegrityError):
        with s.transaction():
            s.add_job(record("b"), now=1.0)
            s.add_job(record("a"), now=1.0)   # duplicate: the whole batch goes
    assert [r["job_id"] for r in s.load_jobs()] == ["a"]
    with pytest.raises(StoreError, match="not stored"):
        s.update_job(record("zz"), now=1.0)


def _tables(s):
    return {r[0] for r in s._db.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def test_the_tables_nothing_read_are_dropped_from_an_old_journal(tmp_path, monkeypatch):
    """Bindings, preemptions and job history repeated what each job's record holds: a journal
    of schema 4 loses them on opening, keeps every job, and takes its queue key from the
    old column for records written before they carried it."""
    monkeypatch.setattr(store_mod, "MIGRATIONS", store_mod.MIGRATIONS[:4])
    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", 4)
    s = SqliteStore(tmp_path)
    with s.transaction():
        s._db.execute("INSERT INTO jobs (job_id, user, vc, state, submitted, updated, qkey, record) "
                      "VALUES ('j1', 'alice', 'vc1', 'queued', 1.0, 1.0, -3, ?)",
                      (store_mod._dumps(record("j1")),))
        s._db.execute("INSERT INTO job_history (job_id, time, state, reason) VALUES ('j1', 1.0, 'queued', 's')")
        s._db.execute("INSERT INTO bindings VALUES ('j1', 1, 'A', 0, '{}', 1.0)")
        s._db.execute("INSERT INTO preemptions (job_id, time, reason) VALUES ('j1', 1.0, 'x')")
    assert {"bindings", "preemptions", "job_history", "exchange_ledger"} <= _tables(s)
    s.close()
    monkeypatch.undo()

    s = SqliteStore(tmp_path)
    assert s.schema_version() == SCHEMA_VERSION
    assert not {"bindings", "preemptions", "job_history", "exchange_ledger"} & _tables(s)
    [(j1, key)] = s.load_jobs_with_keys()
    assert j1["job_id"] == "j1" and j1["history"] == [[1.0, "queued", "submitted"]]
    assert key == -3 and j1["queue_key"] == -3


def test_exchange_state_round_trip(tmp_path):
    s = SqliteStore(tmp_path)
    assert s.load_exchange() is None
    s.save_exchange({"version": 1, "seq": 2}, now=1.0)
    s.save_exchange({"version": 1, "seq": 3}, now=2.0)   # replaces: one document
    s.close()
    s = SqliteStore(tmp_path)
    assert s.load_exchange() == {"version": 1, "seq": 3}
    assert s._db.execute("SELECT COUNT(*) FROM exchange").fetchone()[0] == 1


def test_old_schema_is_migrated(tmp_path, monkeypatch):
    monkeypatch.setattr(store_mod, "MIGRATIONS", store_mod.MIGRATIONS[:1])
    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", 1)
    s = SqliteStore(tmp_path)
    s.add_job(record("old"), now=1.0)
    assert s.schema_version() == 1
    s.close()
    monkeypatch.undo()
    s = SqliteStore(tmp_path)
    assert s.schema_version() == SCHEMA_VERSION
    assert [r["job_id"] for r in s.load_jobs()] == ["old"]
    s.set_meta("spec", "x")          # table from migration 2
    assert s.get_meta("spec") == "x"


def test_newer_schema_is_refused_and_not_rewritten(tmp_path):
    s = SqliteStore(tmp_path)
    s._db.execute("INSERT INTO schema_version VALUES (?, 'from the future', 0)", (SCHEMA_VERSION + 5,))
    s.close()
    before = (tmp_path / "hived.db").read_bytes()
    with pytest.raises(StoreError, match=rf"schema version {SCHEMA_VERSION + 5} was written by a newer hived"):
        SqliteStore(tmp_path)
    assert (tmp_path / "hived.db").read_bytes() == before


def test_foreign_database_is_refused(tmp_path):
    db = tmp_path / "other.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE customers (id INTEGER)")
    con.commit()
    con.close()
    before = db.read_bytes()
    with pytest.raises(StoreError, match="foreign SQLite database .*customers"):
        SqliteStore(db)
    assert db.read_bytes() == before


def test_not_a_database_is_refused(tmp_path):
    (tmp_path / "hived.db").write_text("hello, this is not sqlite" * 100)
    with pytest.raises(StoreError, match="not a hived database"):
        SqliteStore(tmp_path)


def test_bad_synchronous_setting(tmp_path):
    with pytest.raises(StoreError, match="synchronous"):
        SqliteStore(tmp_path, synchronous="sometimes")


def test_failing_migration_changes_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(store_mod, "MIGRATIONS", store_mod.MIGRATIONS[:1])
    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", 1)
    s = SqliteStore(tmp_path)
    s.add_job(record("kept"), now=1.0)
    s.close()
    broken = store_mod.MIGRATIONS[:1] + [("a broken one", ["CREATE TABLE ok_so_far (x)", "ALTER TABLE nope ADD y"])]
    monkeypatch.setattr(store_mod, "MIGRATIONS", broken)
    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", 2)
    with pytest.raises(StoreError, match=r"migration 2 \(a broken one\) failed: no such table: nope; "
                                         r"nothing was changed \(the database stays at schema version 1\)"):
        SqliteStore(tmp_path)
    monkeypatch.undo()
    con = sqlite3.connect(tmp_path / "hived.db")
    assert con.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] == 1
    assert not con.execute("SELECT name FROM sqlite_master WHERE name='ok_so_far'").fetchone()
    con.close()
    s = SqliteStore(tmp_path)          # the real migrations still apply afterwards
    assert s.schema_version() == SCHEMA_VERSION and [r["job_id"] for r in s.load_jobs()] == ["kept"]
