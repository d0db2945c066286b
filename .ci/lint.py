"""`make lint`: ruff over the whole tree, then mypy over the ``hived`` packages.

The product folders (``core/``, ``service/`` ...) become ``hived.core``,
``hived.service`` ... only through setuptools' ``package-dir``; mypy does not
follow the editable install's import hook, so this script builds a view of
symlinks (``hived/core -> ../../core`` ...) under ``.mypy_cache`` and points
mypy at it. The view's path is stable so mypy's cache stays valid between runs.

Caches live inside ``.venv`` (``.venv/lint-cache/``: mypy's incremental cache in
one SQLite file, ruff's cache), so whatever keeps the virtual environment between CI
runs keeps them too, and ``make clean`` drops them with it. mypy runs in the
background while ruff checks the tree: on two cores the two overlap.

Every file is checked; there is no list of exceptions.
"""
from __future__ import annotations

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
BIN = Path(sys.executable).parent
# inside the virtual environment that runs this script (.venv/lint-cache)
CACHE = Path(sys.prefix) / "lint-cache"
VIEW = CACHE / "hived_view"


def _folders() -> dict[str, str]:
    """``hived.x`` -> folder, as pyproject.toml's package-dir declares them."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    folders: dict[str, str] = config["tool"]["setuptools"]["package-dir"]
    return folders


def _tool(name: str) -> str:
    found = BIN / name
    return str(found) if found.exists() else name


def run_ruff() -> bool:
    cmd = [_tool("ruff"), "check", "--cache-dir", str(CACHE / "ruff"), "."]
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


def start_mypy() -> tuple[subprocess.Popen[str], dict[str, str], float]:
    """mypy in the background: (the process, its view prefixes -> real folders, start time)."""
    folders = _folders()
    _build_view(folders)
    # mypy prints paths through the view; map them back onto the real folders
    prefixes = {os.path.relpath(VIEW / Path(*p.split(".")), REPO) + "/": f + "/" for p, f in folders.items()}
    cmd = [_tool("mypy"), "--config-file", "pyproject.toml", "--no-error-summary",
           "--cache-dir", str(CACHE / "mypy"), "--sqlite-cache"]
    for package in folders:
        cmd += ["-p", package]
    env = {**os.environ, "MYPYPATH": str(VIEW)}
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, prefixes, time.monotonic()


def finish_mypy(proc: subprocess.Popen[str], prefixes: dict[str, str], started: float) -> bool:
    pattern = re.compile("|".join(re.escape(p) for p in sorted(prefixes, key=len, reverse=True)))
    stdout, stderr = proc.communicate()
    errors = 0
    for line in stdout.splitlines():
        line = pattern.sub(lambda m: prefixes[m.group(0)], line, count=1)
        errors += ": error:" in line
        print(line)
    if stderr.strip():
        print(stderr.strip(), file=sys.stderr)
    crashed = proc.returncode not in (0, 1)
    took = time.monotonic() - started
    print(f"mypy: checked {', '.join(_folders())} (strict on hived.core): {errors} errors ({took:.1f} s)", flush=True)
    return proc.returncode == 0 and errors == 0 and not crashed


def main() -> int:
    mypy = start_mypy()
    ok = run_ruff()
    ok = finish_mypy(*mypy) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
