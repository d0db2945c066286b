"""Where the shared test assets live (the Kubernetes test API server, papers).

One variable names the folder: ``HIVED_SHARED``, default ``../shared`` beside
the repository. Tests and benchmarks call :func:`shared_dir` or
:func:`shared_path`; a missing folder fails with the variable's name in the
message, never with a bare ``FileNotFoundError``.
"""
from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


class SharedAssetsMissing(FileNotFoundError):
    """A shared test asset is not where ``HIVED_SHARED`` says."""


def shared_dir() -> Path:
    """The shared assets folder: ``$HIVED_SHARED``, else ``../shared`` beside the repository."""
    return Path(os.environ.get("HIVED_SHARED") or REPO.parent / "shared")


def shared_path(*parts: str) -> Path:
    """``shared_dir()/parts``, or :class:`SharedAssetsMissing` saying which variable to set."""
    p = shared_dir().joinpath(*parts)
    if not p.exists():
        raise SharedAssetsMissing(
            f"shared test asset {p} is missing: set HIVED_SHARED to the folder that holds "
            f"{'/'.join(parts)} (default ../shared beside the repository)")
    return p
