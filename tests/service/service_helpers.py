"""Helpers the service tests share (imported by name: pytest runs with --import-mode=importlib)."""
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
