"""Can the job's account reach what the job needs? Checked at submission.

A hived running as root runs jobs under other accounts (``local_accounts``).
A job whose interpreter or working directory lives where that account cannot
go (a private venv under ``/root``, a 0700 home) would fail at once after its
start with a bare ``Permission denied``; ``check`` refuses it at submission
instead, in one line naming the account, the path and the ways out.

The check runs **as the job's account**: a short ``/bin/sh`` started under the
account's uid, gid and groups tests each path (``test -d/-x/-w``,
``command -v`` on the job's PATH), never as root. So the answer is the same
for a path that does not exist and for one the account may not see: nobody
learns through a submission what lies in folders their jobs cannot enter.

What is checked: the working directory (a folder the account can enter), the
command's program (a list command's first item; a string command's first word
when it is a plain word, after any ``NAME=value`` assignments) and, from the
request body's ``needs``, more programs and folders the job writes (``mkdir -p``
must be able to make them: the nearest existing one must be writable).
"""
from __future__ import annotations

import os
import stat
import subprocess
import threading
import time
from pathlib import Path

from .local_accounts import Account, AccountError
from .submit_flags import program_of

# (kind, path) -> the sh test; prints the failing pair and exits 1 at the first failure
_SCRIPT = r'''
while [ $# -gt 1 ]; do
  k=$1; p=$2; shift 2
  case $k in
    dir) [ -d "$p" ] && [ -x "$p" ] && continue ;;
    prog) case $p in
            */*) [ -f "$p" ] && [ -x "$p" ] && continue ;;
            *) command -v "$p" >/dev/null 2>&1 && continue ;;
          esac ;;
    write) d=$p
           while [ ! -e "$d" ] && [ "$d" != / ]; do d=$(dirname "$d"); done
           [ -d "$d" ] && [ -w "$d" ] && [ -x "$d" ] && continue ;;
  esac
  printf '%s\n' "$k" "$p"; exit 1
done
'''
TIMEOUT = 10.0   # seconds; a check that hangs (a dead NFS mount) is refused, not waited on
# A passed check is taken as passed again for this long (a burst of submissions from one
# notebook costs one check); only passes are kept, so a refusal is always tested afresh.
PASS_TTL = 30.0
_passed: dict[tuple, float] = {}
_passed_lock = threading.Lock()


class ReachError(AccountError):
    """The job's account cannot reach a path the job needs; ``field`` names the request field."""

    def __init__(self, field: str, problem: str):
        super().__init__(problem)
        self.field = field
        self.problem = problem


def wanted(request, needs: dict | None) -> list[tuple[str, str]]:
    """(kind, path) pairs to test for a request, relative paths taken from its workdir
    (without one, the job starts in a folder of its own: relative paths are not tested)."""
    base = request.workdir
    out: list[tuple[str, str]] = [("dir", base)] if base else []

    def absolute(p: str) -> str | None:
        if os.path.isabs(p):
            return p
        return os.path.join(base, p) if base else None

    programs = [program_of(request.command), *((needs or {}).get("programs") or [])]
    for prog in programs:
        target = absolute(prog) if prog and "/" in prog else prog
        if target:
            out.append(("prog", target))
    for p in (needs or {}).get("writable") or []:
        target = absolute(p)
        if target:
            out.append(("write", target))
    return out


def _passable(st: os.stat_result, account: Account) -> bool:
    if st.st_uid == account.uid:
        return bool(st.st_mode & 0o100)
    if st.st_gid == account.gid or st.st_gid in account.groups:
        return bool(st.st_mode & 0o010)
    return bool(st.st_mode & 0o001)


