"""``hived requeue``: stop running jobs and queue them again (cmd_hold.py has the code)."""
from __future__ import annotations

from hived.cli.cmd_hold import register_action


def register(subparsers, summary: str) -> None:
    register_action(subparsers, summary, "requeue")
