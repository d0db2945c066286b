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
