"""Shared test assets are found through one variable, ``HIVED_SHARED`` (default ``../shared``)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from hived.testing import shared
from hived.testing.shared import SharedAssetsMissing, shared_dir, shared_path

REPO = Path(__file__).resolve().parents[2]


def test_default_is_shared_beside_the_repository(monkeypatch):
    monkeypatch.delenv("HIVED_SHARED", raising=False)
    assert shared_dir() == shared.REPO.parent / "shared"
    monkeypatch.setenv("HIVED_SHARED", "")          # set but empty: the default too
    assert shared_dir() == shared.REPO.parent / "shared"


def test_the_variable_names_the_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HIVED_SHARED", str(tmp_path))
    (tmp_path / "k8s-apiserver").mkdir()
    assert shared_dir() == tmp_path
    assert shared_path("k8s-apiserver") == tmp_path / "k8s-apiserver"


def test_a_missing_asset_names_the_variable_and_the_path(tmp_path, monkeypatch):
    monkeypatch.setenv("HIVED_SHARED", str(tmp_path / "nowhere"))
    with pytest.raises(SharedAssetsMissing) as err:
        shared_path("k8s-apiserver", "minikas.xz")
    msg = str(err.value)
    assert "HIVED_SHARED" in msg and str(tmp_path / "nowhere" / "k8s-apiserver" / "minikas.xz") in msg
    assert "\n" not in msg


# other ways to reach the shared folder: a literal ../shared, an absolute path
# ending in /shared, or a variable of its own
_OTHER_WAYS = re.compile(r"""['"](?:\.\./|/[\w./-]*/)shared\b|MINIKAS_DIR""")


def test_tests_and_benchmarks_reach_shared_assets_only_through_testing_shared():
    offenders = []
    for folder in ("tests", "benchmarks", "testing", "examples"):
        for f in sorted((REPO / folder).rglob("*.py")):
            if f == Path(__file__).resolve():
                continue
            for n, line in enumerate(f.read_text().splitlines(), 1):
                if _OTHER_WAYS.search(line):
                    offenders.append(f"{f.relative_to(REPO)}:{n}: {line.strip()}")
    assert offenders == []


def test_the_scan_sees_another_way():
    assert _OTHER_WAYS.search('d = Path("../shared") / "k8s-apiserver"')
    assert _OTHER_WAYS.search("os.environ['MINIKAS_DIR']")
    assert _OTHER_WAYS.search('PHILLY = "/data/team/shared/philly"')
    assert not _OTHER_WAYS.search("shared_path('k8s-apiserver')")