def first_blocked(path: str, account: Account) -> str | None:
    """The first folder on the way to ``path`` the account may not pass, as ``/x (mode 0700)``,
    following symbolic links (a venv's python links to the interpreter it was made from).

    Only folders and links whose parents the account passes are looked at, so this says
    nothing the account could not learn itself."""
    parts, d, hops = list(Path(path).parts[1:]), Path("/"), 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            d = d.parent
            continue
        nxt = d / part
        try:
            st = os.lstat(nxt)
            if stat.S_ISLNK(st.st_mode):
                hops += 1
                target = Path(os.readlink(nxt))
                if hops > 40:
                    return None
                parts = list(target.parts[1:] if target.is_absolute() else target.parts) + parts
                d = Path("/") if target.is_absolute() else d
                continue
        except OSError:
            return None
        if not stat.S_ISDIR(st.st_mode):
            return None
        if not _passable(st, account):
            return f"{nxt} (mode {st.st_mode & 0o777:04o})"
        d = nxt
    return None


def _run_as(account: Account, pairs: list[tuple[str, str]], path_env: str) -> tuple[str, str] | None:
    argv = ["/bin/sh", "-c", _SCRIPT, "hived-check"] + [x for pair in pairs for x in pair]
    env = {"PATH": path_env, "LC_ALL": "C"}
    try:
        res = subprocess.run(argv, env=env, cwd="/", capture_output=True, text=True, timeout=TIMEOUT,
                             user=account.uid, group=account.gid, extra_groups=list(account.groups),
                             stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return ("timeout", pairs[0][1])
    if res.returncode == 0:
        return None
    lines = res.stdout.splitlines()
    return (lines[0], lines[1]) if len(lines) >= 2 else ("error", res.stderr.strip()[:200] or "?")


def _run_here(pairs: list[tuple[str, str]], path_env: str) -> tuple[str, str] | None:
    """The same tests in this process: the job runs as this process's own account."""
    import shutil
    for kind, p in pairs:
        if kind == "dir":
            ok = os.path.isdir(p) and os.access(p, os.X_OK)
        elif kind == "prog":
            ok = (os.path.isfile(p) and os.access(p, os.X_OK)) if "/" in p else \
                shutil.which(p, path=path_env) is not None
        else:
            d = p
            while not os.path.exists(d) and d != "/":
                d = os.path.dirname(d)
            ok = os.path.isdir(d) and os.access(d, os.W_OK | os.X_OK)
        if not ok:
            return (kind, p)
    return None


WAYS_OUT = ("map the user or VC to an account that can in the spec (accounts:), put it in a shared place "
            "every account can read (e.g. /opt or /srv), or have the operator set HIVED_JOB_ACCOUNT=server "
            "(jobs then run as the server's account)")


def check(account: Account | None, request, path_env: str, needs: dict | None = None) -> None:
    """Raise ``ReachError`` naming the first thing the job's account cannot reach.

    ``account``: the job's account (None: the server's own, tested in-process)."""
    pairs = wanted(request, needs)
    if not pairs:
        return
    if account is None:
        failed = _run_here(pairs, path_env)
    else:
        key = (account.uid, account.gid, account.groups, tuple(pairs), path_env)
        now = time.monotonic()
        with _passed_lock:
            if _passed.get(key, 0.0) > now:
                return
        failed = _run_as(account, pairs, path_env)
        if failed is None:
            with _passed_lock:
                if len(_passed) >= 1024:
                    _passed.clear()
                _passed[key] = now + PASS_TTL
    if failed is None:
        return
    kind, p = failed
    who = "hived's own account" if account is None else \
        f"unix account {account.name or account.uid} (uid {account.uid})"
    field = {"dir": "workdir", "write": "needs.writable"}.get(kind, "command")
    if kind == "dir":
        what = f"{p} is not a folder {who} can enter"
    elif kind == "prog" and "/" in p:
        what = f"program {p} is not a file {who} can execute"
    elif kind == "prog":
        what = f"program {p!r} is not found by {who} on the job's PATH ({path_env})"
    elif kind == "write":
        what = f"{who} cannot make or write the folder {p}"
    elif kind == "timeout":
        what = f"checking {p} as {who} took longer than {TIMEOUT:g} s"
    else:
        what = f"the check as {who} failed: {p}"
    blocked = first_blocked(p, account) if account is not None and p.startswith("/") else None
    if blocked:
        what += f" (blocked at {blocked})"
    if account is None:
        raise ReachError(field, what)
    raise ReachError(field, f"{what}; jobs run as that account because hived runs as root: {WAYS_OUT}")
