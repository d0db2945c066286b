"""The product code stays cut into parts a reader can hold: no mixins, short files, short functions.

- no class whose name ends in ``Mixin``: a part of a class is an object it composes, taking a
  narrow interface (service/host.py), not a base class sharing its private members;
- no product file over ``MAX_FILE_LINES`` lines;
- no product function over ``MAX_FUNCTION_LINES`` lines (its ``def`` line to its last line,
  docstring and comments included).

``PACKAGES`` lists the folders these checks cover; add a folder there to hold it to them too.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("service", "jupyter_ext", "k8s", "cli", "mlflow_plugin", "kernels", "reports", "testing")
MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 80


def _files(folder: str) -> list[Path]:
    return sorted((REPO / folder).rglob("*.py"))


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def mixins(folders) -> list[str]:
    return [f"{f.relative_to(REPO)}:{node.lineno}: class {node.name}"
            for folder in folders for f in _files(folder) for node in ast.walk(_tree(f))
            if isinstance(node, ast.ClassDef) and node.name.endswith("Mixin")]


def long_files(folders, limit: int = MAX_FILE_LINES) -> list[str]:
    out = []
    for folder in folders:
        for f in _files(folder):
            n = len(f.read_text().splitlines())
            if n > limit:
                out.append(f"{f.relative_to(REPO)}: {n} lines")
    return out


def long_functions(folders, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    out = []
    for folder in folders:
        for f in _files(folder):
            for node in ast.walk(_tree(f)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    n = (node.end_lineno or node.lineno) - node.lineno + 1
                    if n > limit:
                        out.append(f"{f.relative_to(REPO)}:{node.lineno}: {node.name} {n} lines")
    return out


@pytest.mark.parametrize("folder", PACKAGES)
def test_no_mixins(folder):
    assert mixins([folder]) == []


@pytest.mark.parametrize("folder", PACKAGES)
def test_no_file_over_the_limit(folder):
    assert long_files([folder]) == []


@pytest.mark.parametrize("folder", PACKAGES)
def test_no_function_over_the_limit(folder):
    assert long_functions([folder]) == []


def test_the_checks_see_what_they_refuse(tmp_path):
    """Each check finds a planted offender: a mixin, a long file, a long function."""
    planted = tmp_path / "planted"
    planted.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (planted / "bad.py").write_text(f"class PartMixin:\n    pass\n\n\ndef long():\n{body}\n"
                                    + "\n" * MAX_FILE_LINES)
    globals()["REPO"], saved = tmp_path, REPO
    try:
        assert [m.split(": ", 1)[1] for m in mixins(["planted"])] == ["class PartMixin"]
        assert len(long_files(["planted"])) == 1
        assert [m.split(": ", 1)[1] for m in long_functions(["planted"])] == [f"long {MAX_FUNCTION_LINES + 1} lines"]
    finally:
        globals()["REPO"] = saved
