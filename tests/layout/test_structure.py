"""The product code stays cut into parts a reader can hold: no mixins, short files, short functions.

- no class whose name ends in ``Mixin``: a part of a class is an object it composes, taking a
  narrow interface (service/host.py), not a base class sharing its private members;
- no product file over ``MAX_FILE_LINES`` lines;
- no product function over ``MAX_FUNCTION_LINES`` lines (its ``def`` line to its last line,
  docstring and comments included);
- no read of another object's private member (``obj._x`` where ``obj`` is not ``self``/``cls``)
  but the library members in ``LIBRARY_PRIVATE`` (ctypes, os, tornado, jupyter-server and
  JupyterHub offer these under a leading underscore and nothing else does the job);
- no implementation inheritance between our own classes: a product class may inherit another of
  ours only when that base is an abstract interface (a ``Protocol``, an ``ABC``), an exception or a
  dataclass, or is listed in ``SHARED_BASES`` with the reason (the no-``*Mixin`` rule, whatever
  the base is called). ``KNOWN_SUBCLASSES`` lists the offenders still to be cut; the test fails
  when one is gone, so that the list only shrinks.

``PACKAGES`` lists the folders these checks cover; add a folder there to hold it to them too. The
inheritance check also covers ``core`` (whose other checks are in test_core_structure.py): a base
there is one of ours too.
"""
from __future__ import annotations

import ast
import builtins
import functools
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

# Our classes that other classes of ours may inherit from, and why.
SHARED_BASES = {
    "core/grant.py:Grant": "a record of held cells; a stored binding and a quota grant are the same record "
                           "and only name their cells otherwise",
    "jupyter_ext/handlers/base.py:HivedHandler": "tornado routes are RequestHandler classes: the one base "
                                                 "gives every route hived's authentication, errors and body limit",
    "jupyter_ext/auth.py:HivedUser": "jupyter-server's identity API is class-based: the Hub's user is hived's "
                                     "user with the Hub's groups",
    "jupyter_ext/auth.py:HivedIdentityProvider": "jupyter-server configures its identity provider by class "
                                                 "(traitlets): the Hub's provider is hived's with the Hub's tokens",
    "jupyter_ext/widgets_dash.py:_Dashboard": "ipywidgets builds a widget by subclassing a box: the cluster and "
                                              "VC dashboards share the frame and draw their own page",
    "testing/launcher_noop.py:NoopLauncher": "test support: InstantLauncher is a NoopLauncher preset that a "
                                             "service builds from its import path",
}
# Subclasses that still inherit an implementation of ours: "file:Class <- file:Base", with who cuts them.
KNOWN_SUBCLASSES = {
    "k8s/service.py:KubernetesSchedulerService <- service/scheduler.py:SchedulerService":
        "issue 24: the Kubernetes service extends the service's start-up, rounds and views "
        "(recovery first, the leader Lease); to be composed like the service's own parts",
}
PRODUCT = PACKAGES + ("core",)
INTERFACE_BASES = {"Protocol", "ABC"}


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


