"""IPython magics: ``%gpu_submit`` (line and cell), ``%gpu_status``, ``%gpu_logs``,
``%gpu_cancel``, ``%gpu_jobs``. Load with ``%load_ext hived.jupyter_ext``.

``%gpu_submit`` shows a live status line (queued -> placed -> running ->
finished, with queue position, GPUs and elapsed time) and streams the job's
log into the cell. Interrupting the cell (Ctrl-C / the stop button) detaches:
the job keeps running. Service errors are printed as one line, never as a
traceback.
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class

from hived.service.client import TERMINAL_STATES, HivedClient, HivedError
from hived.service.submit_flags import add_submit_flags, body_from_args
from hived.service.terminal_text import visible


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError (one line in IPython) instead of exiting."""

    def error(self, message):
        raise UsageError(f"{self.prog}: {message}")

    def exit(self, status=0, message=None):
        if message:
            raise UsageError(message.strip())
        raise UsageError(self.format_help())


def _submit_parser() -> _Parser:
    p = _Parser(prog="%gpu_submit", description="Submit a job to hived (TE by default).", add_help=True)
    # the same flags as `hived submit` (one builder for every door)
    add_submit_flags(p, vc_help="VC to submit to (default: $HIVED_VC, or your only VC)")
    p.add_argument("--detach", action="store_true", help="return once submitted; do not follow")
    p.add_argument("command", nargs=argparse.REMAINDER, help="command (line form) or interpreter (cell form)")
    return p


def command_text(line: str, words: list[str]) -> str:
    """The command part of ``line`` exactly as typed (quotes, ``$VARS``, pipes
    kept), so that the line form runs like the same line in a terminal.

    ``words`` are the last tokens of ``shlex.split(line)`` (argparse's
    remainder); the raw text starts where the tokens before them end."""
    if not words:
        return ""
    lexer = shlex.shlex(line, posix=True)
    lexer.whitespace_split = True
    skip = len(shlex.split(line)) - len(words)
    for _ in range(skip):
        lexer.get_token()
    # a shlex built from a str reads a StringIO, which has tell()
    rest = line[lexer.instream.tell():].strip() if skip else line.strip()  # type: ignore[attr-defined]
    return rest[2:].strip() if rest.startswith("--") and words and words[0] == "--" else rest


def build_payload(args: argparse.Namespace, cell: str | None, line: str = "") -> dict:
    """The POST /jobs body from parsed options; the cell body becomes the script."""
    words = [w for w in args.command if w != "--"] if args.command else []
    if cell is not None and cell.strip():
        # cell form: a shell script, or run by the interpreter named on the line
        command = [*words, "-c", cell] if words else cell
    elif words:
        # line form: a shell command line, as typed (the service runs strings with sh -c)
        command = command_text(line, args.command) or shlex.join(words)
    else:
        raise UsageError("%gpu_submit: give a command (line form) or a script body (cell form)")
    args.vc = args.vc or os.environ.get("HIVED_VC")
    try:
        payload = body_from_args(args, command)
    except ValueError as exc:
        raise UsageError(f"%gpu_submit: {exc}") from None
    payload.setdefault("job_class", "te")
    return payload


