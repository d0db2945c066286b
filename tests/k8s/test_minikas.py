"""The test API server's binary is unpacked again when its packed file changes."""
from __future__ import annotations

import lzma

import pytest

from hived.testing import minikas


def _pack(path, data: bytes) -> None:
    path.write_bytes(lzma.compress(data, format=lzma.FORMAT_XZ))


def test_unpack_follows_the_packed_file(tmp_path):
    src, b = tmp_path / "m.xz", tmp_path / "cache" / "bin" / "minikas"
    _pack(src, b"old build")
    minikas.unpack(src, b)
    assert b.read_bytes() == b"old build"
    first = b.stat().st_mtime_ns
    minikas.unpack(src, b)                  # same packed file: the copy is kept
    assert b.stat().st_mtime_ns == first
    _pack(src, b"new build")                # a rebuilt binary: the old copy must not be run
    minikas.unpack(src, b)
    assert b.read_bytes() == b"new build"
    assert (b.parent / "minikas.xz-sha").read_text().strip() == minikas._packed_hash(src)


def test_a_copy_unpacked_without_a_hash_is_replaced(tmp_path):
    """What an older unpacker left (a binary, no hash file) is refreshed once."""
    src, b = tmp_path / "m.xz", tmp_path / "bin" / "minikas"
    b.parent.mkdir()
    b.write_bytes(b"stale")
    b.chmod(0o755)
    _pack(src, b"current")
    minikas.unpack(src, b)
    assert b.read_bytes() == b"current"


def test_missing_shared_folder_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("HIVED_SHARED", str(tmp_path / "nowhere"))
    with pytest.raises(minikas.MinikasError, match="HIVED_SHARED"):
        minikas._minikas_dir()
    monkeypatch.setenv("HIVED_SHARED", str(tmp_path))
    (tmp_path / "k8s-apiserver").mkdir()
    assert minikas._minikas_dir() == tmp_path / "k8s-apiserver"
