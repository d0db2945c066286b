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
          "estimate", "max_retries", "cpus", "memory_gb")


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


_WORD = re.compile(r"^[A-Za-z0-9_./+@%:,-]+$")
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


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
    if not words or not _WORD.match(words[0]):
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
