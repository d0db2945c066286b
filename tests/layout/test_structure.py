"""The product code stays cut into parts a reader can hold: no mixins, short files, short functions.

- no class whose name ends in ``Mixin``: a part of a class is an object it composes, taking a
  narrow interface (service/host.py), not a base class sharing its private members;
- no product file over ``MAX_FILE_LINES`` lines;
- no product function over ``MAX_FUNCTION_LINES`` lines (its ``def`` line to its last line,
  docstring and comments included);
- no read of another object's private member (``obj._x`` where ``obj`` is not ``self``/``cls``)
  but the library members in ``LIBRARY_PRIVATE`` (ctypes, os, tornado, jupyter-server and
  JupyterHub offer these under a leading underscore and nothing else does the job).

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
LIBRARY_PRIVATE = {
    "ctypes._Pointer", "ctypes._SimpleCData", "value._fields_",   # ctypes' documented type names and fields
    "os._exit",                                                   # a forked child ends without cleanup
    "handler._jupyter_current_user",                              # jupyter-server: the user it identified
    "self.hub_auth._get_token_cookie",                            # JupyterHub: the browser's token cookie
}


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


def private_reads(folders) -> list[str]:
    out = []
    for folder in folders:
        for f in _files(folder):
            for node in ast.walk(_tree(f)):
                if not (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)
                        and node.attr.startswith("_") and not node.attr.startswith("__")):
                    continue
                owner = node.value
                if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                    continue
                if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
                    continue
                if ast.unparse(node) not in LIBRARY_PRIVATE:
                    out.append(f"{f.relative_to(REPO)}:{node.lineno}: {ast.unparse(node)}")
    return out


@pytest.mark.parametrize("folder", PACKAGES)
def test_no_read_of_another_objects_private_members(folder):
    assert private_reads([folder]) == []


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
    """Each check finds a planted offender: a mixin, a long file, a long function, a private read."""
    planted = tmp_path / "planted"
    planted.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (planted / "bad.py").write_text(f"class PartMixin:\n    pass\n\n\ndef long():\n{body}\n"
                                    + "\n" * MAX_FILE_LINES + "print(svc._lock, self._own)\n")
    globals()["REPO"], saved = tmp_path, REPO
    try:
        assert [m.split(": ", 1)[1] for m in mixins(["planted"])] == ["class PartMixin"]
        assert len(long_files(["planted"])) == 1
        assert [m.split(": ", 1)[1] for m in long_functions(["planted"])] == [f"long {MAX_FUNCTION_LINES + 1} lines"]
        assert [m.split(": ", 1)[1] for m in private_reads(["planted"])] == ["svc._lock"]
    finally:
        globals()["REPO"] = saved
