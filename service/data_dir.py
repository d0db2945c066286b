"""The service's data directory and start-up settings: one service per directory, the spec's
text, integer settings from the environment, and the refusal of a journal cut to nothing."""
from __future__ import annotations

import os
from pathlib import Path
from typing import IO

from .job_ids import JobIds
from .store import StoreDamaged


def private_dir(data_dir) -> Path:
    """The data directory, made if missing, private to the service's account: the store holds
    every job's environment."""
    path = Path(data_dir).expanduser()
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.stat().st_uid == os.geteuid() and path.stat().st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


class DataDirBusy(RuntimeError):
    """Another live service holds this data directory."""


def exclusive(data_dir: Path) -> IO[str]:
    """One service per data directory: two would launch the same jobs twice.
    The kernel drops the lock when the process dies, so kill -9 leaves none behind."""
    import fcntl
    f = open(os.open(data_dir / "service.lock", os.O_RDWR | os.O_CREAT, 0o600), "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        pid = f.read().strip() or "?"
        f.close()
        raise DataDirBusy(f"{data_dir}: another hived service (pid {pid}) is using this data directory; "
                           f"stop it or use another --data-dir") from None
    f.seek(0)
    f.truncate()
    f.write(str(os.getpid()))
    f.flush()
    return f


def spec_text(spec) -> str | None:
    import json
    if isinstance(spec, dict):
        return json.dumps(spec)
    if isinstance(spec, (str, os.PathLike)):
        p = Path(spec)
        try:
            if "\n" not in str(spec) and p.is_file():
                return p.read_text()
        except OSError:
            return None
        return str(spec)
    return None


def env_int(name: str, default: int, lo: int) -> int:
    """An integer setting from the environment, refused clearly when it is not one."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"${name}: must be an integer, got {raw!r}") from None
    if value < lo:
        raise ValueError(f"${name}: must be at least {lo}, got {value}")
    return value


def refuse_emptied_journal(db: Path, ids: JobIds) -> None:
    """An empty database file in a directory that has had jobs: the journal was cut, not new."""
    if db.exists() and db.stat().st_size == 0 and ids.seen_before > 0:
        raise StoreDamaged(f"{db}: the database is empty (0 bytes) but this data directory has had jobs "
                           f"(ids up to j{ids.seen_before} may have been used); hived will not write to it. "
                           f"Restore it from a backup, "
                           f"or move it away to start an empty journal (job ids continue after "
                           f"j{ids.seen_before})")


def load_spec(spec):
    from hived.core.spec import load_spec
    return spec if hasattr(spec, "chains") else load_spec(spec)
