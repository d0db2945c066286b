"""The folders say what they hold, and the import graph keeps them honest.

Rules (docs/architecture.md):
- ``core`` decides and imports nothing of hived outside ``core``;
- the service, the CLI, the report writers, MLflow and Kubernetes never import
  the Jupyter extension, except ``hived serve``, which runs a Jupyter server;
- no product package imports the test harnesses in ``hived.testing``;
- ``hived.service`` does not import the doors (CLI, Jupyter, MLflow, Kubernetes);
- no door imports another door: code two doors share lives in ``hived.service`` (e.g.
  ``service/job_table.py``), which both import. The CLI's front ends of two doors are the
  only exceptions: ``hived serve`` runs the Jupyter server, ``hived kernelspec`` writes
  the kernels' kernelspecs.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ["core", "service", "cli", "reports", "jupyter_ext", "mlflow_plugin", "k8s", "kernels"]
KERNELS_ALLOWED = {"cli/cmd_kernelspec.py"}   # `hived kernelspec` is the front end of hived.kernels.kernelspecs
JUPYTER_ALLOWED = {"cli/cmd_serve.py"}    # `hived serve` starts the Jupyter server itself
DOORS = ["jupyter_ext", "mlflow_plugin", "cli", "k8s", "kernels"]
DOOR_FRONT_ENDS = {("cli/cmd_serve.py", "hived.jupyter_ext"), ("cli/cmd_kernelspec.py", "hived.kernels")}


def _imports(path: Path) -> set[str]:
    """Absolute names of the hived modules a file imports (relative imports resolved)."""
    rel = path.relative_to(REPO)
    package = ["hived", *rel.parent.parts]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("hived")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            if name.startswith("hived"):
                out.add(name)
                out |= {f"{name}.{a.name}" for a in node.names}
    return out


def _files(folder: str) -> list[Path]:
    return sorted((REPO / folder).rglob("*.py"))


def _offenders(folders, banned, allowed=frozenset()):
    bad = []
    for folder in folders:
        for f in _files(folder):
            rel = str(f.relative_to(REPO))
            if rel in allowed:
                continue
            hits = sorted(n for n in _imports(f) if any(n == b or n.startswith(b + ".") for b in banned))
            if hits:
                bad.append(f"{rel}: {', '.join(hits)}")
    return bad


def test_the_product_folders_exist_and_map_onto_hived():
    setup = (REPO / "setup.py").read_text()
    for folder in PRODUCT + ["testing"]:
        assert (REPO / folder / "__init__.py").is_file(), folder
        assert f'"hived.{folder}": "{folder}"' in setup, f"setup.py does not map {folder}"


def test_core_imports_only_core():
    banned = [f"hived.{p}" for p in PRODUCT + ["testing"] if p != "core"]
    assert _offenders(["core"], banned) == []


@pytest.mark.parametrize("folder", ["service", "cli", "reports", "mlflow_plugin", "k8s", "kernels", "testing"])
def test_nothing_outside_jupyter_ext_imports_it(folder):
    assert _offenders([folder], ["hived.jupyter_ext"], JUPYTER_ALLOWED) == []


def test_the_service_does_not_import_its_doors():
    banned = ["hived.cli", "hived.jupyter_ext", "hived.mlflow_plugin", "hived.k8s", "hived.kernels", "hived.reports"]
    assert _offenders(["service"], banned) == []


def test_the_kernels_import_only_core_and_service_and_only_hived_kernelspec_imports_them():
    others = ["hived.cli", "hived.jupyter_ext", "hived.mlflow_plugin", "hived.k8s", "hived.reports", "hived.testing"]
    assert _offenders(["kernels"], others) == []
    doors = ["service", "cli", "reports", "jupyter_ext", "mlflow_plugin", "k8s", "core"]
    assert _offenders(doors, ["hived.kernels"], KERNELS_ALLOWED) == []


@pytest.mark.parametrize("door", DOORS)
def test_no_door_imports_another_door(door):
    others = [f"hived.{d}" for d in DOORS if d != door]
    allowed = {f for f, target in DOOR_FRONT_ENDS if f.startswith(door + "/")}
    bad = _offenders([door], others, allowed)
    for f, target in DOOR_FRONT_ENDS:     # a front end imports its own door, and no other
        if f.startswith(door + "/"):
            bad += _offenders_in(f, [o for o in others if o != target])
    assert bad == []


def _offenders_in(rel: str, banned) -> list[str]:
    hits = sorted(n for n in _imports(REPO / rel) if any(n == b or n.startswith(b + ".") for b in banned))
    return [f"{rel}: {', '.join(hits)}"] if hits else []


def test_the_door_check_sees_a_door_importing_another(tmp_path):
    """A planted import of the CLI from the Jupyter extension (as magics.py once did) is refused."""
    fake = REPO / "jupyter_ext" / "_layout_probe.py"
    fake.write_text("from hived.cli.cmd_cancel import register\n")
    try:
        assert _offenders(["jupyter_ext"], [f"hived.{d}" for d in DOORS if d != "jupyter_ext"]) == [
            "jupyter_ext/_layout_probe.py: hived.cli.cmd_cancel, hived.cli.cmd_cancel.register"]
    finally:
        fake.unlink()


def test_no_product_package_imports_the_test_harnesses():
    assert _offenders(PRODUCT, ["hived.testing"]) == []


def test_the_checker_sees_a_forbidden_import(tmp_path, monkeypatch):
    """The walk itself works: a planted relative import of the extension is found."""
    fake = REPO / "service" / "_layout_probe.py"
    fake.write_text("from ..jupyter_ext import auth\n")
    try:
        assert _offenders(["service"], ["hived.jupyter_ext"]) == [
            "service/_layout_probe.py: hived.jupyter_ext, hived.jupyter_ext.auth"]
    finally:
        fake.unlink()


# ---------------------------------------------------------------------------- import circles
#
# The graph: one node per hived module (a package is its __init__), one edge per import that
# runs when the module is imported or type-checked: module-level imports (also under ``try``/``if``)
# and those under ``if TYPE_CHECKING:``, which are design dependencies even though they do not
# run. Imports inside a function or method are left out: they run at the call, never while the
# importing module is half built, and are the sanctioned way to break a circle where a
# dependency is needed only at one call site (each one says why beside it).
# Circles still open, each with the helper that owns the files; remove an entry when it closes.
KNOWN_CYCLES: dict[frozenset[str], str] = {}   # none left; a new one fails the test below


def _module_name(path: Path, root: Path) -> str:
    parts = ["hived", *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_time_imports(body: list[ast.stmt]):
    """The import statements of ``body`` outside functions (classes and blocks included)."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
            continue
        for field in ("body", "orelse", "finalbody", "handlers"):
            sub = getattr(node, field, None)
            if isinstance(sub, list):
                yield from _import_time_imports(sub)


