"""One log segment: ``<20-digit base offset>.log`` plus its ``.index`` and ``.timeindex``.

A segment owns an O_APPEND file descriptor for its data. Appends are single ``os.write`` calls; reads are
``os.pread`` of a chunk that the caller cuts at batch boundaries. Companion files that later features attach to a
segment (``.txnindex`` for aborted transactions, ...) go in :attr:`Segment.companions`: name suffix -> object
with ``close()`` / ``delete()`` / ``flush()``; the segment closes, deletes and flushes them with itself.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from oncelog.protocol.records import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    CorruptRecordError,
    compute_crc,
    parse_batch_header,
)

from .index import IndexCorruptError, OffsetIndex, TimeIndex

__all__ = ["CLEANED_SUFFIX", "DELETED_SUFFIX", "INDEX_SUFFIX", "LOG_SUFFIX", "SWAP_SUFFIX", "TIMEINDEX_SUFFIX", "Segment",
           "parse_segment_base", "segment_file_name"]

log = logging.getLogger("oncelog.storage")

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
# the cleaner's swap of a cleaned segment (cleaner.py; finished or rolled back on load, loader.py)
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
SCAN_CHUNK = 4 << 20
INT32_MAX = 2**31 - 1
_LEN = struct.Struct(">i")
_UNKNOWN = object()


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


def parse_segment_base(name: str) -> int | None:
    stem, dot, _ = name.partition(".")
    if dot and len(stem) == 20 and stem.isdigit():
        return int(stem)
    return None


class Companion(Protocol):
    def flush(self) -> None: ...
    def close(self) -> None: ...
    def delete(self) -> None: ...


class Segment:
    def __init__(self, directory: Path, base_offset: int, *, index_interval_bytes: int, segment_index_bytes: int,
                 created_ms: int, new_file: bool) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.log_path = directory / segment_file_name(base_offset, LOG_SUFFIX)
        flags = os.O_RDWR | os.O_APPEND | (os.O_CREAT if new_file else 0)
        self.fd = os.open(self.log_path, flags, 0o644)
        self.size = os.fstat(self.fd).st_size
        self.index_interval_bytes = index_interval_bytes
        self.offset_index = OffsetIndex(directory / segment_file_name(base_offset, INDEX_SUFFIX), base_offset,
                                        segment_index_bytes // OffsetIndex.entry_size)
        self.time_index = TimeIndex(directory / segment_file_name(base_offset, TIMEINDEX_SUFFIX), base_offset,
                                    segment_index_bytes // TimeIndex.entry_size)
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self.bytes_since_last_index = 0
        self.created_ms = created_ms
        self._rolling_ts: Any = _UNKNOWN if self.size else None
        self.dirty = False  # written since the last flush
        self.new_file = new_file  # directory entry not yet fsynced
        self.companions: dict[str, Companion] = {}
        self.closed = False

    # ---------------------------------------------------------------- creation / loading
    @classmethod
    def create(cls, directory: Path, base_offset: int, *, index_interval_bytes: int, segment_index_bytes: int,
               created_ms: int) -> Segment:
        seg = cls(directory, base_offset, index_interval_bytes=index_interval_bytes,
                  segment_index_bytes=segment_index_bytes, created_ms=created_ms, new_file=True)
        if seg.size:  # a stale file of the same name: start clean
            os.ftruncate(seg.fd, 0)
            seg.size = 0
        seg.offset_index.reset_file()
        seg.time_index.reset_file()
        return seg

    def load_indexes(self) -> bool:
        """Load both indexes and derive next offset/max timestamp. False if anything is off (caller recovers)."""
        try:
            if not self.offset_index.path.exists() or not self.time_index.path.exists():
                return False
            self.offset_index.load(self.size)
            # The tail after the last index entry holds the last batches: scan it for the next offset.
            _, pos = self.offset_index.last()
            nxt = self.base_offset
            max_ts, max_ts_off = -1, self.base_offset
            since = 0
            for h in self.scan(pos, check_crc=False):
                nxt = h.next_offset
                since += h.size
                if h.max_timestamp > max_ts:
                    max_ts, max_ts_off = h.max_timestamp, h.last_offset
            if self.size and nxt == self.base_offset:
                return False
            self.time_index.load(nxt)
            self.next_offset = nxt
            last_t = self.time_index.last()
            if last_t is not None and last_t[0] >= max_ts:
                self.max_timestamp, self.offset_of_max_timestamp = last_t
            else:
                self.max_timestamp, self.offset_of_max_timestamp = max_ts, max_ts_off
            self.bytes_since_last_index = since
            return True
        except (IndexCorruptError, CorruptRecordError, OSError) as e:
            log.warning("index of segment %s is unusable (%s); rebuilding it", self.log_path, e)
            return False

    def recover(self, *, check_crc: bool = True) -> tuple[int, int]:
        """Scan the whole segment, keep the valid prefix, rebuild both indexes.

        Returns (bytes truncated, offset of the first dropped batch or next_offset if none dropped).
        """
        self.offset_index.clear()
        self.time_index.clear()
        self.next_offset = self.base_offset
        self.max_timestamp, self.offset_of_max_timestamp = -1, self.base_offset
        self.bytes_since_last_index = 0
        self._rolling_ts = None
        valid = 0
        error: Exception | None = None
        try:
            for h in self.scan(0, check_crc=check_crc):
                if h.base_offset < self.next_offset:
                    raise CorruptRecordError(
                        f"batch at position {h.position} has base offset {h.base_offset} below the expected "
                        f"next offset {self.next_offset}"
                    )
                if h.last_offset - self.base_offset > INT32_MAX:
                    raise CorruptRecordError(f"batch at position {h.position} is beyond the segment's offset range")
                if self._rolling_ts is None:
                    self._rolling_ts = h.max_timestamp
                self._index_batch(h, h.position)
                self.next_offset = h.next_offset
                valid = h.position + h.size
        except CorruptRecordError as e:
            error = e
        truncated = self.size - valid
        if truncated:
            if error is not None:
                log.debug("segment %s: %s", self.log_path, error)
            os.ftruncate(self.fd, valid)
            self.size = valid
        self.offset_index.reset_file()
        self.time_index.reset_file()
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        return truncated, self.next_offset

    def truncate_to(self, offset: int) -> int:
        """Remove every batch holding an offset at or after ``offset`` (Kafka's LogSegment.truncateTo); a batch
        straddling ``offset`` goes whole. ``next_offset`` becomes the next offset after the last batch kept (the
        segment's base if none is), as loading the segment would find it. Both indexes lose their entries for the
        removed batches (files rewritten, not fsynced: the caller makes the truncation durable). Returns the
        number of bytes removed."""
        cut: BatchHeader | None = None
        for h in self.scan(self.find_position(offset), check_crc=False):
            if h.last_offset >= offset:
                cut = h
                break
        if cut is None:
            return 0
        removed = self.size - cut.position
        os.ftruncate(self.fd, cut.position)
        self.size = cut.position
        self.offset_index.truncate_to_position(cut.position)
        _, pos = self.offset_index.last()
        nxt, max_ts, max_ts_off, since = self.base_offset, -1, self.base_offset, 0
        for h in self.scan(pos, check_crc=False):  # the tail after the last index entry
            nxt = h.next_offset
            since += h.size
            if h.max_timestamp > max_ts:
                max_ts, max_ts_off = h.max_timestamp, h.last_offset
        self.time_index.truncate_to_offset(nxt)
        last_t = self.time_index.last()
        if last_t is not None and last_t[0] >= max_ts:
            self.max_timestamp, self.offset_of_max_timestamp = last_t
        else:
            self.max_timestamp, self.offset_of_max_timestamp = max_ts, max_ts_off
        self.bytes_since_last_index = since
        self.next_offset = nxt
        if not self.size:
            self._rolling_ts = None
        return removed

    # ---------------------------------------------------------------- append
    def _index_batch(self, h: BatchHeader, position: int) -> None:
        if h.max_timestamp > self.max_timestamp:
            self.max_timestamp = h.max_timestamp
            self.offset_of_max_timestamp = h.last_offset
        if self.bytes_since_last_index > self.index_interval_bytes:
            self.offset_index.append(h.last_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_last_index = 0
        self.bytes_since_last_index += h.size

    def append(self, payload: bytes | bytearray | memoryview, headers: list[BatchHeader], next_offset: int) -> None:
        """Write ``payload`` (batches with offsets already assigned) and index it."""
        start = self.size
        if self._rolling_ts is None:
            self._rolling_ts = headers[0].max_timestamp
        view = memoryview(payload)
        n = os.write(self.fd, view)
        while n < len(view):  # short writes are rare (disk full, signals); finish or raise
            view = view[n:]
            n = os.write(self.fd, view)
        # Python-level loop is O(#batches); the common case (one batch per partition per request) is one pass.
        interval = self.index_interval_bytes
        for h in headers:
            if h.max_timestamp > self.max_timestamp:
                self.max_timestamp = h.max_timestamp
                self.offset_of_max_timestamp = h.base_offset + h.last_offset_delta
            if self.bytes_since_last_index > interval:
                self.offset_index.append(h.base_offset + h.last_offset_delta, start + h.position)
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
                self.bytes_since_last_index = 0
            self.bytes_since_last_index += h.batch_length + LOG_OVERHEAD
        self.size = start + len(payload)
        self.next_offset = next_offset

    def rolling_timestamp(self) -> int | None:
        """Max timestamp of the first batch (Kafka's rollingBasedTimestamp), None if empty or unknown."""
        if self._rolling_ts is _UNKNOWN:
            self._rolling_ts = None
            try:
                self._rolling_ts = _peek_max_ts(os.pread(self.fd, BATCH_HEADER_SIZE, 0))
            except OSError:
                self._rolling_ts = None
        ts: int | None = self._rolling_ts
        return ts if ts is not None and ts >= 0 else None

    def on_become_inactive(self) -> None:
        """Called when the segment stops being the active one: final time index entry, indexes to the files."""
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.offset_index.write_pending()
        self.time_index.write_pending()

    # ---------------------------------------------------------------- read
    def pread(self, position: int, length: int) -> bytes:
        return os.pread(self.fd, length, position)

    def scan(self, start: int, *, check_crc: bool, end: int | None = None) -> Iterator[BatchHeader]:
        """Headers of the batches from byte ``start`` to ``end`` (default: size), positions absolute.

        Raises CorruptRecordError at the first batch that is torn, malformed or (with check_crc) fails its CRC.
        """
        end = self.size if end is None else end
        pos = start
        want = SCAN_CHUNK
        while pos < end:
            buf = os.pread(self.fd, min(want, end - pos), pos)
            if not buf:
                raise CorruptRecordError(f"segment {self.log_path} ends at {pos}, expected {end} bytes")
            mv = memoryview(buf)
            off = 0
            blen = len(buf)
            while off < blen:
                if blen - off < LOG_OVERHEAD:
                    if pos + blen >= end:
                        raise CorruptRecordError(f"torn batch header at position {pos + off}")
                    break
                total = _LEN.unpack_from(buf, off + 8)[0] + LOG_OVERHEAD
                if total < BATCH_HEADER_SIZE:
                    raise CorruptRecordError(f"batch at position {pos + off} has impossible length {total}")
                if off + total > blen:
                    if pos + off + total > end:
                        raise CorruptRecordError(
                            f"torn batch at position {pos + off}: needs {total} bytes, {end - pos - off} left"
                        )
                    want = max(SCAN_CHUNK, total)
                    break
                h = parse_batch_header(mv, off)
                if check_crc and compute_crc(mv, off, total) != h.crc:
                    raise CorruptRecordError(
                        f"batch at position {pos + off} (base offset {h.base_offset}) fails its CRC32C"
                    )
                h.position = pos + off
                yield h
                off += total
            pos += off

    def find_position(self, offset: int) -> int:
        """A byte position at or before the batch that contains ``offset`` (from the sparse offset index)."""
        return self.offset_index.lookup(offset)[1]

    # ---------------------------------------------------------------- lifecycle
    def flush_indexes(self) -> None:
        """fsync both indexes and every companion (e.g. the .txnindex)."""
        self.offset_index.fsync()
        self.time_index.fsync()
        for c in self.companions.values():
            c.flush()

    def close_index_files(self) -> None:
        """Close the indexes' file descriptors (each reopens on its next write): after recovery, a broker loading
        thousands of partitions would otherwise hold three descriptors per partition instead of one."""
        self.offset_index.close()
        self.time_index.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.offset_index.write_pending()
            self.time_index.write_pending()
        finally:
            self.offset_index.close()
            self.time_index.close()
            for c in self.companions.values():
                c.close()
            os.close(self.fd)

    def delete(self) -> None:
        self.close()
        for c in self.companions.values():
            c.delete()
        for p in (self.log_path, self.offset_index.path, self.time_index.path):
            try:
                p.unlink()
            except FileNotFoundError:
                pass

    def __repr__(self) -> str:
        return f"Segment(base={self.base_offset}, next={self.next_offset}, size={self.size})"


def _peek_max_ts(buf: bytes) -> int | None:
    if len(buf) < BATCH_HEADER_SIZE:
        return None
    return int(struct.unpack_from(">q", buf, 35)[0])
