"""Helpers the service tests share (imported by name: pytest runs with --import-mode=importlib)."""
import sqlite3
import time


def wait_until(pred, timeout=15.0, what="condition"):
    """Poll ``pred`` until it returns something true, and return that; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def dead_or_zombie(pid: int) -> bool:
    """The process is gone or a zombie; a process reaped between opening and reading its
    /proc entry (ESRCH) counts as gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def foreign_database(folder):
    """``folder``/hived.db: an SQLite file some other program wrote (hived must refuse it untouched)."""
    folder.mkdir()
    con = sqlite3.connect(folder / "hived.db")
    con.execute("CREATE TABLE invoices (id INTEGER)")
    con.commit()
    con.close()
    return folder


class FailingCommits:
    """Wraps a store's SQLite connection so that COMMIT fails the way a full disk makes it
    fail (``sqlite3.OperationalError: database or disk is full``).

    ``fail()``: every commit from now on fails; ``fail(after=n)``: n more commits succeed
    first; ``heal()``: commits succeed again. ``failed`` counts the refused commits."""

    def __init__(self, store):
        self._real = store._db
        store._db = self
        self._allowed = None
        self.failed = 0

    def fail(self, after: int = 0) -> "FailingCommits":
        self._allowed = after
        return self

    def heal(self) -> None:
        self._allowed = None

    def execute(self, sql, *args):
        if self._allowed is not None and sql.strip().upper() == "COMMIT":
            if self._allowed == 0:
                self.failed += 1
                raise sqlite3.OperationalError("database or disk is full")
            self._allowed -= 1
        return self._real.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self._real, name)


def scrape(svc) -> dict:
    """The service's metrics as {(sample name, sorted labels): value}."""
    from prometheus_client.parser import text_string_to_metric_families
    out = {}
    for family in text_string_to_metric_families(svc.metrics.text().decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))))
