"""The ``hived`` console script.

Each sub-command lives in its own module ``cmd_<name>.py`` beside this one,
exposing ``register(subparsers)`` which adds its parser and sets
``func(args) -> int`` as the default. Modules are imported lazily so that a
quick ``hived spec check`` does not pay for jupyter-server or kubernetes.
"""
from __future__ import annotations

import argparse
import importlib
import sys

# (module, one-line summary) in the order --help lists them
COMMANDS = [
    ("spec", "check, show or reload a cluster spec (cells, chains, VCs)"),
    ("serve", "run the scheduler service headless (jupyter-server + REST API)"),
    ("submit", "submit a job (TE or BE, gang, GPUs, VC, affinity, grace period)"),
    ("jobs", "list jobs (filters by VC, state, user)"),
    ("status", "the service in numbers (jobs per state, recovery), or one job in detail"),
    ("logs", "print or follow (-f) a job's log"),
    ("cancel", "cancel a job (its owner or a VC admin)"),
    ("vc", "show VC views and usage"),
    ("gc", "remove finished jobs a VC's retention policy lets go of; set the policy (admins)"),
    ("exchange", "post and inspect cell exchange offers and requests"),
    ("discover", "read this machine's GPUs with NVML and write a cell spec"),
    ("simulate", "replay a trace or a synthetic workload through the engine"),
]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("hived")
    except PackageNotFoundError:   # run from a source tree that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hived",
        description="hived: share one GPU cluster between teams safely "
        "(HiveD cells, FitGpp preemption, AlloX placement).",
        epilog="Run 'hived COMMAND --help' for the options of one command.",
    )
    parser.add_argument("--version", action="version", version=f"hived {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, summary in COMMANDS:
        try:
            module = importlib.import_module(f"hived.cli.cmd_{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"hived.cli.cmd_{name}":
                continue  # command not shipped in this build
            raise
        module.register(sub, summary)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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
