"""Durable state of the scheduler service.

``Store`` is the small interface the service writes through; ``SqliteStore``
is the embedded default: one SQLite file (stdlib ``sqlite3``, WAL journal)
under the service's data directory. It holds the jobs (their JSON record as
``JobRecord.to_dict`` gives it, in submission order), their state history,
the cell bindings of jobs that hold cells, preemptions and the exchange
ledger.

The service's rule is "write, then act": a binding is committed before the
launcher starts the gang, so that a restart after ``kill -9`` at any instant
finds every accepted job once, in its queue order, with its cells.

The schema is versioned (``schema_version`` table, one row per applied
migration) and the file is stamped with an SQLite ``application_id``. A file
stamped by another application, or migrated by a newer hived, is refused
with a message saying so; it is never rewritten.
"""
from __future__ import annotations

import abc
import contextlib
import json
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Optional

# "HIVD": marks the file as ours (PRAGMA application_id is a 32-bit int in the header).
APPLICATION_ID = 0x48495644
DB_NAME = "hived.db"


class StoreError(RuntimeError):
    """The store cannot be opened or used (the message says why and what to do)."""


# Each migration takes the schema from version i to i+1. Append only: a
# shipped migration is never edited, a change is a new entry.
MIGRATIONS: list[tuple[str, list[str]]] = [
    ("jobs, history, bindings, preemptions, exchange ledger", [
        """CREATE TABLE jobs (
               seq INTEGER PRIMARY KEY AUTOINCREMENT,   -- submission order = queue order
               job_id TEXT NOT NULL UNIQUE,
               user TEXT NOT NULL, vc TEXT NOT NULL, state TEXT NOT NULL,
               submitted REAL NOT NULL, updated REAL NOT NULL,
               qkey REAL,                               -- position in the VC queue (engine order)
               record TEXT NOT NULL)""",
        """CREATE TABLE job_history (
               id INTEGER PRIMARY KEY AUTOINCREMENT,
               job_id TEXT NOT NULL, time REAL NOT NULL, state TEXT NOT NULL, reason TEXT NOT NULL)""",
        """CREATE TABLE bindings (
               job_id TEXT PRIMARY KEY, attempt INTEGER NOT NULL, chain TEXT NOT NULL,
               opportunistic INTEGER NOT NULL, placement TEXT NOT NULL, bound_at REAL NOT NULL)""",
        """CREATE TABLE preemptions (
               id INTEGER PRIMARY KEY AUTOINCREMENT,
               job_id TEXT NOT NULL, time REAL NOT NULL, reason TEXT NOT NULL)""",
        """CREATE TABLE exchange_ledger (
               id INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, entry TEXT NOT NULL)""",
    ]),
    ("meta table, indexes for state and history look-ups", [
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE INDEX jobs_state ON jobs(state)",
        "CREATE INDEX job_history_job ON job_history(job_id)",
    ]),
    # nothing looks jobs up by state (the engine holds them in memory); the
    # index cost one more page in every commit's fsync
    ("drop the unused jobs(state) index", [
        "DROP INDEX IF EXISTS jobs_state",
    ]),
]
SCHEMA_VERSION = len(MIGRATIONS)


class Store(abc.ABC):
    """What the service needs from durable state. All records are JSON dicts."""

    @abc.abstractmethod
    def transaction(self) -> contextlib.AbstractContextManager:
        """Group writes into one atomic commit (nestable)."""

    @abc.abstractmethod
    def add_job(self, record: dict, now: float, qkey: Optional[float] = None) -> None: ...

    @abc.abstractmethod
    def update_job(self, record: dict, now: float, new_history: list, qkey: Optional[float] = None) -> None: ...

    @abc.abstractmethod
    def bind(self, job_id: str, attempt: int, placement: dict, now: float) -> None: ...

    @abc.abstractmethod
    def unbind(self, job_id: str) -> None: ...

    @abc.abstractmethod
    def add_preemption(self, job_id: str, now: float, reason: str) -> None: ...

    @abc.abstractmethod
    def add_ledger(self, entry: dict, now: float) -> None: ...

    @abc.abstractmethod
    def load_jobs(self) -> list[dict]:
        """Every stored job record, in submission order."""

    @abc.abstractmethod
    def load_jobs_with_keys(self) -> list[tuple[dict, Optional[float]]]:
        """(record, queue key) in submission order; the key orders queued jobs."""

    @abc.abstractmethod
    def load_bindings(self) -> dict[str, dict]:
        """job id -> {"attempt", "placement"} for jobs holding cells."""

    @abc.abstractmethod
    def history(self, job_id: str) -> list[tuple[float, str, str]]: ...

    @abc.abstractmethod
    def ledger(self) -> list[dict]: ...

    @abc.abstractmethod
    def close(self) -> None: ...


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), sort_keys=False)


