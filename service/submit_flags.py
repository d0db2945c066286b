"""The options of a job submission, shared by every door.

``hived submit`` and ``%gpu_submit`` add the same flags with
``add_submit_flags`` and turn them into the POST /jobs body with
``body_from_args``; the MLflow backend builds its body with ``request_body``
from its ``--backend-config`` keys. One spelling per option everywhere:
``--cell-type`` (``--cell`` kept as an alias), ``--grace``, ``--retries``,
``--env NAME=VALUE``, ``--label KEY=VALUE``.
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
from collections.abc import Iterable
from typing import Any

# body keys copied as they are when set (None means: the service's default)
_PLAIN = ("job_class", "gpus", "pods", "cell_type", "chain", "affinity", "grace_period", "name",
          "estimate", "max_retries", "cpus", "memory_gb", "time_limit", "after")


def add_submit_flags(p: argparse.ArgumentParser, *, vc_help: str) -> None:
    p.add_argument("--vc", default=None, help=vc_help)
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("--te", dest="job_class", action="store_const", const="te",
                      help="trial-and-error job (default): may preempt BE jobs of the VC")
    kind.add_argument("--be", dest="job_class", action="store_const", const="be",
                      help="best-effort batch job: may be preempted by TE jobs, then resumes")
    kind.add_argument("--opportunistic", dest="job_class", action="store_const", const="opportunistic",
                      help="run on idle cells of any VC at low priority")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--gpus", type=int, default=None, help="GPUs per pod (default 1)")
    size.add_argument("--cell-type", "--cell", dest="cell_type", default=None,
                      help="one cell of this type per pod instead of --gpus, e.g. CHAIN.SOCKET")
    p.add_argument("--pods", type=int, default=None, help="pods in the gang (default 1)")
    p.add_argument("--cpus", type=float, default=None, help="CPUs per pod (default: the node's CPUs "
                   "shared out by GPUs; a cgroup limit with the local launcher)")
    p.add_argument("--memory", dest="memory_gb", type=float, default=None, metavar="GB",
                   help="memory per pod in GB (default: the node's share by GPUs)")
    p.add_argument("--chain", default=None, help="GPU pool (cell chain) to use")
    p.add_argument("--affinity", choices=["hard", "soft"], default=None,
                   help="hard: wait for the gang to fit one cell; soft: relax after a while")
    p.add_argument("--grace", dest="grace_period", type=float, default=None,
                   help="seconds between SIGTERM and SIGKILL when preempted or cancelled (default 0)")
    p.add_argument("--name", default=None, help="a name to recognise the job by")
    p.add_argument("--retries", dest="max_retries", type=int, default=None, metavar="N",
                   help="run again up to N times after a failure (default: the failure's class "
                        "decides; a plain non-zero exit is not retried)")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="environment variable (repeatable)")
    p.add_argument("--label", action="append", default=[], metavar="KEY=VALUE",
                   help="a tag kept with the job (repeatable)")
    p.add_argument("--workdir", default=None, help="working directory (default: the current one)")
    p.add_argument("--allow-opportunistic", action="store_true",
                   help="may run at low priority on other VCs' idle cells when the VC is full")
    p.add_argument("--estimate", type=float, default=None, help="expected run time, seconds")
    p.add_argument("--time-limit", dest="time_limit", type=time_limit, default=None, metavar="TIME",
                   help="stop each run after this long (90m, 2h, 1d, 3600s, HH:MM:SS or D-HH:MM:SS); it "
                        "then fails as 'timeout', not retried unless --retries asks")
    p.add_argument("--after", type=job_list, default=None, metavar="JOB[,JOB]",
                   help="start only after these jobs succeeded; fails without starting if one fails")


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def time_limit(text: str) -> float:
    """``90m``, ``2h``, ``1d``, ``3600s``, ``HH:MM:SS``, ``MM:SS`` or ``D-HH:MM:SS`` -> seconds.
    A bare number is refused: Slurm reads it as minutes, hived's other options as seconds."""
    t = str(text).strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd])", t)
    if m:
        return float(m.group(1)) * _UNITS[m.group(2)]
    m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d{1,2}))?(?::(\d{1,2}))?", t)
    if m and ":" in t or (m and m.group(1)):
        days, a, b, c = (int(x) if x else 0 for x in m.groups())
        # D-HH[:MM[:SS]] counts hours first; otherwise HH:MM:SS or MM:SS as Slurm reads them
        h, mi, s = (a, b, c) if m.group(1) is not None or m.group(4) is not None else (0, a, b)
        return float(days * 86400 + h * 3600 + mi * 60 + s)
    raise argparse.ArgumentTypeError(f"want a time like 90m, 2h, 1d, 3600s or HH:MM:SS, got {text!r}"
                                     + (" (give a unit: a bare number is minutes in Slurm, seconds elsewhere "
                                        "in hived)" if t.replace(".", "", 1).isdigit() else ""))


def job_list(text: str) -> list[str]:
    """``j3,j4`` -> ["j3", "j4"]."""
    ids = [j.strip() for j in str(text).split(",") if j.strip()]
    if not ids:
        raise argparse.ArgumentTypeError(f"want job ids like j3 or j3,j4, got {text!r}")
    return ids


_WORD = re.compile(r"^[A-Za-z0-9_./+@%:,-]+$")
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# a shell's own words, not programs on the PATH (reserved words and builtins)
_SHELL_WORDS = frozenset("""if then else elif fi case esac for while until do done in function select time
    ! { } [[ : . cd exec export eval set unset trap read echo printf test [ true false shift wait ulimit
    umask source alias command type kill exit return break continue readonly local times getopts hash
    pwd jobs fg bg""".split())


def program_of(command) -> str | None:
    """The program a command starts, when it can be told without running a shell."""
    if isinstance(command, list):
        return command[0] if command else None
    try:
        words = shlex.split(command or "")
    except ValueError:
        return None
    while words and _ASSIGN.match(words[0]):
        words.pop(0)
    if not words or not _WORD.match(words[0]) or words[0] in _SHELL_WORDS:
        return None
    return words[0]


def pairs(items: Iterable[str], flag: str) -> dict:
    """``["A=1", "B=x=y"]`` -> ``{"A": "1", "B": "x=y"}``; ValueError naming the flag."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{flag}: want NAME=VALUE, got {item!r}")
        out[key] = value
    return out


def request_body(vc: str | None, command: str | list, *, workdir: str | None = None,
                 env: dict | None = None, labels: dict | None = None,
                 allow_opportunistic: bool = False, **options: Any) -> dict:
    """The POST /jobs body; options left None take the service's defaults."""
    body: dict = {"command": command, "workdir": workdir or os.getcwd()}
    if vc:
        body["vc"] = vc
    for key in _PLAIN:
        if options.get(key) is not None:
            body[key] = options[key]
    unknown = set(options) - set(_PLAIN)
    if unknown:
        raise TypeError(f"request_body: unknown option(s) {sorted(unknown)}")
    if env:
        body["env"] = dict(env)
    if labels:
        body["labels"] = dict(labels)
    if allow_opportunistic:
        body["allow_opportunistic"] = True
    return body


def body_from_args(args: argparse.Namespace, command: str | list) -> dict:
    """The body from flags added by ``add_submit_flags``."""
    return request_body(args.vc, command, workdir=args.workdir, env=pairs(args.env, "--env"),
                        labels=pairs(args.label, "--label"),
                        allow_opportunistic=args.allow_opportunistic,
                        **{k: getattr(args, k) for k in _PLAIN})
