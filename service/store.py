"""Durable state of the scheduler service.

``Store`` is the small interface the service writes through; ``SqliteStore``
is the embedded default: one SQLite file (stdlib ``sqlite3``, WAL journal)
under the service's data directory. It holds the jobs (their JSON record as
``JobRecord.to_dict`` gives it, in submission order: the record carries the
job's cells, its queue key and its history; its ``request``, which never
changes after submission, is stored once in a table of its own, so that a
state change rewrites only the rest), the cell exchange's board,
exchanges and GPU-hour ledger (one document), requests acknowledged before
their job's record says so (intents) and a few settings (meta).

The service's rule is "write, then act": a job's record with its cells is
committed before the launcher starts the gang, so that a restart after
``kill -9`` at any instant finds every accepted job once, in its queue order,
with its cells.

The schema is versioned (``schema_version`` table, one row per applied
migration) and the file is stamped with an SQLite ``application_id``. A file
stamped by another application, or migrated by a newer hived, is refused
with a message saying so; it is never rewritten. Neither is a damaged one:
opening runs SQLite's ``quick_check`` before anything is written, and a file
that fails it raises ``StoreDamaged``.

A write that cannot be committed (disk full, I/O error) raises
``JournalWriteError`` after rolling the transaction back, so the caller knows
that nothing of it is durable. The file and its ``-wal``/``-shm`` companions
are private to the account running the service (mode 0600).
"""
from __future__ import annotations

import abc
import contextlib
import dataclasses
import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

# "HIVD": marks the file as ours (PRAGMA application_id is a 32-bit int in the header).
APPLICATION_ID = 0x48495644
DB_NAME = "hived.db"


class StoreError(RuntimeError):
    """The store cannot be opened or used (the message says why and what to do)."""


class StoreDamaged(StoreError):
    """The database is corrupt or truncated: refused at start-up, never written to.
    ``hived serve`` exits with ``EXIT_CODE`` (distinct from the other refusals)."""

    EXIT_CODE = 6


class JournalWriteError(StoreError):
    """A transaction could not be committed (disk full, I/O error); it was rolled back.
    ``cause``: what failed, without paths (fit for any user to read)."""

    def __init__(self, message: str, cause: str):
        super().__init__(message)
        self.cause = cause


# SQLite files start with this (the "magic string" of the file format)
SQLITE_MAGIC = b"SQLite format 3\x00"


