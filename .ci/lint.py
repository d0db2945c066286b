"""`make lint`: ruff over the whole tree, then mypy over the ``hived`` packages.

The product folders (``core/``, ``service/`` ...) become ``hived.core``,
``hived.service`` ... only through setuptools' ``package-dir``; mypy does not
follow the editable install's import hook, so this script builds a view of
symlinks (``hived/core -> ../../core`` ...) under ``.mypy_cache`` and points
mypy at it. The view's path is stable so mypy's cache stays valid between runs.

Paths listed in ``.ci/lint_pending.txt`` (glob patterns, if that file exists)
are skipped by both checkers.
"""
from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: pytest brings tomli
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
PENDING = REPO / ".ci" / "lint_pending.txt"
VIEW = REPO / ".mypy_cache" / "hived_view"
BIN = Path(sys.executable).parent


def _pending() -> list[str]:
    if not PENDING.exists():
        return []
    lines = (line.strip() for line in PENDING.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def _folders() -> dict[str, str]:
    """``hived.x`` -> folder, as pyproject.toml's package-dir declares them."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    folders: dict[str, str] = config["tool"]["setuptools"]["package-dir"]
    return folders


def _tool(name: str) -> str:
    found = BIN / name
    return str(found) if found.exists() else name


def run_ruff(pending: list[str]) -> bool:
    cmd = [_tool("ruff"), "check", "."]
    if pending:
        cmd += ["--extend-exclude", ",".join(pending)]
    started = time.monotonic()
    listed = subprocess.run([*cmd, "--show-files"], cwd=REPO, capture_output=True, text=True).stdout
    files = sum(1 for line in listed.splitlines() if line.strip().endswith(".py"))
    ok = subprocess.run(cmd, cwd=REPO).returncode == 0
    print(f"ruff: checked {files} Python files ({time.monotonic() - started:.1f} s)", flush=True)
    return ok


def _build_view(folders: dict[str, str]) -> None:
    if VIEW.exists():
        shutil.rmtree(VIEW)
    (VIEW / "hived").mkdir(parents=True)
    for package, folder in folders.items():
        link = VIEW / Path(*package.split("."))
        link.symlink_to(os.path.relpath(REPO / folder, link.parent), target_is_directory=True)


def run_mypy(pending: list[str]) -> bool:
    folders = _folders()
    _build_view(folders)
    # mypy prints paths through the view; map them back onto the real folders
    prefixes = {os.path.relpath(VIEW / Path(*p.split(".")), REPO) + "/": f + "/" for p, f in folders.items()}
    pattern = re.compile("|".join(re.escape(p) for p in sorted(prefixes, key=len, reverse=True)))
    cmd = [_tool("mypy"), "--config-file", "pyproject.toml", "--no-error-summary"]
    for package in folders:
        cmd += ["-p", package]
    env = {**os.environ, "MYPYPATH": str(VIEW)}
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    errors = 0
    skipped = 0
    for line in proc.stdout.splitlines():
        line = pattern.sub(lambda m: prefixes[m.group(0)], line, count=1)
        path = line.split(":", 1)[0]
        if any(fnmatch.fnmatch(path, p) for p in pending):
            skipped += ": error:" in line
            continue
        errors += ": error:" in line
        print(line)
    if proc.stderr.strip():
        print(proc.stderr.strip(), file=sys.stderr)
    crashed = proc.returncode not in (0, 1)
    took = time.monotonic() - started
    print(f"mypy: checked {', '.join(folders)} (strict on hived.core): {errors} errors"
          + (f", {skipped} more in pending files" if skipped else "") + f" ({took:.1f} s)", flush=True)
    return errors == 0 and not crashed


def main() -> int:
    pending = _pending()
    if pending:
        print(f"lint: skipping {len(pending)} pending patterns listed in {PENDING.relative_to(REPO)}")
    ok = run_ruff(pending)
    ok = run_mypy(pending) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
