"""What the job commands of the ``hived`` CLI share: finding the service,
turning refusals into exit codes, and printing tables.

Two ways to reach the scheduler:
- a running service (``hived serve`` or JupyterLab with the extension),
  through ``HivedClient``: ``--url``/``--token``, ``$HIVED_URL``, or the
  ``server.json`` in the data directory;
- embedded (``--data-dir D`` when no service runs there): the command opens
  the store itself, as a restarting service would. Submissions are stored and
  run when a service next starts on D.

Exit codes (docs/cli.md): 0 ok; 1 the job failed or was cancelled (``--wait``);
2 refused: bad input or usage; 3 not allowed; 4 not found; 5 no service.
"""
from __future__ import annotations

import getpass
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hived.core.jobs import TERMINAL as TERMINAL_STATES
from hived.core.jobs import state_values
from hived.service.job_table import ago, placement_text, state_text  # noqa: F401  (the doors' one definition)
from hived.service.terminal_text import table as _table
from hived.service.terminal_text import terminal_width, visible

OK, JOB_FAILED, BAD_INPUT, NOT_ALLOWED, NOT_FOUND, UNREACHABLE = 0, 1, 2, 3, 4, 5
TERMINAL = state_values(TERMINAL_STATES)

EXIT_CODES_HELP = ("exit codes: 0 ok, 1 job failed or cancelled (--wait), 2 bad input, "
                   "3 not allowed, 4 not found, 5 no service reachable")


def add_common(p, *, json_flag: bool = True) -> None:
    g = p.add_argument_group("service")
    g.add_argument("--url", default=None, help="service URL (default $HIVED_URL, else DATA_DIR/server.json)")
    g.add_argument("--token", default=None, help="service token (default $HIVED_TOKEN or server.json)")
    g.add_argument("--user", default=None,
                   help="act as this user (default $HIVED_USER, else your login name)")
    g.add_argument("--data-dir", default=os.environ.get("HIVED_DATA_DIR") or None,
                   help="data directory (default $HIVED_DATA_DIR): finds its running service, "
                        "or opens it embedded when none runs")
    g.add_argument("--spec", default=None,
                   help="embedded mode only: the cluster spec (default: the one the service last used)")
    if json_flag:
        p.add_argument("--json", action="store_true", help="print JSON for scripts instead of tables")


def user_of(args) -> str:
    return args.user or os.environ.get("HIVED_USER") or getpass.getuser()


class Remote:
    """A running service, through the REST client."""

    embedded = False

    def __init__(self, args):
        from hived.service.client import HivedClient
        self.c = HivedClient(url=args.url, token=args.token, user=user_of(args), data_dir=args.data_dir)
        if args.user:
            self._check_user(args.user)

    def _check_user(self, wanted: str) -> None:
        """A served instance decides whom to believe: an explicit --user it does not
        honour is refused here rather than silently acting as someone else."""
        me = self.c.status().get("user")
        if me is not None and me != wanted:
            raise PermissionError(f"--user: the service knows this token as {me!r} and does not let it "
                                  f"act as {wanted!r} (it trusts X-Hived-User only when started with "
                                  f"--trust-user-header); drop --user or use {wanted!r}'s token")

    def submit(self, payload): return self.c.submit(payload)
    def job(self, job_id): return self.c.job(job_id)
    def jobs(self, vc=None, state=None, user=None): return self.c.jobs(vc=vc, state=state, user=user)
    def cancel(self, job_id): return self.c.cancel(job_id)
    def control(self, job_id, action): return self.c.control(job_id, action)
    def vcs(self): return self.c.vcs()
    def vc(self, name): return self.c.vc(name)
    def cluster(self): return self.c.cluster()
    def status(self): return self.c.summary()
    def whoami(self): return self.c.status()
    def gc(self, vc=None, dry_run=False, policy=None, disk_quota=...):
        return self.c.gc(vc, dry_run, policy, disk_quota)

    def logs(self, job_id, rank=0, offset=0, follow=False):
        return self.c.logs(job_id, rank=rank, offset=offset, follow=follow)

    def reload_spec(self, text=None): return self.c.reload_spec(text)

    def close(self): pass


class Embedded:
    """The store of ``data_dir`` opened in this process (no service running there)."""

    embedded = True

    def __init__(self, args):
        from hived.service.scheduler import SchedulerService
        from hived.service.store import SqliteStore
        data_dir = Path(args.data_dir).expanduser()
        spec = args.spec
        if spec is None:
            if not (data_dir / "hived.db").exists():
                raise LookupError(f"{data_dir}: no hived data here and no service running; "
                                  f"start one with 'hived serve --data-dir {data_dir} --spec FILE'")
            st = SqliteStore(data_dir)
            spec = st.get_meta("spec")
            st.close()
            if spec is None:
                raise LookupError(f"{data_dir}: no spec stored; pass --spec FILE")
        self.user = user_of(args)
        self.svc = SchedulerService(spec, data_dir)

    def submit(self, payload): return self.svc.submit(self.user, payload)
    def job(self, job_id): return self.svc.get_job(job_id)
    def jobs(self, vc=None, state=None, user=None): return self.svc.list_jobs(vc, state, user)
    def cancel(self, job_id): return self.svc.cancel(job_id, self.user)
    def control(self, job_id, action): return self.svc.control(job_id, action, self.user)
    def vcs(self): return self.svc.vcs()
    def vc(self, name): return self.svc.vc(name)
    def cluster(self): return self.svc.cluster()
    def status(self): return self.svc.status()
    def whoami(self): return {"user": self.user}

    def reload_spec(self, text=None):
        # the data directory's own spec when no text: what the service would run next
        return self.svc.reload_spec(text if text is not None else self.svc.store.get_meta("spec"))

    def gc(self, vc=None, dry_run=False, policy=None, disk_quota=...):
        out = {}
        if disk_quota is not ... and not dry_run:
            out["quota"] = self.svc.set_disk_quota(self.user, vc, disk_quota)
        if policy is not None and not dry_run:
            out["policy"] = self.svc.set_retention(self.user, vc, policy.get("max_age"), policy.get("keep"))["policy"]
            policy = None
        return {**out, **self.svc.gc(self.user, vc, dry_run, policy)}

    def logs(self, job_id, rank=0, offset=0, follow=False):
        text, off = self.svc.logs(job_id, rank, offset)
        # nothing schedules while no service runs: what is there is all there is for now
        return {"text": text, "offset": off, "done": True}

    def close(self): self.svc.close()