class SqliteStore(Store):
    """The embedded store: ``<data_dir>/hived.db`` (or any path ending in .db).

    ``synchronous="FULL"`` (default) fsyncs the WAL at each commit, so an
    acknowledged submission survives a power cut too; ``"NORMAL"`` survives
    a killed process but not a crashed machine, and is faster.
    """

    def __init__(self, path: str | os.PathLike, *, synchronous: str = "FULL"):
        path = Path(path)
        if path.suffix != ".db":
            path.mkdir(parents=True, exist_ok=True)
            path = path / DB_NAME
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
        if synchronous.upper() not in ("FULL", "NORMAL", "OFF", "EXTRA"):
            raise StoreError(f"synchronous: must be FULL, NORMAL, EXTRA or OFF, got {synchronous!r}")
        self.path = path
        self._lock = threading.RLock()
        self._depth = 0
        existed = path.exists() and path.stat().st_size > 0
        # autocommit mode: transactions are explicit (BEGIN IMMEDIATE ... COMMIT)
        try:
            self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False, timeout=30.0)
        except sqlite3.Error as exc:
            raise StoreError(f"{path}: cannot open the database ({exc})") from exc
        try:
            try:
                self._check_ownership(existed)
            except sqlite3.DatabaseError as exc:
                raise StoreError(f"{path}: not a hived database ({exc}); refusing to touch it. "
                                 f"Use another --data-dir or move the file away.") from exc
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={synchronous.upper()}")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except BaseException:
            self._db.close()   # refused: let go of the file at once
            raise

    # -- opening ---------------------------------------------------------

    def _check_ownership(self, existed: bool) -> None:
        """Refuse a file that some other program (or a newer hived) wrote."""
        app_id = self._db.execute("PRAGMA application_id").fetchone()[0]
        tables = {r[0] for r in self._db.execute(
            "SELECT name FROM sqlite_master WHERE type='table'")}
        if app_id == 0 and not tables:
            return  # a new, empty file: ours to initialise
        if app_id != APPLICATION_ID:
            raise StoreError(
                f"{self.path}: foreign SQLite database (application_id={app_id:#x}, tables: "
                f"{', '.join(sorted(tables)) or 'none'}); hived refuses to modify it. "
                f"Use another --data-dir.")
        version = self.schema_version()
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path}: schema version {version} was written by a newer hived "
                f"(this one knows up to {SCHEMA_VERSION}); refusing to open it. Upgrade hived, "
                f"or use another --data-dir.")

    def schema_version(self) -> int:
        try:
            row = self._db.execute("SELECT MAX(version) FROM schema_version").fetchone()
        except sqlite3.OperationalError:
            return 0
        return int(row[0] or 0)

    def _migrate(self) -> None:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute("CREATE TABLE IF NOT EXISTS schema_version ("
                                 "version INTEGER PRIMARY KEY, description TEXT NOT NULL, "
                                 "applied_at REAL NOT NULL)")
                self._db.execute(f"PRAGMA application_id={APPLICATION_ID}")
                current = self.schema_version()
                for number, (description, statements) in enumerate(MIGRATIONS, start=1):
                    if number <= current:
                        continue
                    try:
                        for sql in statements:
                            self._db.execute(sql)
                    except sqlite3.Error as exc:
                        raise StoreError(
                            f"{self.path}: migration {number} ({description}) failed: {exc}; "
                            f"nothing was changed (the database stays at schema version {current})") from exc
                    self._db.execute("INSERT INTO schema_version VALUES (?, ?, ?)",
                                     (number, description, time.time()))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    # -- transactions ----------------------------------------------------

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        with self._lock:
            outer = self._depth == 0
            if outer:
                self._db.execute("BEGIN IMMEDIATE")
            self._depth += 1
            try:
                yield
            except BaseException:
                self._depth -= 1
                if outer:
                    self._db.execute("ROLLBACK")
                raise
            self._depth -= 1
            if outer:
                self._db.execute("COMMIT")

    def _exec(self, sql: str, args: tuple = ()) -> sqlite3.Cursor:
        with self.transaction():
            return self._db.execute(sql, args)

    # -- writes ----------------------------------------------------------

    def add_job(self, record: dict, now: float, qkey: Optional[float] = None) -> None:
        req = record["request"]
        with self.transaction():
            self._db.execute(
                "INSERT INTO jobs (job_id, user, vc, state, submitted, updated, qkey, record) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (record["job_id"], req["user"], req["vc"], record["state"],
                 record.get("submitted") or now, now, qkey, _dumps(record)))
            self._add_history(record["job_id"], record.get("history", []))

    def update_job(self, record: dict, now: float, new_history: list, qkey: Optional[float] = None) -> None:
        with self.transaction():
            cur = self._db.execute("UPDATE jobs SET state=?, updated=?, qkey=?, record=? WHERE job_id=?",
                                   (record["state"], now, qkey, _dumps(record), record["job_id"]))
            if cur.rowcount != 1:
                raise StoreError(f"update_job: job {record['job_id']!r} is not stored")
            self._add_history(record["job_id"], new_history)

    def _add_history(self, job_id: str, entries: list) -> None:
        if entries:
            self._db.executemany("INSERT INTO job_history (job_id, time, state, reason) VALUES (?, ?, ?, ?)",
                                 [(job_id, float(t), str(s), str(r)) for t, s, r in entries])

    def bind(self, job_id: str, attempt: int, placement: dict, now: float) -> None:
        self._exec("INSERT OR REPLACE INTO bindings VALUES (?, ?, ?, ?, ?, ?)",
                   (job_id, attempt, placement["chain"], int(bool(placement.get("opportunistic"))),
                    _dumps(placement), now))

    def unbind(self, job_id: str) -> None:
        self._exec("DELETE FROM bindings WHERE job_id=?", (job_id,))

    def add_preemption(self, job_id: str, now: float, reason: str) -> None:
        self._exec("INSERT INTO preemptions (job_id, time, reason) VALUES (?, ?, ?)",
                   (job_id, now, reason))

    def add_ledger(self, entry: dict, now: float) -> None:
        self._exec("INSERT INTO exchange_ledger (time, entry) VALUES (?, ?)", (now, _dumps(entry)))

    def set_meta(self, key: str, value: str) -> None:
        self._exec("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def get_meta(self, key: str) -> Optional[str]:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else None

    # -- reads -----------------------------------------------------------

    def load_jobs(self) -> list[dict]:
        with self._lock:
            rows = self._db.execute("SELECT record FROM jobs ORDER BY seq").fetchall()
        return [json.loads(r[0]) for r in rows]

    def load_jobs_with_keys(self) -> list[tuple[dict, Optional[float]]]:
        with self._lock:
            rows = self._db.execute("SELECT record, qkey FROM jobs ORDER BY seq").fetchall()
        return [(json.loads(r), k) for r, k in rows]

    def load_bindings(self) -> dict[str, dict]:
        with self._lock:
            rows = self._db.execute("SELECT job_id, attempt, placement FROM bindings").fetchall()
        return {j: {"attempt": a, "placement": json.loads(p)} for j, a, p in rows}

    def history(self, job_id: str) -> list[tuple[float, str, str]]:
        with self._lock:
            rows = self._db.execute("SELECT time, state, reason FROM job_history WHERE job_id=? "
                                    "ORDER BY id", (job_id,)).fetchall()
        return [tuple(r) for r in rows]

    def preemptions(self, job_id: Optional[str] = None) -> list[tuple[str, float, str]]:
        with self._lock:
            sql = "SELECT job_id, time, reason FROM preemptions"
            rows = (self._db.execute(sql + " WHERE job_id=? ORDER BY id", (job_id,)) if job_id
                    else self._db.execute(sql + " ORDER BY id")).fetchall()
        return [tuple(r) for r in rows]

    def ledger(self) -> list[dict]:
        with self._lock:
            rows = self._db.execute("SELECT time, entry FROM exchange_ledger ORDER BY id").fetchall()
        return [dict(json.loads(e), time=t) for t, e in rows]

    def count_jobs(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM jobs").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None  # type: ignore[assignment]
