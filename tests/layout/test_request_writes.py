"""A job's request does not change after submission: no product code writes into one.

The journal relies on it (service/store.py): ``add_job`` stores the request once, in
``job_requests``, and ``update_job`` writes only the rest of the record at each state
change. A request changed in memory later would be lost at the next restart. This test
walks every product source and refuses a write through a ``.request`` attribute: an
assignment to ``x.request`` or anything under it (``x.request.env[k] = v``,
``x.request.name += ...``, ``del x.request.labels[k]``), a mutating call on something
under it (``x.request.env.update(...)``), ``setattr(x, "request", ...)`` and
``dataclasses.replace(x, request=...)``. (A request reached through another name is not
followed: review catches that.)
"""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ["core", "service", "cli", "reports", "jupyter_ext", "mlflow_plugin", "k8s", "kernels", "testing",
           "examples"]
MUTATORS = {"append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault", "popitem", "sort",
            "reverse", "__setitem__", "__delitem__"}


def _under_request(e: ast.expr) -> bool:
    """Whether ``e`` is something reached through a ``.request`` attribute (``x.request.a[b]``)."""
    while isinstance(e, (ast.Attribute, ast.Subscript)):
        e = e.value
        if isinstance(e, ast.Attribute) and e.attr == "request":
            return True
    return False


def _writes(tree: ast.AST) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Call):
            name = ast.unparse(node.func)
            if isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS and _under_request(node.func):
                out.append((node.lineno, name + "(...)"))
            if name in ("setattr", "object.__setattr__") and len(node.args) >= 2 \
                    and isinstance(node.args[1], ast.Constant) and node.args[1].value == "request":
                out.append((node.lineno, f"{name}(..., 'request')"))
            if name.endswith("replace") and any(k.arg == "request" for k in node.keywords):
                out.append((node.lineno, f"{name}(..., request=)"))
        for t in targets:
            if isinstance(t, (ast.Attribute, ast.Subscript)) and \
                    (_under_request(t) or (isinstance(t, ast.Attribute) and t.attr == "request")):
                out.append((node.lineno, ast.unparse(t)))
    return out


def test_the_walk_sees_every_kind_of_write():
    planted = ("rec.request = other\nrec.request.env['A'] = 'b'\nrec.request.name += 'x'\n"
               "del rec.request.labels['k']\nrec.request.env.update(more)\nrec.request.after.append('j1')\n"
               "setattr(rec, 'request', other)\ndataclasses.replace(rec, request=other)\n"
               "svc.rec.request.groups[0].pods = 2\n")
    assert sorted(line for line, _ in _writes(ast.parse(planted))) == list(range(1, 10))
    # reading is fine, and so is a handler's own ``self.request`` being read or passed on
    assert _writes(ast.parse("x = rec.request.env['A']\nf(rec.request)\nbody = self.request.body\n")) == []


def test_no_product_code_writes_into_a_request():
    found = []
    for folder in PRODUCT:
        for path in sorted((REPO / folder).rglob("*.py")):
            found += [f"{path.relative_to(REPO)}:{line}: {what}" for line, what in _writes(ast.parse(path.read_text()))]
    assert found == [], "a job's request is written once (service/store.py); these change one:\n" + "\n".join(found)