@magics_class
class HivedMagics(Magics):
    def __init__(self, shell, client: HivedClient | None = None):
        super().__init__(shell)
        self._client = client
        self.last_job: str | None = None
        self.poll = 0.5  # seconds between status/log reads while following

    @property
    def client(self) -> HivedClient:
        if self._client is None:
            self._client = HivedClient()
        return self._client

    # -- helpers ----------------------------------------------------------
    def _user_ns(self) -> dict[str, Any]:
        assert self.shell is not None   # IPython registers magics on a shell
        return self.shell.user_ns

    def _job_id(self, line: str) -> str:
        words = shlex.split(line)
        if words:
            return words[0]
        if self.last_job:
            return self.last_job
        raise UsageError("no job id given and no job submitted from this notebook yet")

    def _default_vc(self) -> str:
        if os.environ.get("HIVED_VC"):
            return os.environ["HIVED_VC"]
        status = self.client.status()
        vcs = status.get("vcs") or []
        if len(vcs) == 1:
            return vcs[0]
        if not vcs:
            raise HivedError(403, f"user {status.get('user')!r} is in no VC of this cluster", "--vc")
        raise UsageError(f"%gpu_submit: give --vc (your VCs: {', '.join(vcs)})")

    @staticmethod
    def _fail(exc: HivedError) -> None:
        print(visible(str(exc)), file=sys.stderr)

    # -- magics -----------------------------------------------------------
    @line_cell_magic
    def gpu_submit(self, line: str, cell: str | None = None):
        """%gpu_submit [--vc V] [--gpus N | --cell-type TYPE] [--pods K] [--affinity hard|soft]
        [--te | --be | --opportunistic] [--grace S] [--name N] [--retries R] [--env K=V]
        [--label K=V] [--detach] command ...  (the flags of `hived submit`)

        Cell form: %%gpu_submit [options] [interpreter] - the cell body is the
        script (a shell script, or ``interpreter -c body``)."""
        args = _submit_parser().parse_args(shlex.split(line))
        payload = build_payload(args, cell, line)
        try:
            if "vc" not in payload:
                payload["vc"] = self._default_vc()
            job = self.client.submit(payload)
        except HivedError as exc:
            return self._fail(exc)
        self.last_job = job["id"]
        self._user_ns()["_gpu_job"] = job
        if args.detach:
            print(f"submitted {job['id']} to {job['vc']} ({job['state']})")
            return None
        self.follow(job)
        return None

    def follow(self, job: dict) -> dict:
        """Status widget + streamed log until the job ends; Ctrl-C detaches."""
        from IPython.display import display

        from .widgets_job import JobStatusWidget

        widget = JobStatusWidget()
        widget.update(job)
        in_kernel = getattr(self.shell, "kernel", None) is not None
        if in_kernel:
            display(widget)
        else:
            print(widget.text())
        offset, last_state, job_id = 0, job.get("state"), job["id"]
        try:
            while True:
                job = self.client.job(job_id)
                widget.update(job)
                if not in_kernel and job.get("state") != last_state:
                    print(widget.text())
                last_state = job.get("state")
                if job.get("started") or job.get("state") in TERMINAL_STATES:
                    chunk = self.client.logs(job_id, offset=offset)
                    if chunk["text"]:
                        sys.stdout.write(chunk["text"])
                        sys.stdout.flush()
                    offset = chunk["offset"]
                    if job.get("state") in TERMINAL_STATES and not chunk["text"]:
                        break
                time.sleep(self.poll)
        except KeyboardInterrupt:
            print(f"\ndetached from {job_id} (it keeps running): %gpu_status {job_id}, "
                  f"%gpu_logs {job_id}, %gpu_cancel {job_id}")
        except HivedError as exc:
            self._fail(exc)
        self._user_ns()["_gpu_job"] = job
        if in_kernel:
            print(widget.text())
        return job

    @line_magic
    def gpu_status(self, line: str):
        """%gpu_status [job_id] - state, placement, elapsed time (default: the last job)."""
        from .widgets_job import JobStatusWidget
        try:
            job = self.client.job(self._job_id(line))
        except HivedError as exc:
            return self._fail(exc)
        w = JobStatusWidget()
        w.update(job)
        print(w.text())
        for entry in (job.get("history") or [])[-10:]:
            t, state, reason = ((entry.get("time"), entry.get("state"), entry.get("reason"))
                                if isinstance(entry, dict) else entry)
            stamp = time.strftime("%H:%M:%S", time.localtime(t)) if isinstance(t, (int, float)) else t
            print(f"  {stamp} {state}{': ' + visible(reason) if reason else ''}")
        self._user_ns()["_gpu_job"] = job

    @line_magic
    def gpu_logs(self, line: str):
        """%gpu_logs [job_id] [-f] [--rank R] - print (or follow) a job's log."""
        p = _Parser(prog="%gpu_logs")
        p.add_argument("job_id", nargs="?")
        p.add_argument("-f", "--follow", action="store_true")
        p.add_argument("--rank", type=int, default=0)
        args = p.parse_args(shlex.split(line))
        job_id = self._job_id(args.job_id or "")
        offset = 0
        try:
            while True:
                chunk = self.client.logs(job_id, rank=args.rank, offset=offset, follow=args.follow)
                sys.stdout.write(chunk["text"])
                offset = chunk["offset"]
                if not args.follow or chunk["done"]:
                    break
        except KeyboardInterrupt:
            print(f"\nstopped following {job_id}")
        except HivedError as exc:
            self._fail(exc)

    @line_magic
    def gpu_cancel(self, line: str):
        """%gpu_cancel [job_id] - cancel a job (its owner, a VC admin or a cluster admin)."""
        try:
            job = self.client.cancel(self._job_id(line))
        except HivedError as exc:
            return self._fail(exc)
        from hived.service.job_table import cancel_said
        print(f"{job['id']}: {cancel_said(job)}")

    def _control(self, line: str, action: str) -> None:
        from hived.service.job_table import control_said
        try:
            job = self.client.control(self._job_id(line), action)
        except HivedError as exc:
            return self._fail(exc)
        print(f"{job['id']}: {control_said(job, action)}")

    @line_magic
    def gpu_hold(self, line: str):
        """%gpu_hold [job_id] - keep a queued job from starting; it keeps its place (as hived hold)."""
        self._control(line, "hold")

    @line_magic
    def gpu_release(self, line: str):
        """%gpu_release [job_id] - let a held job start again from its place (as hived release)."""
        self._control(line, "release")

    @line_magic
    def gpu_requeue(self, line: str):
        """%gpu_requeue [job_id] - stop a running job and queue it again at the head (as hived requeue)."""
        self._control(line, "requeue")

    @line_magic
    def gpu_jobs(self, line: str):
        """%gpu_jobs [--vc V] [--state S] [--owner U] - the jobs you may see."""
        p = _Parser(prog="%gpu_jobs")
        p.add_argument("--vc")
        p.add_argument("--state")
        p.add_argument("--owner", "--user", dest="user", help="only this user's jobs (as `hived jobs --owner`)")
        args = p.parse_args(shlex.split(line))
        from hived.service.job_table import jobs_table
        try:
            jobs = self.client.jobs(vc=args.vc, state=args.state, user=args.user)
        except HivedError as exc:
            return self._fail(exc)
        print(jobs_table(jobs, 160) if jobs else "no jobs")   # the columns of `hived jobs`
        self._user_ns()["_gpu_jobs"] = jobs


def load_ipython_extension(ipython) -> None:
    ipython.register_magics(HivedMagics(ipython))


def unload_ipython_extension(ipython) -> None:
    pass  # IPython has no unregister; reloading replaces the magics
