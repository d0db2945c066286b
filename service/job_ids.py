"""Job ids that never repeat for a data directory, even when its database is lost.

An id is ``j<n>``. Three records bound ``n`` from below, and the next id is
above all of them: the journal's own job ids, the ``jobs/j<n>/`` folders on
disk (logs, checkpoints), and ``job-ids``, a small file holding a ceiling
below which every number may already have been handed out. The ceiling is
raised a block (``BLOCK`` ids) at a time, written atomically (temporary file, fsync, rename,
fsync of the folder) before any number of the new block is used, so a
submission pays for that write once per ``BLOCK`` jobs. A number whose
folder exists is skipped: a new job never inherits another's files.
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

FILE_NAME = "job-ids"
BLOCK = 1024   # ids per write of the ceiling: one fsync'd write per 1,024 submissions
_DIR = re.compile(r"j(\d+)\Z")


class JobIdsError(OSError):
    """The ids file cannot be read (damaged) or written (disk full, I/O error).
    ``cause``: what failed, without paths."""

    def __init__(self, message: str, cause: str = ""):
        super().__init__(message)
        self.cause = cause or message


def highest_folder(jobs_dir: Path) -> int:
    """The highest n of the ``j<n>`` folders under ``jobs_dir`` (0 when none)."""
    try:
        names = os.listdir(jobs_dir)
    except FileNotFoundError:
        return 0
    return max((int(m.group(1)) for m in map(_DIR.match, names) if m), default=0)


class JobIds:
    """Hands out ``j<n>`` above every id this data directory has ever used."""

    def __init__(self, data_dir: Path, jobs_dir: Path, stored_max: int = 0):
        self.path = Path(data_dir) / FILE_NAME
        self.jobs_dir = Path(jobs_dir)
        self._jobs = str(self.jobs_dir)
        self.ceiling = self._read()
        self.seen_before = max(self.ceiling - 1, highest_folder(self.jobs_dir), stored_max)
        self._next = self.seen_before + 1

    def _read(self) -> int:
        try:
            text = self.path.read_text().strip()
        except FileNotFoundError:
            return 0
        except OSError as exc:
            raise JobIdsError(f"{self.path}: cannot read ({exc})") from None
        if not text.isdigit():
            raise JobIdsError(f"{self.path}: damaged (want one integer, got {text[:20]!r}); it bounds the job "
                              f"ids already used: restore it, or write in it a number above every old job id")
        return int(text)

    def _write(self, ceiling: int) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, f"{ceiling}\n".encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
            dfd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError as exc:
            raise JobIdsError(f"{self.path}: cannot record the job id high-water mark ({exc})",
                              f"job ids file: {exc.strerror or exc}") from None

    @property
    def upcoming(self) -> int:
        """The number the next id starts looking from."""
        return self._next

    def skip_to(self, n: int) -> None:
        """Hand out no id below ``j<n>`` from now on (ids another instance may have used)."""
        self._next = max(self._next, int(n))

    def next(self, taken: Callable[[str], bool] = lambda jid: False) -> str:
        """A fresh id: above every one used before, its folder absent, not ``taken``.
        Raises ``JobIdsError`` (changing nothing) when the ceiling cannot be raised."""
        n = self._next
        while os.path.lexists(os.path.join(self._jobs, f"j{n}")) or taken(f"j{n}"):
            n += 1
        if n >= self.ceiling:
            self._write(n + BLOCK)
            self.ceiling = n + BLOCK
        self._next = n + 1
        return f"j{n}"

    def settle(self) -> None:
        """At a clean stop: lower the ceiling to the next id, so the next start goes on from
        there (j2 after j1, not j1025). After a crash the block's ceiling stays: ids then
        jump, but none is ever handed out twice. Best effort: a failed write keeps the old
        ceiling, which is just as safe."""
        if self._next < self.ceiling:
            try:
                self._write(self._next)
                self.ceiling = self._next
            except JobIdsError:
                pass

    def give_back(self, job_id: str) -> None:
        """The id last handed out was not used (its request was refused): hand it out again,
        so refusals leave no gaps. Its folder was never made, so nothing of it remains."""
        if job_id == f"j{self._next - 1}":
            self._next -= 1
