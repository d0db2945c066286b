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


def foreign_database(folder):
    """``folder``/hived.db: an SQLite file some other program wrote (hived must refuse it untouched)."""
    folder.mkdir()
    con = sqlite3.connect(folder / "hived.db")
    con.execute("CREATE TABLE invoices (id INTEGER)")
    con.commit()
    con.close()
    return folder