def _module(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(["hived"] + (parts[:-1] if parts[-1] == "__init__" else parts))


def _names(tree: ast.Module, module: str, package: bool) -> dict[str, tuple[str, str]]:
    """Local name -> (module, name) for each ``from X import name`` (relative ones resolved),
    and local name -> (module, "") for each ``import X as name``."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            here = module.split(".") if package else module.split(".")[:-1]
            base = here[:len(here) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            for a in node.names:
                out[a.asname or a.name] = (mod, a.name)
        elif isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = (a.asname and a.name or a.name.split(".")[0], "")
    return out


def class_index(folders) -> dict[str, dict]:
    """module -> {"file", "names" (its imports), "classes": name -> ClassDef} of our code."""
    index = {}
    for folder in folders:
        for f in _files(folder):
            tree = _tree(f)
            mod = _module(f)
            index[mod] = {"file": str(f.relative_to(REPO)), "names": _names(tree, mod, f.name == "__init__.py"),
                          "classes": {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}}
    return index


def _resolve(index: dict, module: str, expr: ast.expr, depth: int = 0) -> tuple[str, str] | None:
    """The (module, class) of ours that base ``expr`` in ``module`` names, or None (a library's)."""
    if depth > 5 or module not in index:
        return None
    mod = index[module]
    if isinstance(expr, ast.Subscript):          # Generic[T], Base[T]
        return _resolve(index, module, expr.value, depth)
    if isinstance(expr, ast.Name):
        if expr.id in mod["classes"]:
            return module, expr.id
        src, name = mod["names"].get(expr.id, ("", ""))
        if name and src in index:                # imported from one of ours (perhaps re-exported)
            return _resolve(index, src, ast.Name(name), depth + 1)
        return None
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
        src, name = mod["names"].get(expr.value.id, ("", ""))
        target = f"{src}.{name}" if name else src
        if target in index:                      # module.Class
            return _resolve(index, target, ast.Name(expr.attr), depth + 1)
    return None


def _last(expr: ast.expr) -> str:
    return ast.unparse(expr).split("[")[0].split(".")[-1]


def _is_exception(index: dict, module: str, cls: ast.ClassDef, depth: int = 0) -> bool:
    for base in cls.bases:
        name = _last(base)
        builtin = getattr(builtins, name, None)
        if isinstance(builtin, type) and issubclass(builtin, BaseException):
            return True
        ours = _resolve(index, module, base)
        if ours is None and name.endswith(("Error", "Exception", "Warning")):   # a library's exception
            return True
        if ours is not None and depth < 10 and _is_exception(index, ours[0], index[ours[0]]["classes"][ours[1]],
                                                             depth + 1):
            return True
    return False


def _may_be_inherited(index: dict, module: str, cls: ast.ClassDef) -> bool:
    """An abstract interface (it names ``Protocol`` or ``ABC`` itself), an exception or a dataclass."""
    if any(_last(b) in INTERFACE_BASES for b in cls.bases):
        return True
    if any(k.arg == "metaclass" and _last(k.value) == "ABCMeta" for k in cls.keywords):
        return True
    if any(_last(d.func if isinstance(d, ast.Call) else d) == "dataclass" for d in cls.decorator_list):
        return True
    return _is_exception(index, module, cls)


@functools.cache
def _product_index() -> dict[str, dict]:
    return class_index(PRODUCT)


def inherited(folders, index: dict | None = None) -> list[tuple[str, str]]:
    """(``file:line: class C``, ``file:Base``) for each class in ``folders`` inheriting an implementation of ours,
    the shared bases included."""
    index = index if index is not None else _product_index()
    out = []
    for module, mod in index.items():
        if not any(mod["file"].startswith(f"{folder}/") for folder in folders):
            continue
        for cls in mod["classes"].values():
            for base in cls.bases:
                ours = _resolve(index, module, base)
                if ours is not None and not _may_be_inherited(index, ours[0], index[ours[0]]["classes"][ours[1]]):
                    out.append((f"{mod['file']}:{cls.lineno}: class {cls.name}",
                                f"{index[ours[0]]['file']}:{ours[1]}"))
    return out


def inheritance(folders, index: dict | None = None) -> list[str]:
    """``file:line: class C <- file:Base`` for each class in ``folders`` inheriting an implementation of ours
    from a base not in ``SHARED_BASES``."""
    return [f"{sub} <- {base}" for sub, base in inherited(folders, index) if base not in SHARED_BASES]


def _known(found: list[str]) -> tuple[list[str], set[str]]:
    """``found`` less the listed ones, and the listed ones found."""
    keys = {f"{m.split(':')[0]}:{m.split('class ', 1)[1]}": m for m in found}
    return [m for k, m in keys.items() if k not in KNOWN_SUBCLASSES], set(keys) & set(KNOWN_SUBCLASSES)


@pytest.mark.parametrize("folder", PRODUCT)
def test_no_class_of_ours_inherits_an_implementation_of_ours(folder):
    assert _known(inheritance([folder]))[0] == []


def test_the_listed_bases_and_subclasses_are_still_there_so_the_lists_only_shrink():
    assert _known(inheritance(PRODUCT))[1] == set(KNOWN_SUBCLASSES)
    assert {base for _, base in inherited(PRODUCT)} >= set(SHARED_BASES)


def test_the_kubernetes_launcher_composes_its_adoption_part():
    tree = _tree(REPO / "k8s" / "launcher.py")
    launcher = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "KubernetesLauncher")
    assert launcher.bases == [], "KubernetesLauncher builds its Adoption part; it inherits none"


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


def test_the_inheritance_check_sees_what_it_refuses(tmp_path):
    """A class inheriting a concrete class of ours is found, by name, through an import or a module
    alias; one inheriting a Protocol, an ABC, an exception (even through another of ours) or a
    dataclass is not; nor is one inheriting a library's class."""
    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / "__init__.py").write_text("")
    (planted / "base.py").write_text(
        "import abc\nfrom dataclasses import dataclass\nfrom typing import Protocol\n\n"
        "class Part:\n    def go(self):\n        return 1\n\n"
        "class Iface(Protocol):\n    def go(self): ...\n\n"
        "class Store(abc.ABC):\n    pass\n\n"
        "class Oops(ValueError):\n    pass\n\n"
        "@dataclass\nclass Rec:\n    x: int = 0\n")
    (planted / "bad.py").write_text(
        "import threading\nfrom .base import Part, Iface, Store, Oops, Rec\nfrom . import base as b\n\n"
        "class A(Part):\n    pass\n\nclass B(b.Part):\n    pass\n\n"
        "class C(Iface):\n    def go(self):\n        return 2\n\nclass D(Store):\n    pass\n\n"
        "class E(Oops):\n    pass\n\nclass F(E):\n    pass\n\nclass G(Rec):\n    pass\n\n"
        "class H(threading.Thread):\n    pass\n\nclass I(C):\n    pass\n\nclass J(D):\n    pass\n")
    globals()["REPO"], saved = tmp_path, REPO
    try:
        found = inheritance(["planted"], class_index(["planted"]))
        assert [m.split(": ", 1)[1] for m in found] == [
            "class A <- planted/base.py:Part", "class B <- planted/base.py:Part",
            "class I <- planted/bad.py:C", "class J <- planted/bad.py:D"]
    finally:
        globals()["REPO"] = saved
