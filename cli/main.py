"""The ``hived`` console script.

Each sub-command lives in its own module ``cmd_<name>.py`` beside this one,
exposing ``register(subparsers, summary)`` which adds its parser and sets
``func(args) -> int`` as the default. A run imports only the module of the
command it runs: ``hived --help`` lists the summaries below without importing
any, and ``hived spec check`` never pays for jupyter-server, an HTTP client or
kubernetes. ``build_parser()`` with no argument registers every command (for
callers that parse several command lines with one parser).
"""
from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Collection, Sequence
from typing import Any

# (module, one-line summary) in the order --help lists them
COMMANDS = [
    ("spec", "check, show or reload a cluster spec (cells, chains, VCs)"),
    ("serve", "run the scheduler service headless (jupyter-server + REST API)"),
    ("submit", "submit a job (TE or BE, gang, GPUs, VC, affinity, grace period)"),
    ("jobs", "list jobs (filters by VC, state, user)"),
    ("status", "the service in numbers (jobs per state, recovery), or one job in detail"),
    ("logs", "print or follow (-f) a job's log"),
    ("cancel", "cancel a job (its owner or a VC admin)"),
    ("hold", "keep queued jobs from starting until released (its owner or a VC admin)"),
    ("release", "let held jobs start again"),
    ("requeue", "stop running jobs and queue them again at the head of their VC's queue"),
    ("nodes", "nodes, their cells and GPUs: free, used, unhealthy, and who holds them"),
    ("vc", "show VC views and usage"),
    ("gc", "remove finished jobs a VC's retention policy lets go of; set the policy (admins)"),
    ("exchange", "post and inspect cell exchange offers and requests"),
    ("kernelspec", "install, list or remove Jupyter kernels that run as TE jobs of a VC"),
    ("discover", "read this machine's GPUs with NVML and write a cell spec"),
    ("simulate", "replay a trace or a synthetic workload through the engine"),
]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("hived")
    except PackageNotFoundError:   # run from a source tree that was never installed
        return "unknown (not installed)"


class _VersionAction(argparse.Action):
    """``--version``: reads the installed version only when asked (importlib.metadata is slow to import)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: Any = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs=0,
                         help=help or "show the installed version and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        print(f"hived {_version()}")
        parser.exit()


def command_of(argv: Sequence[str]) -> str | None:
    """The command an argument list runs: its first word that is not an option
    (the top-level options take no value), when it names a command."""
    names = {name for name, _ in COMMANDS}
    for word in argv:
        if word == "--":
            return None
        if not word.startswith("-"):
            return word if word in names else None
    return None


def build_parser(commands: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The parser with ``commands`` registered in full (None: all of them); the
    others are listed with their summary only, so ``--help`` still shows them."""
    parser = argparse.ArgumentParser(
        prog="hived",
        description="hived: share one GPU cluster between teams safely "
        "(HiveD cells, FitGpp preemption, AlloX placement).",
        epilog="Run 'hived COMMAND --help' for the options of one command.",
    )
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, summary in COMMANDS:
        if commands is not None and name not in commands:
            sub.add_parser(name, help=summary)
            continue
        try:
            module = importlib.import_module(f"hived.cli.cmd_{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"hived.cli.cmd_{name}":
                continue  # command not shipped in this build
            raise
        module.register(sub, summary)
    return parser


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    command = command_of(words)
    parser = build_parser([command] if command else [])
    args = parser.parse_args(words)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
