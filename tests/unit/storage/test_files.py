"""write_atomic: the one way every layer replaces a small state file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from oncelog.storage import files
from oncelog.storage.files import write_atomic


def test_replaces_content_and_leaves_no_tmp(tmp_path: Path) -> None:
    p = tmp_path / "state"
    write_atomic(p, b"one")
    write_atomic(p, b"two, longer")
    assert p.read_bytes() == b"two, longer"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["state"]


@pytest.mark.parametrize("durable", [True, False])
def test_durable_fsyncs_file_and_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durable: bool) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(files.os, "fsync", spy)
    write_atomic(str(tmp_path / "state"), b"x", durable=durable)
    assert synced == ([str(tmp_path / "state.tmp"), str(tmp_path)] if durable else [])


def test_failed_write_keeps_the_old_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "state"
    write_atomic(p, b"old")

    def broken(fd: int, data: object) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "write", broken)
    with pytest.raises(OSError):
        write_atomic(p, b"new")
    assert p.read_bytes() == b"old"
