"""The aborted-transaction index of a segment: ``<20-digit base offset>.txnindex``.

Same file format as Kafka's TransactionIndex: a plain sequence of 34-byte big-endian entries

    int16 version (0) | int64 producerId | int64 firstOffset | int64 lastOffset | int64 lastStableOffset

one per ABORT marker written into the segment (``lastOffset`` is the marker's offset, ``firstOffset`` the first
offset of the aborted transaction, possibly in an earlier segment, ``lastStableOffset`` the LSO when the marker
was written). Entries are appended in marker order, so ``lastOffset`` strictly increases.

The whole index is kept in memory as parallel sorted lists (a segment rarely holds more than a few thousand
aborts), so :meth:`TransactionIndex.collect` is a bisect plus a scan over the matching entries. The file is
opened lazily for appends; an index is a segment companion (``Segment.companions[TXN_INDEX_SUFFIX]``) and is
flushed, closed and deleted with its segment.
"""

from __future__ import annotations

import logging
import os
import struct
from bisect import bisect_left
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ABORTED_TXN_SIZE", "TXN_INDEX_SUFFIX", "AbortedTxn", "TransactionIndex", "TxnIndexCorruptError"]

log = logging.getLogger("oncelog.storage")

TXN_INDEX_SUFFIX = ".txnindex"
ABORTED_TXN_SIZE = 34
ABORTED_TXN_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")


class TxnIndexCorruptError(ValueError):
    """The .txnindex file is not a whole number of well-formed, increasing entries."""


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction (Kafka's AbortedTxn). Fetch responses carry (producer_id, first_offset)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int
    version: int = ABORTED_TXN_VERSION

    def to_bytes(self) -> bytes:
        return _ENTRY.pack(self.version, self.producer_id, self.first_offset, self.last_offset,
                           self.last_stable_offset)

    @classmethod
    def from_bytes(cls, buf: bytes | bytearray | memoryview, pos: int = 0) -> AbortedTxn:
        version, pid, first, last, lso = _ENTRY.unpack_from(buf, pos)
        return cls(pid, first, last, lso, version)


class TransactionIndex:
    """In-memory + on-disk aborted-transaction index of one segment (a segment companion)."""

    def __init__(self, path: Path, start_offset: int) -> None:
        self.path = path
        self.start_offset = start_offset
        self.entries: list[AbortedTxn] = []
        self._last_offsets: list[int] = []  # entries[i].last_offset, strictly increasing
        self._max_lso: list[int] = []  # running max of last_stable_offset (for an exact early stop)
        self._fd: int | None = None
        self._unsynced = False
        self.closed = False

    # ---------------------------------------------------------------- creation / loading
    @classmethod
    def create(cls, path: Path, start_offset: int) -> TransactionIndex:
        """A new, empty index; the (empty) file is created now so a missing file later means 'rebuild me'."""
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
        return cls(path, start_offset)

    @classmethod
    def load(cls, path: Path, start_offset: int) -> TransactionIndex:
        """Read the file. Raises FileNotFoundError if missing, TxnIndexCorruptError if malformed."""
        data = path.read_bytes()
        idx = cls(path, start_offset)
        if len(data) % ABORTED_TXN_SIZE:
            raise TxnIndexCorruptError(f"{path}: size {len(data)} is not a multiple of {ABORTED_TXN_SIZE}")
        for pos in range(0, len(data), ABORTED_TXN_SIZE):
            txn = AbortedTxn.from_bytes(data, pos)
            if txn.version != ABORTED_TXN_VERSION:
                raise TxnIndexCorruptError(f"{path}: entry at {pos} has unknown version {txn.version}")
            if txn.last_offset < start_offset or (idx._last_offsets and txn.last_offset <= idx._last_offsets[-1]):
                raise TxnIndexCorruptError(
                    f"{path}: entry at {pos} has last offset {txn.last_offset}, below the segment base "
                    f"{start_offset} or not above the previous entry"
                )
            if txn.first_offset > txn.last_offset:
                raise TxnIndexCorruptError(f"{path}: entry at {pos} has first offset above its last offset")
            idx._add(txn)
        return idx

    def _open(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        return self._fd

    def _add(self, txn: AbortedTxn) -> None:
        self.entries.append(txn)
        self._last_offsets.append(txn.last_offset)
        prev = self._max_lso[-1] if self._max_lso else -1
        self._max_lso.append(max(prev, txn.last_stable_offset))

    # ---------------------------------------------------------------- writes
    def append(self, txn: AbortedTxn) -> None:
        if self._last_offsets and txn.last_offset <= self._last_offsets[-1]:
            raise ValueError(
                f"aborted transactions must be appended with increasing last offsets: {txn} after "
                f"last offset {self._last_offsets[-1]} in {self.path}"
            )
        os.write(self._open(), txn.to_bytes())
        self._add(txn)
        self._unsynced = True

    def reset(self) -> None:
        """Drop every entry (file truncated to zero); used before rebuilding the index from the log."""
        self.entries, self._last_offsets, self._max_lso = [], [], []
        os.ftruncate(self._open(), 0)
        self._unsynced = True

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker (last offset) is at or above ``offset``."""
        n = bisect_left(self._last_offsets, offset)
        if n == len(self.entries):
            return
        del self.entries[n:], self._last_offsets[n:], self._max_lso[n:]
        os.ftruncate(self._open(), n * ABORTED_TXN_SIZE)
        self._unsynced = True

    # ---------------------------------------------------------------- reads
    def collect(self, fetch_offset: int, upper_bound_offset: int, out: list[AbortedTxn]) -> bool:
        """Kafka's TransactionIndex.collectAbortedTxns: add to ``out`` the entries with
        ``last_offset >= fetch_offset`` and ``first_offset < upper_bound_offset``, in index order; return True
        ("complete": later segments need not be searched) at the first entry whose last stable offset is
        >= ``upper_bound_offset``."""
        i = bisect_left(self._last_offsets, fetch_offset)
        if i and self._max_lso[i - 1] >= upper_bound_offset:  # an entry before the fetch offset stops the scan
            return True
        entries = self.entries
        for j in range(i, len(entries)):
            txn = entries[j]
            if txn.first_offset < upper_bound_offset:
                out.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return True
        return False

    def __len__(self) -> int:
        return len(self.entries)

    # ---------------------------------------------------------------- companion protocol
    def sync_fd(self) -> int | None:
        """A duplicate of the file descriptor if there are writes not yet fsynced (caller fsyncs + closes it)."""
        if not self._unsynced or self._fd is None:
            return None
        self._unsynced = False
        return os.dup(self._fd)

    def flush(self) -> None:
        if self._unsynced and self._fd is not None:
            os.fsync(self._fd)
            self._unsynced = False

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self.closed = True

    def delete(self) -> None:
        self.close()
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass

    def __repr__(self) -> str:
        return f"TransactionIndex({self.path.name}, entries={len(self.entries)})"