def connect(args):
    """A running service when one answers, else embedded on --data-dir."""
    from hived.service.client import read_server_file
    if args.data_dir and not args.url and not os.environ.get("HIVED_URL") \
            and read_server_file(args.data_dir) is None:
        return Embedded(args)
    return Remote(args)


def _loaded(module: str, *names: str) -> tuple[type, ...]:
    """Classes of ``module`` if something already imported it, else none: an exception
    cannot be an instance of a class never loaded, and a remote command must not pay
    for importing the scheduler just to map a refusal to its exit code."""
    found = sys.modules.get(module)
    return tuple(getattr(found, n) for n in names) if found is not None else ()


def error_exit(prog: str, exc: BaseException) -> int:
    """Print one readable line for a refusal; return its exit code."""
    from hived.service.client import HivedError, HivedUnreachable
    if isinstance(exc, (HivedUnreachable, *_loaded("hived.service.degraded", "ServiceDegraded"))):
        code = UNREACHABLE
    elif isinstance(exc, HivedError):
        otherwise = UNREACHABLE if exc.status >= 500 else BAD_INPUT
        code = {400: BAD_INPUT, 401: NOT_ALLOWED, 403: NOT_ALLOWED, 404: NOT_FOUND}.get(exc.status, otherwise)
    elif isinstance(exc, (PermissionError, *_loaded("hived.service.scheduler", "NotAuthorized"))):
        code = NOT_ALLOWED
    elif isinstance(exc, LookupError):
        code = NOT_FOUND
    elif isinstance(exc, (*_loaded("hived.service.scheduler", "DataDirBusy"),
                          *_loaded("hived.service.store", "StoreError"))):
        code = UNREACHABLE
    elif isinstance(exc, ValueError):
        code = BAD_INPUT
    else:
        raise exc
    msg = refusal_text(exc)
    print(f"{prog}: {visible(msg)}", file=sys.stderr)
    return code


def refusal_text(exc: BaseException) -> str:
    """``field: problem`` (docs/cli.md) for a service refusal; the text itself otherwise."""
    from hived.service.client import HivedError
    if isinstance(exc, HivedError):
        return exc.line()
    msg = str(exc)
    return msg[len("hived: "):] if msg.startswith("hived: ") else msg


def guarded(prog: str, body: Callable[[Any, Any], int]) -> Callable[[Any], int]:
    """Wrap a command: open the backend, run, close, map refusals to exit codes."""
    def run(args) -> int:
        backend = None
        try:
            backend = connect(args)
            return body(args, backend)
        except Exception as exc:  # refusals become one line and an exit code; bugs re-raise
            return error_exit(prog, exc)
        finally:
            if backend is not None:
                backend.close()
    return run


def each_job(args, prog: str, act: Callable[[str], dict], said: Callable[[dict], str]) -> int:
    """Apply ``act`` to every job id of ``args.jobs``, going on past refusals, and print what
    happened to each (``said``) or the JSON; the worst exit code wins."""
    out, worst = [], OK
    for jid in args.jobs:
        try:
            out.append(act(jid))
        except Exception as exc:
            worst = max(worst, error_exit(prog, exc))
    if args.json:
        print_json({"jobs": out})
    else:
        for j in out:
            print(f"{j['id']}: {said(j)}")
    return worst


def print_json(obj) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=False, default=str)
    sys.stdout.write("\n")


def table(rows: list[list], headers: list[str], shrink: tuple = ("NAME", "PLACEMENT", "REASON")) -> str:
    """A table for people: cells escaped, fitted to the terminal by cutting free-text columns."""
    return _table(rows, headers, terminal_width(), shrink)


def outcome(j: dict) -> str:
    """How a job that ended ended, in words (no Python None in sight)."""
    state = j["state"]
    if state == "succeeded":
        return "succeeded"
    if state == "failed":
        bits = [f"exit code {j['exit_code']}"] if j.get("exit_code") is not None else []
        if j.get("failure_class"):
            bits.append(f"{visible(j['failure_class'])} failure")
        return "failed" + (f" ({', '.join(bits)})" if bits else "")
    if state == "cancelled":
        # a running job's cancel is recorded when asked ("cancelled by alice"); its end then
        # only says it stopped: the words that name who cancelled come from the history
        who = next((h["reason"] for h in reversed(j.get("history") or [])
                    if str(h.get("reason", "")).startswith("cancelled by ")), None)
        why = who or j.get("reason")
        return "was cancelled" + (f": {visible(why)}" if why else "")
    return state
