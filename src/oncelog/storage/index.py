"""Sparse per-segment indexes, kept in memory and appended to their files in Kafka's layout.

``.index``      entries of (int32 offset - base_offset, int32 file position), big-endian, 8 bytes each. As in
                Kafka the indexed offset is the *last* offset of the batch starting at that position, so
                ``lookup(t)`` (largest entry with offset <= t) yields a position at or before the batch holding t.
``.timeindex``  entries of (int64 timestamp, int32 offset - base_offset), 12 bytes each; timestamps strictly
                increase (max timestamp so far, and the offset of the batch that first reached it).

New entries go to an in-memory list immediately (lookups see them) and to a pending buffer that
:meth:`write_pending` appends to the file with one write. Files are never fsynced on the append path: an
index is rebuilt from its segment whenever it is missing, short or inconsistent.
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_right
from pathlib import Path

from .files import write_all, write_atomic

__all__ = ["IndexCorruptError", "OffsetIndex", "TimeIndex"]

_OFF = struct.Struct(">ii")
_TIME = struct.Struct(">qi")


class IndexCorruptError(Exception):
    """The index file does not agree with itself or with its segment; rebuild it."""


class _IndexFile:
    entry_size = 0

    def __init__(self, path: Path, base_offset: int, max_entries: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_entries)
        self._pending = bytearray()
        self._fd: int | None = None

    # ---------------------------------------------------------------- file handling
    def _open_fd(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        return self._fd

    def write_pending(self) -> None:
        """Append pending entries to the file (one os.write)."""
        if self._pending:
            data = bytes(self._pending)
            self._pending.clear()
            write_all(self._open_fd(), data)

    def fsync(self) -> None:
        self.write_pending()
        os.fsync(self._open_fd())

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def reset_file(self) -> None:
        """Truncate the file to the entries currently in memory (after a rebuild or truncation)."""
        self.close()
        self._pending.clear()
        write_atomic(self.path, self._encode_all(), durable=False)  # rebuilt on load whenever unusable

    def _encode_all(self) -> bytes:  # pragma: no cover - overridden
        raise NotImplementedError

    @property
    def full(self) -> bool:
        return len(self) >= self.max_entries

    def __len__(self) -> int:  # pragma: no cover - overridden
        raise NotImplementedError


class OffsetIndex(_IndexFile):
    entry_size = 8

    def __init__(self, path: Path, base_offset: int, max_entries: int) -> None:
        super().__init__(path, base_offset, max_entries)
        self.offsets = array("q")  # absolute offsets
        self.positions = array("q")

    def __len__(self) -> int:
        return len(self.offsets)

    def append(self, offset: int, position: int) -> None:
        self.offsets.append(offset)
        self.positions.append(position)
        self._pending += _OFF.pack(offset - self.base_offset, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the largest entry with offset <= ``offset``; (base_offset, 0) if none."""
        i = bisect_right(self.offsets, offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.offsets[i], self.positions[i]

    def last(self) -> tuple[int, int]:
        if not self.offsets:
            return self.base_offset, 0
        return self.offsets[-1], self.positions[-1]

    def truncate_to_position(self, position: int) -> None:
        """Drop entries at or after ``position`` (their batches are gone)."""
        i = bisect_right(self.positions, position - 1)
        del self.offsets[i:]
        del self.positions[i:]
        self.reset_file()

    def clear(self) -> None:
        del self.offsets[:]
        del self.positions[:]

    def _encode_all(self) -> bytes:
        b = self.base_offset
        return b"".join(_OFF.pack(o - b, p) for o, p in zip(self.offsets, self.positions))

    def load(self, log_size: int) -> None:
        """Read the file; raise IndexCorruptError unless it is well formed and inside a log of ``log_size``."""
        data = self.path.read_bytes()
        if len(data) % self.entry_size:
            raise IndexCorruptError(f"{self.path}: size {len(data)} is not a multiple of {self.entry_size}")
        self.clear()
        prev_off, prev_pos = -1, -1
        for rel, pos in _OFF.iter_unpack(data):
            if rel < 0 or pos < 0 or rel <= prev_off or pos <= prev_pos or pos >= max(log_size, 1):
                raise IndexCorruptError(f"{self.path}: entry ({rel}, {pos}) out of order or beyond the log")
            prev_off, prev_pos = rel, pos
            self.offsets.append(self.base_offset + rel)
            self.positions.append(pos)


class TimeIndex(_IndexFile):
    entry_size = 12

    def __init__(self, path: Path, base_offset: int, max_entries: int) -> None:
        super().__init__(path, base_offset, max_entries)
        self.timestamps = array("q")
        self.offsets = array("q")

    def __len__(self) -> int:
        return len(self.timestamps)

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add (timestamp, offset) if the timestamp is larger than the last entry's."""
        if self.timestamps and timestamp <= self.timestamps[-1]:
            return
        if timestamp < 0:
            return
        self.timestamps.append(timestamp)
        self.offsets.append(offset)
        self._pending += _TIME.pack(timestamp, offset - self.base_offset)

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the largest entry with timestamp <= ``timestamp``; (-1, base_offset) if none."""
        i = bisect_right(self.timestamps, timestamp) - 1
        if i < 0:
            return -1, self.base_offset
        return self.timestamps[i], self.offsets[i]

    def last(self) -> tuple[int, int] | None:
        if not self.timestamps:
            return None
        return self.timestamps[-1], self.offsets[-1]

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries whose offset is >= ``offset``."""
        keep = [i for i in range(len(self.offsets)) if self.offsets[i] < offset]
        n = len(keep)
        del self.timestamps[n:]
        del self.offsets[n:]
        self.reset_file()

    def clear(self) -> None:
        del self.timestamps[:]
        del self.offsets[:]

    def _encode_all(self) -> bytes:
        b = self.base_offset
        return b"".join(_TIME.pack(t, o - b) for t, o in zip(self.timestamps, self.offsets))

    def load(self, next_offset: int) -> None:
        data = self.path.read_bytes()
        if len(data) % self.entry_size:
            raise IndexCorruptError(f"{self.path}: size {len(data)} is not a multiple of {self.entry_size}")
        self.clear()
        prev_ts, prev_off = -1, -1
        for ts, rel in _TIME.iter_unpack(data):
            off = self.base_offset + rel
            if rel < 0 or ts <= prev_ts or off < prev_off or off >= max(next_offset, self.base_offset + 1):
                raise IndexCorruptError(f"{self.path}: entry ({ts}, {rel}) out of order or beyond the log")
            prev_ts, prev_off = ts, off
            self.timestamps.append(ts)
            self.offsets.append(off)
