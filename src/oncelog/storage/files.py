"""Small-file durability shared by every layer that keeps state in files.

The storage layer's checkpoints (``partition.checkpoint``, ``leader-epoch-checkpoint``, ``cleaner.checkpoint``,
producer snapshots, rebuilt indexes), the topic catalog, the transaction coordinator's producer-id block and the
broker's coordinator epoch are all whole files replaced at once: :func:`write_atomic` is the one way to do it
(Kafka's ``CheckpointFile.write`` / ``Utils.atomicMoveWithFallback``). The coordinators and the broker may
import this module: ``storage`` is below them in the layering.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["TMP_SUFFIX", "fsync_dir", "write_all", "write_atomic"]

#: suffix of the temporary file a replacement is written to; a partition folder's leftovers are deleted on load
TMP_SUFFIX = ".tmp"


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """fsync a directory, making the creation, rename or removal of its entries durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """``os.write`` until every byte is written (short writes happen on signals and full disks)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_atomic(path: str | os.PathLike[str], data: bytes | bytearray | memoryview, *, durable: bool = True,
                 mode: int = 0o644) -> None:
    """Replace ``path`` by a file holding ``data``: a reader, or a crash, sees the old content or the new one.

    Writes ``<path>.tmp`` and renames it over ``path``. ``durable`` (the default): the file is fsynced before the
    rename and its directory after, so the new content survives a power cut once this returns. Without it nothing
    is fsynced: after a power cut the file may hold the old content, the new, or nothing whole; use that only for
    files that are checked when loaded and rebuilt when unusable (indexes, CRC-checked snapshots). ``mode``: the
    new file's permissions (0o600 for secrets).
    """
    path = Path(path)
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        write_all(fd, data)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)