def _write_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is the disk or the file failing (rather than a bug or a constraint)."""
    if isinstance(exc, OSError):
        return True
    return isinstance(exc, sqlite3.OperationalError) or type(exc) is sqlite3.DatabaseError


def _split_requests(db: sqlite3.Connection) -> None:
    """Migration 7: move each stored record's request to ``job_requests``, leaving the rest in
    ``jobs.record``. A record that is not JSON stays as it is (opening still refuses it, naming it)."""
    last = 0
    while True:
        rows = db.execute("SELECT seq, record FROM jobs WHERE seq > ? ORDER BY seq LIMIT 500", (last,)).fetchall()
        if not rows:
            return
        for seq, text in rows:
            last = seq
            try:
                record = json.loads(text)
            except ValueError:
                continue
            if not isinstance(record, dict) or not isinstance(record.get("request"), dict):
                continue
            request = record.pop("request")
            db.execute("INSERT INTO job_requests (seq, request) VALUES (?, ?)", (seq, _dumps(request)))
            db.execute("UPDATE jobs SET record=? WHERE seq=?", (_dumps(record), seq))


# Each migration takes the schema from version i to i+1. Append only: a
# shipped migration is never edited, a change is a new entry.
# A step is SQL text, or a function of the connection for what SQL alone cannot do.
MigrationStep = str | Callable[[sqlite3.Connection], None]
MIGRATIONS: list[tuple[str, list[MigrationStep]]] = [
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
    # a cancel is made durable here before the engine acts on it, so that a
    # journal that cannot take the job's new state still keeps the request
    ("intents: requests acknowledged before the job's new state is written", [
        """CREATE TABLE intents (
               job_id TEXT NOT NULL, kind TEXT NOT NULL, user TEXT NOT NULL, time REAL NOT NULL,
               PRIMARY KEY (job_id, kind))""",
    ]),
    # Each job's record holds its placement, history and preemptions: these tables only
    # repeated it, cost rows in every commit, and nothing read them. The exchange is
    # kept whole (board, exchanges, ledger) so that a restart resumes it.
    ("drop bindings, preemptions and job_history (the job records hold them); "
     "the cell exchange's state", [
        "DROP TABLE IF EXISTS bindings",
        "DROP TABLE IF EXISTS preemptions",
        "DROP INDEX IF EXISTS job_history_job",
        "DROP TABLE IF EXISTS job_history",
        "DROP TABLE IF EXISTS exchange_ledger",
        """CREATE TABLE exchange (
               id INTEGER PRIMARY KEY CHECK (id = 1),   -- one document
               state TEXT NOT NULL, updated REAL NOT NULL)""",
    ]),
    # a restart loads the snapshot and replays only the jobs written after it (service/snapshot.py)
    ("job revisions and the restart snapshot", [
        # rev: the journal revision of the job's last write
        "ALTER TABLE jobs ADD COLUMN rev INTEGER NOT NULL DEFAULT 0",
        # the tail's look-up reads this index, not the records (rev sits after them in each row)
        "CREATE INDEX jobs_rev ON jobs(rev)",
        """CREATE TABLE snapshot (
               id INTEGER PRIMARY KEY CHECK (id = 1),   -- one snapshot
               key TEXT NOT NULL,        -- format, code and spec it was taken with
               rev INTEGER NOT NULL,     -- the journal revision it holds every write up to
               exchange TEXT NOT NULL,   -- sha256 of the exchange document it holds
               sha256 TEXT NOT NULL,     -- of body
               body BLOB NOT NULL, taken REAL NOT NULL)""",
    ]),
    # A job's request (command, env, name, ...) never changes after submission: it is written
    # once, and a state change rewrites only the rest of the record (a 190 KB request made
    # every state change of its job write 190 KB under the service lock).
    ("job requests stored once (job_requests), apart from the record each state change rewrites", [
        """CREATE TABLE job_requests (
               seq INTEGER PRIMARY KEY,      -- jobs.seq of its job
               request TEXT NOT NULL)        -- the request as JSON, written at submission only""",
        _split_requests,
        # its record hashes are of whole records: the next start replays the journal in full
        "DELETE FROM snapshot",
    ]),
]
SCHEMA_VERSION = len(MIGRATIONS)
REV_SCHEMA = 6   # the migration that added jobs.rev and the snapshot table
REQUEST_SCHEMA = 7   # the migration that moved the requests to job_requests


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """The stored restart snapshot, as read (its body not yet checked)."""
    key: str
    rev: int
    exchange: str
    sha256: str
    body: bytes


class Store(abc.ABC):
    """What the service needs from durable state. All records are JSON dicts."""

    @abc.abstractmethod
    def transaction(self, *, sync: bool = True) -> contextlib.AbstractContextManager:
        """Group writes into one atomic commit (nestable). ``sync=False``: the commit need not
        be durable when the block ends; ``sync_through(commit_ticket)`` makes it so later."""

    @property
    def commit_ticket(self) -> int:
        """Commits made so far; ``sync_through`` of a value taken after a commit covers it."""
        return 0

    def sync_through(self, ticket: int) -> None:
        """Return once every commit up to ``ticket`` is durable (a store whose commits always
        are has nothing to do)."""
        return None

    @abc.abstractmethod
    def add_job(self, record: dict, now: float) -> None:
        """A new job's record (its ``queue_key`` is kept as the queue key)."""

    @abc.abstractmethod
    def update_job(self, record: dict, now: float) -> None:
        """A stored job's record, replaced; its ``request`` is the one ``add_job`` stored (a job's
        request never changes after submission, and a store may keep it apart, written once)."""

    @abc.abstractmethod
    def load_jobs(self) -> list[dict]:
        """Every stored job record, in submission order."""

    @abc.abstractmethod
    def load_jobs_with_keys(self) -> list[tuple[dict, float | None]]:
        """(record, queue key) in submission order; the key orders queued jobs."""

    @abc.abstractmethod
    def save_exchange(self, state: dict, now: float) -> None:
        """The cell exchange's state (``core.exchange_state``), replacing what was saved."""

    @abc.abstractmethod
    def load_exchange(self) -> dict | None:
        """The saved cell exchange state, None when none was ever saved."""

    @abc.abstractmethod
    def close(self) -> None: ...

    # Intents: a request acknowledged before the job's record says so.
    def add_intent(self, job_id: str, kind: str, user: str, now: float) -> None:
        raise NotImplementedError(f"{type(self).__name__} keeps no intents")

    def clear_intents(self, job_ids) -> None:
        raise NotImplementedError(f"{type(self).__name__} keeps no intents")

    def intents(self) -> list[tuple[str, str, str, float]]:
        """(job id, kind, user, time) of every intent not yet cleared, oldest first."""
        return []

    # Metadata (spec text, retention policies, disk quotas, the last journal check).
    @abc.abstractmethod
    def get_meta(self, key: str) -> str | None: ...

    @abc.abstractmethod
    def set_meta(self, key: str, value: str) -> None: ...

    def delete_jobs(self, job_ids: Iterable[str]) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot remove jobs")

    # The restart snapshot (service/snapshot.py): a store without one always replays in full.
    def save_snapshot(self, key: str, exchange: str, body: bytes, now: float) -> bool:
        """Keep ``body`` as the snapshot of every write so far; False: this store keeps none."""
        return False

    def load_snapshot(self) -> Snapshot | None:
        return None

    def job_ids(self) -> set[str]:
        """Every stored job's id."""
        return {d["job_id"] for d in self.load_jobs()}

    def written_after(self, rev: int) -> list[str]:
        """The ids of the jobs last written at a journal revision above ``rev``."""
        return []

    def load_jobs_by_id(self, job_ids: Iterable[str]) -> list[tuple[dict, float | None]]:
        """(record, queue key) of the named jobs, in submission order."""
        wanted = set(job_ids)
        return [(d, k) for d, k in self.load_jobs_with_keys() if d["job_id"] in wanted]

    def exchange_digest(self) -> str:
        """sha256 of the stored exchange document ("" when none)."""
        return ""

    def record_hashes(self, upto_rev: int | None = None) -> dict[str, bytes]:
        """sha256 digest of each stored job record, as stored (of those written at or before ``upto_rev``)."""
        return {}


