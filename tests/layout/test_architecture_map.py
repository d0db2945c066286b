"""docs/architecture.md names every module of the product folders, and nothing else.

A module is named when its path (``core/engine.py``) appears in backquotes in
the map; any backquoted ``folder/....py`` path in the page must exist.
"""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FOLDERS = ("core", "service", "cli", "reports", "jupyter_ext", "mlflow_plugin", "k8s", "kernels", "testing")
MAP = REPO / "docs" / "architecture.md"
_NAMED = re.compile(r"`((?:" + "|".join(FOLDERS) + r")/[\w/]*\.py)`")


def module_files(repo: Path = REPO) -> set[str]:
    """Every ``.py`` file of the product folders and ``testing``, as repository paths."""
    return {str(p.relative_to(repo)) for folder in FOLDERS for p in (repo / folder).rglob("*.py")
            if "__pycache__" not in p.parts}


def named_modules(text: str) -> set[str]:
    """The module paths a page names in backquotes."""
    return set(_NAMED.findall(text))


def map_errors(repo: Path, text: str) -> list[str]:
    """One line per module the map misses or names without a file behind it."""
    files, named = module_files(repo), named_modules(text)
    return ([f"{m}: a module the map in docs/architecture.md does not name" for m in sorted(files - named)]
            + [f"{m}: named in docs/architecture.md but no such file" for m in sorted(named - files)])


def test_the_map_names_every_module_and_only_real_ones():
    assert map_errors(REPO, MAP.read_text()) == []


def test_every_module_has_a_one_line_description():
    """Each module has a table row of its own with some words after it."""
    rows = {m.group(1): m.group(2).strip() for m in
            re.finditer(r"^\| `([\w/]+\.py)` \| (.*) \|$", MAP.read_text(), re.MULTILINE)}
    missing = sorted(module_files() - set(rows))
    assert missing == [], f"modules without a row of their own in the map: {missing}"
    assert [m for m, words in rows.items() if len(words.split()) < 2] == []


def test_the_check_sees_a_missing_and_a_stale_module(tmp_path):
    """The comparison itself works: a new file and a removed one are both reported."""
    for folder in FOLDERS:
        (tmp_path / folder).mkdir()
    (tmp_path / "core" / "engine.py").write_text("")
    (tmp_path / "core" / "new_part.py").write_text("")
    text = "| `core/engine.py` | the engine |\n| `core/gone.py` | removed |\n"
    assert map_errors(tmp_path, text) == [
        "core/new_part.py: a module the map in docs/architecture.md does not name",
        "core/gone.py: named in docs/architecture.md but no such file",
    ]