def _graph(root: Path = REPO, folders=PRODUCT) -> dict[str, set[str]]:
    files = {_module_name(p, root): p for f in folders for p in sorted((root / f).rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        out: set[str] = set()
        for node in _import_time_imports(ast.parse(path.read_text(), str(path)).body):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = package[: len(package) - node.level + 1] if node.level else []
                mod = ".".join(base + ([node.module] if node.module else []))
                targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in files else mod for a in node.names]
            for t in targets:
                while t and t not in files:        # a name inside a module: the module
                    t = t.rpartition(".")[0]
                if t and t != name:
                    out.add(t)
        graph[name] = out
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[frozenset[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.add(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    found.append(frozenset(comp))
    return found


def test_no_import_circles_in_the_product_packages():
    found = _cycles(_graph())
    new = [sorted(c) for c in found if c not in KNOWN_CYCLES]
    assert new == [], f"import circles: {new}"
    closed = [sorted(c) for c in KNOWN_CYCLES if c not in found]
    assert closed == [], f"these circles are gone: remove them from KNOWN_CYCLES: {closed}"


def test_the_cycle_check_sees_a_planted_circle_and_ignores_call_site_imports(tmp_path):
    pkg = tmp_path / "core"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import B\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .c import C\n")
    (pkg / "c.py").write_text("from hived.core import a\n")
    (pkg / "d.py").write_text("from . import a\n")
    (pkg / "e.py").write_text("def f():\n    from .d import x\n")
    (pkg / "f.py").write_text("class K:\n    from .e import f\n")
    graph = _graph(tmp_path, ["core"])
    assert graph["hived.core.a"] == {"hived.core.b"} and graph["hived.core.b"] == {"hived.core.c"}
    assert graph["hived.core.e"] == set() and graph["hived.core.f"] == {"hived.core.e"}
    assert _cycles(graph) == [frozenset({"hived.core.a", "hived.core.b", "hived.core.c"})]
