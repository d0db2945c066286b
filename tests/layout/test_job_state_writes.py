"""A job's state and wait reason change only through ``JobRecord``'s methods.

Like Kueue, whose workload status changes only through a few ``mark*``
functions, hived writes ``JobRecord.state`` and ``JobRecord.wait_reason`` in
``core/engine_records.py`` alone (``mark_queued``, ``mark_placed``,
``mark_running``, ``mark_preempting``, ``mark_ended``, ``explain_wait``): each
change lands in the history and starts a new timer epoch. This test walks
every product source and refuses any other write: an assignment, an augmented
assignment, ``setattr`` with the name, or ``dataclasses.replace(..., state=...)``.
It also refuses job state groups spelled as literals outside ``core/jobs.py``.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ["core", "service", "cli", "reports", "jupyter_ext", "mlflow_plugin", "k8s", "testing", "examples"]
FIELDS = {"state", "wait_reason"}
OWNERS = {"core/jobs.py", "core/engine_records.py"}
# other objects that happen to have a ``state`` attribute (not jobs): (file, written target)
NOT_JOBS = {("core/exchange.py", "ex.state"),          # an exchange's own ExchangeState
            ("core/exchange_state.py", "e.state"),    # the same, at restore
            ("k8s/nodes.py", "self.state"),           # node -> its last reported condition
            ("testing/minikas.py", "self.state")}     # the test API server's data folder


def _writes(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, target) of every write to a ``state``/``wait_reason`` attribute in ``tree``."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Call):
            name = ast.unparse(node.func)
            if name in ("setattr", "object.__setattr__") and len(node.args) >= 2 \
                    and isinstance(node.args[1], ast.Constant) and node.args[1].value in FIELDS:
                out.append((node.lineno, f"{name}(..., {node.args[1].value!r})"))
            if name.endswith("replace") and any(k.arg in FIELDS for k in node.keywords):
                out.append((node.lineno, f"{name}(..., {'/'.join(k.arg for k in node.keywords if k.arg in FIELDS)}=)"))
        for t in targets:
            for sub in ast.walk(t):
                if isinstance(sub, ast.Attribute) and sub.attr in FIELDS and isinstance(sub.ctx, ast.Store):
                    out.append((sub.lineno, ast.unparse(sub)))
                if isinstance(sub, ast.Subscript) and isinstance(sub.slice, ast.Constant) \
                        and sub.slice.value in FIELDS and "__dict__" in ast.unparse(sub.value):
                    out.append((sub.lineno, ast.unparse(sub)))
    return out


def _sources() -> list[tuple[str, Path]]:
    return [(str(p.relative_to(REPO)), p) for folder in PRODUCT for p in sorted((REPO / folder).rglob("*.py"))]


def test_the_walk_sees_every_kind_of_write():
    planted = ("rec.state = JobState.RUNNING\nrec.wait_reason += 'x'\nsetattr(rec, 'state', s)\n"
               "r2 = dataclasses.replace(rec, wait_reason='')\nrec.__dict__['state'] = s\na, b.state = 1, 2\n")
    assert sorted(line for line, _ in _writes(ast.parse(planted))) == [1, 2, 3, 4, 5, 6]
    assert _writes(ast.parse("x = rec.state\nrec.mark_queued(0.0, 'r', 'w')\nif rec.state is s: pass\n")) == []


def test_only_jobrecord_writes_a_job_state_or_wait_reason():
    assert len(_sources()) > 100   # the walk found the product
    bad = []
    for rel, path in _sources():
        if rel in OWNERS:
            continue
        for line, target in _writes(ast.parse(path.read_text(), rel)):
            if (rel, target) not in NOT_JOBS:
                bad.append(f"{rel}:{line}: {target}")
    assert not bad, ("write through JobRecord.mark_* / explain_wait (core/engine_records.py) instead:\n"
                     + "\n".join(bad))


STATE_NAMES = "queued|placed|running|preempting|succeeded|failed|cancelled"
# two or more job states side by side in a tuple, list or set literal: a group spelled by hand
ONE = rf"""(JobState\.[A-Z]+|["']({STATE_NAMES})["'])"""
GROUP = re.compile(rf"[(\[{{]\s*{ONE}\s*,\s*{ONE}")


def test_job_state_groups_come_only_from_core_jobs():
    assert GROUP.search('if s in ("queued", "placed"):') and GROUP.search("x in (JobState.RUNNING, JobState.PLACED)")
    bad = []
    for rel, path in _sources():
        if rel == "core/jobs.py":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if GROUP.search(line):
                bad.append(f"{rel}:{n}: {line.strip()}")
    assert not bad, "use the groups of core/jobs.py (HOLDING, WAITING, STARTED, ...):\n" + "\n".join(bad)