def _inode(path: Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None


def _private_dir(path: Path) -> None:
    """The data directory: created, or narrowed, to its owner only (it holds every job's env)."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.stat().st_uid == os.geteuid() and path.stat().st_mode & 0o077:
        os.chmod(path, 0o700)


def _damaged(path: Path, what: str) -> str:
    what = " ".join(what.split())   # one line, whatever SQLite said
    return (f"{path}: the database is damaged ({what}); hived will not write to it. Restore it from a "
            f"backup, or move it away to start an empty journal (job ids continue where they were)")


def _check_header(path: Path) -> None:
    """Refuse, before SQLite sees it, a file that is not ours to open or that was cut short."""
    with open(path, "rb") as f:
        head = f.read(100)
    if not head.startswith(SQLITE_MAGIC[:6]):
        raise StoreError(f"{path}: not a hived database (not an SQLite file); refusing to touch it. "
                         f"Use another --data-dir or move the file away.")
    if not head.startswith(SQLITE_MAGIC) or len(head) < 100:
        raise StoreDamaged(_damaged(path, f"the file is only {path.stat().st_size} bytes"
                                    if len(head) < 100 else "bad header"))
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    pages = int.from_bytes(head[28:32], "big")
    wal = path.with_name(path.name + "-wal")
    if wal.exists() and wal.stat().st_size > 0:
        return   # pages may live in the WAL still (an unfinished checkpoint): quick_check reads both
    # the header's page count is valid when its change counter matches (bytes 24 and 92)
    if pages and head[24:28] == head[92:96] and path.stat().st_size < pages * page:
        raise StoreDamaged(_damaged(path, f"truncated: {path.stat().st_size} bytes, the header says "
                                    f"{pages} pages of {page}"))


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), sort_keys=False)


class SqliteStore(Store):
    """The embedded store: ``<data_dir>/hived.db`` (or any path ending in .db).

    ``synchronous="FULL"`` (default) makes every commit durable before it is
    acknowledged, so an acknowledged submission survives a power cut too;
    ``"NORMAL"`` survives a killed process but not a crashed machine, and is
    faster.

    Group commit (FULL): SQLite itself runs with ``synchronous=NORMAL`` (a
    commit writes the WAL without fsync), and the store fsyncs the WAL file
    itself: ``transaction()`` does so at once, while ``transaction(sync=False)``
    leaves it to ``sync_through(ticket)``, which the caller runs after letting
    go of its own lock. Commits made while one fsync runs all ride on the
    next one: concurrent submissions share an fsync, and each is still
    answered only once its commit is on disk. A checkpoint moves only WAL
    frames SQLite has synced, so nothing committed is ever lost by it.

    ``check``: ``"full"`` (default) runs ``PRAGMA integrity_check`` on an
    existing file before anything is written (about 60 ms for 10,000 jobs,
    1 s for 100,000: benchmarks/bench_store_check.py); ``"quick"`` runs
    ``quick_check`` (about half that; it skips index-against-table checks).
    """

    def __init__(self, path: str | os.PathLike, *, synchronous: str = "FULL", check: str = "full",
                 group_commit: bool = True):
        path = Path(path)
        if path.suffix != ".db":
            _private_dir(path)
            path = path / DB_NAME
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
        if synchronous.upper() not in ("FULL", "NORMAL", "OFF", "EXTRA"):
            raise StoreError(f"synchronous: must be FULL, NORMAL, EXTRA or OFF, got {synchronous!r}")
        if check not in ("quick", "full"):
            raise StoreError(f"check: must be quick or full, got {check!r}")
        self.path = path
        self._lock = threading.RLock()
        self._depth = 0
        # group commit: one fsync of the WAL per group (False: SQLite's own fsync per commit, for comparisons)
        self._group = group_commit and synchronous.upper() == "FULL"
        self._wal_fd: int | None = None
        self._committed = 0            # commits made (under _lock)
        self._synced = 0               # commits known to be on disk
        self._syncing = False          # an fsync is running (its leader took every commit before it)
        self._sync_closed = False
        self._sync_cond = threading.Condition()
        self._rev = 0                  # the journal revision of the last job write (after _migrate)
        self._has_rev = True
        self._split = True             # requests in job_requests (False: a pinned older schema)
        existed = path.exists() and path.stat().st_size > 0
        if existed:
            _check_header(path)
        else:
            # created private: SQLite gives the -wal and -shm files the mode of the database
            os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
        # autocommit mode: transactions are explicit (BEGIN IMMEDIATE ... COMMIT)
        try:
            self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False, timeout=30.0)
        except sqlite3.Error as exc:
            raise StoreError(f"{path}: cannot open the database ({exc})") from exc
        try:
            self._check_ownership(existed)
            if existed:
                self._check_integrity(check)
                for f in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
                    with contextlib.suppress(FileNotFoundError):
                        os.chmod(f, 0o600)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={'NORMAL' if self._group else synchronous.upper()}")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._migrate()
            self._rev = self._last_rev()
            # False only where a test pins an older schema: job writes then leave the revision out
            self._has_rev = self.schema_version() >= REV_SCHEMA
            self._split = self.schema_version() >= REQUEST_SCHEMA
        except sqlite3.Error as exc:
            self._db.close()
            if type(exc) is sqlite3.DatabaseError:   # damage found past the checks ("malformed")
                raise StoreDamaged(_damaged(path, str(exc))) from exc
            raise StoreError(f"{path}: cannot open the database ({exc})") from exc
        except BaseException:
            self._db.close()   # refused: let go of the file at once
            raise

    # -- opening ---------------------------------------------------------

    def _check_integrity(self, check: str) -> None:
        """SQLite's own consistency check, read-only: a damaged file is refused, never written."""
        pragma = "quick_check" if check == "quick" else "integrity_check"
        rows = [r[0] for r in self._db.execute(f"PRAGMA {pragma}(3)").fetchall()]
        if rows != ["ok"]:
            problems = [ln for r in rows for ln in r.splitlines() if ln.strip() and not ln.startswith("***")]
            raise StoreDamaged(_damaged(self.path, f"{pragma}: {'; '.join(problems[:3])}"))

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

    def _last_rev(self) -> int:
        """The highest journal revision written: of a job or the snapshot (0 before either)."""
        try:
            row = self._db.execute("SELECT MAX(m) FROM (SELECT MAX(rev) AS m FROM jobs "
                                   "UNION ALL SELECT rev FROM snapshot)").fetchone()
        except sqlite3.OperationalError:   # an older schema (only where a test pins one)
            return 0
        return int(row[0] or 0)

    def _migrate(self) -> None:
        if self.schema_version() == SCHEMA_VERSION:
            return   # up to date: opening writes nothing (it may be opened on a full disk)
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
                            sql(self._db) if callable(sql) else self._db.execute(sql)
                    except sqlite3.Error as exc:
                        raise StoreError(
                            f"{self.path}: migration {number} ({description}) failed: {exc}; "
                            f"nothing was changed (the database stays at schema version {current})") from exc
                    self._db.execute("INSERT INTO schema_version VALUES (?, ?, ?)",
                                     (number, description, time.time()))
                self._db.execute("COMMIT")
            except BaseException:
                self._rollback()
                raise

    # -- transactions ----------------------------------------------------

    @contextlib.contextmanager
    def transaction(self, *, sync: bool = True) -> Iterator[None]:
        """All of the block's writes or none. The disk failing at any point (disk full, I/O
        error) raises ``JournalWriteError`` with the transaction rolled back. The commit is
        durable when the block ends, unless ``sync=False`` (see the class docstring)."""
        outer = False
        with self._lock:
            outer = self._depth == 0
            if outer:
                self._guarded(self._db.execute, "BEGIN IMMEDIATE")
            self._depth += 1
            try:
                yield
            except BaseException as exc:
                self._depth -= 1
                if outer:
                    self._rollback()
                    if _write_failure(exc):
                        raise JournalWriteError(f"{self.path}: write failed: {exc}", str(exc)) from exc
                raise
            self._depth -= 1
            if outer:
                try:
                    self._guarded(self._db.execute, "COMMIT")
                except JournalWriteError:
                    self._rollback()
                    raise
                self._committed += 1
                ticket = self._committed
        if outer and sync:
            self.sync_through(ticket)

    @property
    def commit_ticket(self) -> int:
        return self._committed

    def sync_through(self, ticket: int) -> None:
        """Return once commits up to ``ticket`` are on disk; one fsync serves every commit made
        before it started. A failed fsync raises ``JournalWriteError``: whether those commits
        are durable is unknown."""
        if not self._group:
            return
        with self._sync_cond:
            while self._synced < ticket and self._syncing:
                self._sync_cond.wait()
            if self._synced >= ticket or self._sync_closed:
                return
            self._syncing = True
            target = self._committed
        try:
            self._fsync_wal()
        except OSError as exc:
            with self._sync_cond:
                self._syncing = False
                self._sync_cond.notify_all()
            raise JournalWriteError(f"{self.path}: sync failed: {exc}", str(exc)) from exc
        with self._sync_cond:
            self._synced = max(self._synced, target)
            self._syncing = False
            self._sync_cond.notify_all()

    def _fsync_wal(self) -> None:
        wal = self.path.with_name(self.path.name + "-wal")
        fd = self._wal_fd
        if fd is not None and os.fstat(fd).st_ino != _inode(wal):   # the WAL was made anew
            # forgotten before closed: if the reopen below fails, a later call must not close
            # this number again once it belongs to another file
            self._wal_fd = None
            os.close(fd)
            fd = None
        if fd is None:
            fd = self._wal_fd = os.open(wal, os.O_RDONLY)
        os.fsync(fd)

    def _guarded(self, fn, *args):
        try:
            return fn(*args)
        except (sqlite3.Error, OSError) as exc:
            if _write_failure(exc):
                raise JournalWriteError(f"{self.path}: write failed: {exc}", str(exc)) from exc
            raise

    def _rollback(self) -> None:
        # a failed COMMIT may have rolled back already (SQLITE_FULL does)
        if self._db.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")

    def _exec(self, sql: str, args: tuple = ()) -> sqlite3.Cursor:
        with self.transaction():
            return self._db.execute(sql, args)

    # -- writes ----------------------------------------------------------

    def _next_rev(self) -> tuple[int, ...]:
        """The next revision, as the extra SQL argument (none on a pinned older schema). Under
        _lock, inside a transaction; a rolled-back revision is skipped, never reused."""
        self._rev += 1
        return (self._rev,) if self._has_rev else ()

    def _mutable(self, record: dict) -> str:
        """The text ``jobs.record`` holds: the record without its request (written once, apart)."""
        if not self._split:
            return _dumps(record)
        rest = dict(record)
        del rest["request"]
        return _dumps(rest)

    def add_job(self, record: dict, now: float) -> None:
        """The request goes to ``job_requests`` once; the rest of the record to ``jobs``."""
        req = record["request"]
        with self.transaction():
            cur = self._db.execute(
                "INSERT INTO jobs (job_id, user, vc, state, submitted, updated, qkey, record, rev) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)" if self._has_rev else
                "INSERT INTO jobs (job_id, user, vc, state, submitted, updated, qkey, record) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (record["job_id"], req["user"], req["vc"], record["state"],
                 record.get("submitted") or now, now, record.get("queue_key"), self._mutable(record),
                 *self._next_rev()))
            if self._split:
                self._db.execute("INSERT INTO job_requests (seq, request) VALUES (?, ?)",
                                 (cur.lastrowid, _dumps(req)))

    def update_job(self, record: dict, now: float) -> None:
        """Rewrite the record's state part. Its ``request`` is not written again: a job's
        request never changes after ``add_job`` (it is not read here either)."""
        with self.transaction():
            cur = self._db.execute(f"UPDATE jobs SET state=?, updated=?, qkey=?, record=?"
                                   f"{', rev=?' if self._has_rev else ''} WHERE job_id=?",
                                   (record["state"], now, record.get("queue_key"), self._mutable(record),
                                    *self._next_rev(), record["job_id"]))
            if cur.rowcount != 1:
                raise StoreError(f"update_job: job {record['job_id']!r} is not stored")

    def save_exchange(self, state: dict, now: float) -> None:
        self._exec("INSERT OR REPLACE INTO exchange (id, state, updated) VALUES (1, ?, ?)", (_dumps(state), now))

    def load_exchange(self) -> dict | None:
        with self._lock:
            row = self._db.execute("SELECT state FROM exchange WHERE id=1").fetchone()
        if row is None:
            return None
        try:
            return json.loads(row[0])
        except ValueError as exc:   # sound pages, unreadable content: refused like damage
            raise StoreDamaged(_damaged(self.path, f"the cell exchange state is not JSON: {exc}")) from None

    def add_intent(self, job_id: str, kind: str, user: str, now: float) -> None:
        self._exec("INSERT OR REPLACE INTO intents VALUES (?, ?, ?, ?)", (job_id, kind, user, now))

    def clear_intents(self, job_ids) -> None:
        with self.transaction():
            self._db.executemany("DELETE FROM intents WHERE job_id=?", [(j,) for j in job_ids])

    def intents(self) -> list[tuple[str, str, str, float]]:
        with self._lock:
            rows = self._db.execute("SELECT job_id, kind, user, time FROM intents ORDER BY time").fetchall()
        return [tuple(r) for r in rows]

    def delete_jobs(self, job_ids) -> None:
        """Forget finished jobs: their record and intents."""
        rows = [(j,) for j in job_ids]
        with self.transaction():
            if self._split:
                self._db.executemany("DELETE FROM job_requests WHERE seq=(SELECT seq FROM jobs WHERE job_id=?)", rows)
            for table in ("jobs", "intents"):
                self._db.executemany(f"DELETE FROM {table} WHERE job_id=?", rows)

    def max_job_number(self) -> int:
        """The highest n of the stored job ids ``j<n>`` (0 when none)."""
        with self._lock:
            rows = self._db.execute("SELECT job_id FROM jobs").fetchall()
        return max((int(j[1:]) for (j,) in rows if j[:1] == "j" and j[1:].isdigit()), default=0)

    def set_meta(self, key: str, value: str) -> None:
        self._exec("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def get_meta(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else None

    # -- reads -----------------------------------------------------------

    def load_jobs(self) -> list[dict]:
        return [record for record, _ in self.load_jobs_with_keys()]

    def _select(self, where: str = "") -> str:
        """The rows a record is made of: job id, record, queue key, request (NULL: none apart), seq."""
        if not self._split:
            return f"SELECT j.job_id, j.record, j.qkey, NULL, j.seq FROM jobs AS j {where}"
        return (f"SELECT j.job_id, j.record, j.qkey, r.request, j.seq FROM jobs AS j "
                f"LEFT JOIN job_requests AS r ON r.seq = j.seq {where}")

    def load_jobs_with_keys(self) -> list[tuple[dict, float | None]]:
        with self._lock:
            rows = self._db.execute(self._select("ORDER BY j.seq")).fetchall()
        return [(self._record(job_id, r, k, q), k) for job_id, r, k, q, _ in rows]

    def _record(self, job_id: str, text: str, qkey: float | None, request: str | None) -> dict:
        """The record as ``add_job``/``update_job`` were given it: state part and request joined."""
        try:
            record = json.loads(text)
        except ValueError as exc:   # sound pages, unreadable content: refused like damage
            raise StoreDamaged(_damaged(self.path, f"the record of job {job_id} is not JSON: {exc}")) from None
        if request is not None:
            try:
                req = json.loads(request)
            except ValueError as exc:
                raise StoreDamaged(_damaged(self.path, f"the request of job {job_id} is not JSON: {exc}")) from None
            record["request"] = req
        if "queue_key" not in record:   # written before records carried their queue key
            record["queue_key"] = qkey
        return record

    def load_jobs_by_id(self, job_ids: Iterable[str]) -> list[tuple[dict, float | None]]:
        ids = list(job_ids)
        rows: list[tuple[str, str, float | None, str | None, int]] = []
        with self._lock:
            for i in range(0, len(ids), 500):
                chunk = ids[i:i + 500]
                rows += self._db.execute(self._select(f"WHERE j.job_id IN ({','.join('?' * len(chunk))})"),
                                         chunk).fetchall()
        rows.sort(key=lambda r: r[4])
        return [(self._record(job_id, r, k, q), k) for job_id, r, k, q, _ in rows]

    def job_ids(self) -> set[str]:
        with self._lock:
            return {j for (j,) in self._db.execute("SELECT job_id FROM jobs").fetchall()}

    def written_after(self, rev: int) -> list[str]:
        with self._lock:
            return [j for (j,) in self._db.execute("SELECT job_id FROM jobs WHERE rev > ?", (rev,)).fetchall()]

    # -- the restart snapshot (service/snapshot.py) -------------------------

    def save_snapshot(self, key: str, exchange: str, body: bytes, now: float) -> bool:
        """Replace the snapshot in one transaction; it holds every job write up to now."""
        with self.transaction():
            self._db.execute("INSERT OR REPLACE INTO snapshot (id, key, rev, exchange, sha256, body, taken) "
                             "VALUES (1, ?, ?, ?, ?, ?, ?)",
                             (key, self._rev, exchange, hashlib.sha256(body).hexdigest(), body, now))
        return True

    def load_snapshot(self) -> Snapshot | None:
        with self._lock:
            row = self._db.execute("SELECT key, rev, exchange, sha256, body FROM snapshot WHERE id=1").fetchone()
        return None if row is None else Snapshot(row[0], int(row[1]), row[2], row[3], bytes(row[4]))

    def exchange_digest(self) -> str:
        with self._lock:
            row = self._db.execute("SELECT state FROM exchange WHERE id=1").fetchone()
        return "" if row is None else hashlib.sha256(row[0].encode()).hexdigest()

    def record_hashes(self, upto_rev: int | None = None) -> dict[str, bytes]:
        # bytes only, no JSON parse: a record changed or damaged behind the service's back
        # (a disk fault, a hand edit) shows, at a small part of a full replay's cost.
        # Of the stored state part, then of the request (when stored apart), read as stored
        # (BLOBs: no text decoded and encoded again) in one pass over the table ("+j.rev":
        # nearly every row qualifies, and the rev index would add a look-up per row)
        sql = ("SELECT j.job_id, CAST(j.record AS BLOB), CAST(r.request AS BLOB) FROM jobs AS j "
               "LEFT JOIN job_requests AS r ON r.seq = j.seq" if self._split else
               "SELECT j.job_id, CAST(j.record AS BLOB), NULL FROM jobs AS j")
        args: tuple[int, ...] = ()
        if upto_rev is not None:
            sql, args = sql + " WHERE +j.rev <= ?", (upto_rev,)
        with self._lock:
            rows = self._db.execute(sql, args).fetchall()
        sha256, out = hashlib.sha256, {}
        for j, r, q in rows:
            h = sha256(r)
            if q is not None:
                h.update(b"\n")
                h.update(q)
            out[j] = h.digest()
        return out

    def count_jobs(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM jobs").fetchone()[0]

    def close(self) -> None:
        # An fsync runs outside the lock (group commit): closing its WAL descriptor under it
        # would let the number go to another file, which that fsync's code would then close.
        with self._sync_cond:
            while self._syncing:
                self._sync_cond.wait()
            self._sync_closed = True    # no later sync starts: closing checkpoints every commit
        with self._lock:
            if self._db is not None:
                self._db.close()   # the last connection checkpoints (synced) and removes the WAL
                self._db = None  # type: ignore[assignment]
            if self._wal_fd is not None:
                os.close(self._wal_fd)
                self._wal_fd = None
