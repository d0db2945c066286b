"""What a job needs to resume after preemption: a checkpoint dir and a flag.

The scheduler restarts a preempted BE job with the same command and
environment, so "is this a resumption?" is answered inside the job: a small
shell prologue keeps a marker file in the run's checkpoint directory. The
first attempt finds none (HIVED_RESUMED=0); every later attempt of the same
MLflow run finds it (HIVED_RESUMED=1). This needs nothing from the job's
Python environment, and costs one shell start.
"""
from __future__ import annotations

import os
import shlex

MARKER = ".hived_attempts"


def default_checkpoint_root() -> str:
    base = os.environ.get("HIVED_DATA_DIR") or "~/.hived"
    return os.path.join(os.path.expanduser(base), "mlflow-checkpoints")


def checkpoint_dir_for(run_id: str, configured: str | None = None) -> str:
    """``configured``/<run id>, or ~/.hived/mlflow-checkpoints/<run id>; absolute."""
    root = os.path.expanduser(configured) if configured else default_checkpoint_root()
    return os.path.abspath(os.path.join(root, run_id))


def wrap_command(command: str, checkpoint_dir: str) -> str:
    """The entry point command behind the resume prologue; ``exec`` keeps signals direct."""
    d = shlex.quote(checkpoint_dir)
    marker = shlex.quote(os.path.join(checkpoint_dir, MARKER))
    return (f"mkdir -p {d} && "
            f"if [ -s {marker} ]; then HIVED_RESUMED=1; else HIVED_RESUMED=0; fi; "
            f"echo attempt >> {marker}; "
            f"HIVED_CHECKPOINT_DIR={d}; "
            f"export HIVED_RESUMED HIVED_CHECKPOINT_DIR; "
            f"exec /bin/sh -c {shlex.quote(command)}")


def attempts_in(checkpoint_dir: str) -> int:
    """How many attempts already ran in this checkpoint directory (0: a fresh start)."""
    try:
        with open(os.path.join(checkpoint_dir, MARKER)) as f:
            return sum(1 for _ in f)
    except OSError:
        return 0
