"""The segments of one partition on disk: append, roll, flush, read, delete (Kafka's ``LocalLog``).

A :class:`LocalLog` knows segments, the log end offset, what is durable and the recovery point; it knows nothing
of producers, transactions, leader epochs or the log start offset. :class:`~oncelog.storage.log.PartitionLog`
(Kafka's ``UnifiedLog``) owns one and adds those.

Threading: ``append``, ``read``, ``roll``, truncation and deletion run on one thread (the broker's event loop);
``flush`` may run on any thread concurrently with them. Shared state is guarded by the lock the owning
PartitionLog passes in; fsyncs run outside it on duplicated file descriptors, so a segment deleted meanwhile is
harmless. ``_flush_lock`` serialises flushes, and truncation takes it too, so a flush never reports as durable
an offset that a truncation removed meanwhile. The segment list is replaced, never mutated in place: a reader
holding the previous list keeps working (segments the cleaner replaced stay open ``file.delete.delay.ms``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from oncelog.clock import Clock
from oncelog.protocol.records import (
    LOG_OVERHEAD,
    BatchHeader,
    CorruptRecordError,
    TimestampType,
    decode_records,
)

from .config import LogConfig
from .errors import KafkaStorageError
from .files import fsync_dir
from .segment import INT32_MAX, Segment, segment_file_name
from .txn_index import TXN_INDEX_SUFFIX, TransactionIndex, TxnIndexCorruptError

__all__ = ["FSYNC_DELAY_ENV", "FSYNC_TRACE_ENV", "LocalLog", "ReadResult", "RollHook", "create_segment",
           "open_segment", "trace_fsync"]

log = logging.getLogger("oncelog.storage")

#: fault injection for power-cut tests: when set, every fsynced segment appends "<path> <bytes>" to this file
#: (after its fdatasync returned, before anyone is told it is durable), so a test can cut each segment back to
#: any length at or above what was durable, as a power cut that lost the page cache could
FSYNC_TRACE_ENV = "ONCELOG_FSYNC_TRACE"
_fsync_trace = os.environ.get(FSYNC_TRACE_ENV)
_fsync_trace_lock = threading.Lock()
#: fault injection: a slow disk; every fsync of a segment first waits this many milliseconds, so a test's SIGKILL
#: almost always finds appends that are written but not yet durable
FSYNC_DELAY_ENV = "ONCELOG_FSYNC_DELAY_MS"
_fsync_delay_s = float(os.environ.get(FSYNC_DELAY_ENV) or 0) / 1000
_READ_SLACK = 16 * 1024  # extra bytes read past index_interval so the first pread usually suffices

RollHook = Callable[[Segment, Segment], None]


@dataclass(slots=True)
class ReadResult:
    records: list[bytes | memoryview] = field(default_factory=list)
    first_batch_offset: int = -1
    size: int = 0


def trace_fsync(segments: list[Segment]) -> None:
    """Power-cut fault injection: record the size of segments just made durable (no-op unless enabled)."""
    if _fsync_trace and segments:
        _trace_sizes([(s.log_path, s.size) for s in segments])


def _trace_sizes(sizes: list[tuple[Path, int]]) -> None:
    assert _fsync_trace is not None
    line = "".join(f"{path} {size}\n" for path, size in sizes).encode()
    with _fsync_trace_lock:
        fd = os.open(_fsync_trace, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


def create_segment(directory: Path, base: int, config: LogConfig, created_ms: int) -> Segment:
    """A new empty segment (any stale files of that name are emptied) with an empty ``.txnindex``."""
    seg = Segment.create(directory, base, index_interval_bytes=config.index_interval_bytes,
                         segment_index_bytes=config.segment_index_bytes, created_ms=created_ms)
    seg.companions[TXN_INDEX_SUFFIX] = TransactionIndex.create(directory / segment_file_name(base, TXN_INDEX_SUFFIX),
                                                               base)
    return seg


def open_segment(directory: Path, base: int, config: LogConfig, created_ms: int) -> Segment:
    """An existing segment's ``.log`` (indexes not loaded yet; see Segment.load_indexes / recover)."""
    return Segment(directory, base, index_interval_bytes=config.index_interval_bytes,
                   segment_index_bytes=config.segment_index_bytes, created_ms=created_ms, new_file=False)


class LocalLog:
    def __init__(self, directory: Path, name: str, config: LogConfig, clock: Clock, lock: threading.RLock,
                 segments: list[Segment], *, recovery_point: int, unsynced: bool = False) -> None:
        if not segments:
            raise ValueError(f"the log of {name} needs at least one segment")
        self.directory = directory
        self.name = name
        self.config = config
        self.clock = clock
        self.on_roll: list[RollHook] = []  # called as hook(old_segment, new_segment) under the log lock
        self._lock = lock
        self._flush_lock = threading.Lock()
        self._segments = segments  # replaced, never mutated in place (readers take snapshots)
        self._bases = [s.base_offset for s in segments]
        #: the next offset to write; read-only outside this class (a plain attribute: read on every append)
        self.log_end_offset = segments[-1].next_offset
        self._durable = self.log_end_offset  # a loaded log is durable to its end (the loader made it so)
        self._recovery_point = recovery_point
        self._dirty: list[Segment] = []
        self._dir_dirty = unsynced
        #: a new log whose folder was created without fsync (the loader's ``defer_sync``): the first flush syncs its
        #: entry in the data folder, and the folder's own entries, before any of its records counts as durable
        self._parent_dirty = unsynced
        self._retired: list[tuple[int, Segment]] = []  # (monotonic ms, segment) replaced by the cleaner
        self.last_flush_ms = clock.wall_ms()
        self.closed = False

    # ================================================================ properties
    @property
    def durable_offset(self) -> int:
        return self._durable

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def segments(self) -> list[Segment]:
        return list(self._segments)

    @property
    def active_segment(self) -> Segment:
        return self._segments[-1]

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    def segments_from(self, offset: int) -> list[Segment]:
        """The segments from the one holding ``offset`` (the first one if ``offset`` is below it) to the end."""
        segs = self._segments
        return segs[max(bisect_right(self._bases, offset) - 1, 0):]

    def new_segment(self, base: int) -> Segment:
        return create_segment(self.directory, base, self.config, self.clock.wall_ms())

    # ================================================================ append / roll
    def append(self, payload: bytes | bytearray | memoryview, headers: list[BatchHeader], next_offset: int,
               max_timestamp: int, *, first_offset: int | None = None) -> Segment:
        """Write batches whose offsets are final (caller holds the lock), rolling first when the active segment
        is full or old; the log end becomes ``next_offset``. ``first_offset``: the first batch's offset when it
        may lie above the log end (a follower's append after a compacted gap); a segment rolled for it starts
        there if its offsets would not fit one starting at the log end (Kafka rolls at it always; the segments
        of this log stay contiguous otherwise). Returns the segment written to."""
        seg = self._segments[-1]
        # a follower's batches far past the log end (a compacted gap of 2^31 offsets) need a segment of their own
        far = None
        if first_offset is not None and next_offset - 1 - self.log_end_offset > INT32_MAX:
            far = first_offset
        if seg.size:
            if self._should_roll(seg, len(payload), max_timestamp, next_offset - 1):
                seg = self.roll_locked(far)
        elif far is not None and next_offset - 1 - seg.base_offset > INT32_MAX:
            seg = self._restart_empty_active(far)
        try:
            seg.append(payload, headers, next_offset)
        except OSError as e:
            raise KafkaStorageError(f"cannot append to {self.name} ({seg.log_path}): {e}") from e
        if not seg.dirty:
            seg.dirty = True
            self._dirty.append(seg)
        self.log_end_offset = next_offset
        return seg

    def _restart_empty_active(self, base: int) -> Segment:
        old = self._segments[-1]
        old.delete()
        self._dirty = [s for s in self._dirty if s is not old]
        new = self.new_segment(base)
        self._segments = self._segments[:-1] + [new]
        self._bases = self._bases[:-1] + [base]
        self._dir_dirty = True
        return new

    def _should_roll(self, seg: Segment, size: int, max_ts: int, last_offset: int) -> bool:
        c = self.config
        if seg.size + size > c.segment_bytes:
            return True
        oi, ti = seg.offset_index, seg.time_index
        if len(oi.offsets) >= oi.max_entries or len(ti.timestamps) >= ti.max_entries:
            return True
        if last_offset - seg.base_offset > INT32_MAX:
            return True
        rts = seg.rolling_timestamp()
        waited = max_ts - rts if rts is not None else self.clock.wall_ms() - seg.created_ms
        return waited > c.segment_ms - c.segment_jitter_ms

    def roll(self) -> Segment:
        """Start a new active segment at the log end (no-op if the active segment is empty). Returns it."""
        with self._lock:
            if self._segments[-1].size == 0:
                return self._segments[-1]
            return self.roll_locked()

    def roll_locked(self, base: int | None = None) -> Segment:
        """Start a new active segment at the log end, or at ``base`` if that is above it."""
        old = self._segments[-1]
        old.on_become_inactive()
        if not old.dirty:  # its indexes still need an fsync before the recovery point may pass it
            old.dirty = True
            self._dirty.append(old)
        new = self.new_segment(self.log_end_offset if base is None else max(base, self.log_end_offset))
        self._segments = self._segments + [new]
        self._bases = self._bases + [new.base_offset]
        self._dir_dirty = True
        for hook in self.on_roll:
            hook(old, new)
        return new

    # ================================================================ flush
    def flush(self) -> tuple[int, bool]:
        """fdatasync everything appended so far. Returns (durable offset, whether the recovery point moved: the
        owner then writes its checkpoint). Safe from any thread."""
        with self._flush_lock:
            with self._lock:
                if self.closed:
                    return self._durable, False
                end = self.log_end_offset
                segs, self._dirty = self._dirty, []
                active = self._segments[-1]
                active.offset_index.write_pending()
                active.time_index.write_pending()
                jobs: list[tuple[int, list[int]]] = []
                for s in segs:
                    s.dirty = False
                    idx_fds: list[int] = []
                    if s is not active:
                        idx_fds = [os.dup(s.offset_index._open_fd()), os.dup(s.time_index._open_fd())]
                        txn_idx = s.companions.get(TXN_INDEX_SUFFIX)
                        txn_fd = txn_idx.sync_fd() if isinstance(txn_idx, TransactionIndex) else None
                        if txn_fd is not None:
                            idx_fds.append(txn_fd)
                    jobs.append((os.dup(s.fd), idx_fds))
                sizes = [(s.log_path, s.size) for s in segs] if _fsync_trace else []
                dir_dirty, self._dir_dirty = self._dir_dirty, False
                parent_dirty, self._parent_dirty = self._parent_dirty, False
                rp = active.base_offset
            try:
                if _fsync_delay_s:
                    time.sleep(_fsync_delay_s)
                for fd, idx_fds in jobs:
                    os.fdatasync(fd)
                    for i in idx_fds:
                        os.fsync(i)
                if dir_dirty:
                    fsync_dir(self.directory)
                if parent_dirty:
                    fsync_dir(self.directory.parent)
                if sizes:
                    _trace_sizes(sizes)
            except OSError as e:
                with self._lock:
                    self._dir_dirty = self._dir_dirty or dir_dirty
                    self._parent_dirty = self._parent_dirty or parent_dirty
                raise KafkaStorageError(f"fsync of {self.name} failed: {e}; data above offset "
                                        f"{self._durable} is not durable") from e
            finally:
                for fd, idx_fds in jobs:
                    os.close(fd)
                    for i in idx_fds:
                        os.close(i)
            with self._lock:
                self._durable = max(self._durable, end)
                self.last_flush_ms = self.clock.wall_ms()
                advance = rp > self._recovery_point
                if advance:
                    self._recovery_point = rp
            return self._durable, advance

    # ================================================================ read
    def read(self, offset: int, max_bytes: int, max_offset: int, *, min_one_batch: bool = True) -> ReadResult:
        """Whole batches from the one containing ``offset``, each with last offset < ``max_offset``, up to
        ``max_bytes`` (the first batch is returned whole anyway when ``min_one_batch``, KIP-74). The caller
        checks ``offset`` against the log start."""
        if offset >= self.log_end_offset or offset >= max_offset:
            return ReadResult()
        segs = self._segments
        i = max(bisect_right(self._bases, offset) - 1, 0)
        while i < len(segs):
            seg = segs[i]
            i += 1
            if seg.next_offset <= offset or seg.closed:
                continue
            res = self._read_segment(seg, offset, max_bytes, max_offset, min_one_batch)
            if res is not None:
                return res
        return ReadResult()

    def _read_segment(self, seg: Segment, offset: int, max_bytes: int, max_offset: int,
                      min_one_batch: bool) -> ReadResult | None:
        end = seg.size
        pos = seg.find_position(offset)
        if pos >= end:
            return None
        want = min(end - pos, self.config.index_interval_bytes + _READ_SLACK + max(max_bytes, 0))
        buf = os.pread(seg.fd, want, pos)
        off = 0
        # ---- skip to the batch containing `offset`
        while True:
            if pos + off >= end:
                return None
            if len(buf) - off < 27:
                pos += off
                buf = os.pread(seg.fd, min(end - pos, max(want, 4096)), pos)
                off = 0
                continue
            base = int.from_bytes(buf[off:off + 8], "big", signed=True)
            size = int.from_bytes(buf[off + 8:off + 12], "big", signed=True) + LOG_OVERHEAD
            last = base + int.from_bytes(buf[off + 23:off + 27], "big", signed=True)
            if last >= offset:
                break
            off += size
        if last >= max_offset:
            return ReadResult()
        if size > max_bytes and not min_one_batch:
            return ReadResult()
        # ---- make sure the buffer holds the first batch and up to max_bytes after its start
        need = min(end - (pos + off), max(size, max_bytes))
        if len(buf) - off < need:
            pos += off
            buf = os.pread(seg.fd, need, pos)
            off = 0
            if len(buf) < size:
                raise KafkaStorageError(f"{seg.log_path}: short read at position {pos}")
        first_offset = base
        start = off
        total = size
        off += size
        limit = start + max(max_bytes, size)
        blen = len(buf)
        while off + 27 <= blen:
            size = int.from_bytes(buf[off + 8:off + 12], "big", signed=True) + LOG_OVERHEAD
            if off + size > limit or off + size > blen:
                break
            base = int.from_bytes(buf[off:off + 8], "big", signed=True)
            if base + int.from_bytes(buf[off + 23:off + 27], "big", signed=True) >= max_offset:
                break
            if total + size > max_bytes:
                break
            total += size
            off += size
        return ReadResult([memoryview(buf)[start:start + total]], first_offset, total)

    # ================================================================ timestamps
    def offset_for_timestamp(self, ts_ms: int, log_start: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after ``log_start`` with timestamp >= ``ts_ms``; None if
        there is none. Only the one batch that holds the answer is decoded (decompressed if needed)."""
        for seg in self._segments:
            if seg.max_timestamp < ts_ms or seg.next_offset <= log_start or seg.closed:
                continue
            _, t_off = seg.time_index.lookup(ts_ms)
            pos = seg.find_position(max(t_off, log_start))
            try:
                for h in seg.scan(pos, check_crc=False, end=seg.size):
                    if h.last_offset < log_start or h.max_timestamp < ts_ms:
                        continue
                    return self._first_record_at(seg, h, ts_ms, log_start)
            except CorruptRecordError:  # pragma: no cover - recovery keeps segments well formed
                continue
        return None

    def max_timestamp_and_offset(self, log_start: int) -> tuple[int, int]:
        """(max timestamp, offset of the first record carrying it) at or after ``log_start``; (-1, -1) if none."""
        best: Segment | None = None
        for seg in self._segments:
            if seg.max_timestamp >= 0 and seg.next_offset > log_start and (
                    best is None or seg.max_timestamp > best.max_timestamp):
                best = seg
        if best is None:
            return -1, -1
        ts = best.max_timestamp
        pos = best.find_position(best.offset_of_max_timestamp)
        for h in best.scan(pos, check_crc=False, end=best.size):
            if h.max_timestamp == ts and h.last_offset >= log_start:
                off, rts = self._first_record_at(best, h, ts, log_start)
                return rts, off
        return ts, best.offset_of_max_timestamp

    def _first_record_at(self, seg: Segment, h: BatchHeader, ts_ms: int, lso: int) -> tuple[int, int]:
        """(offset, timestamp) of the first record of batch ``h`` with timestamp >= ``ts_ms`` and offset >= lso."""
        if h.timestamp_type == TimestampType.LOG_APPEND_TIME:
            return max(h.base_offset, lso), h.max_timestamp
        try:
            for r in decode_records(seg.pread(h.position, h.size), 0, check_crc=False):
                if r.timestamp >= ts_ms and r.offset >= lso:
                    return r.offset, r.timestamp
        except (CorruptRecordError, ValueError) as e:  # pragma: no cover - undecodable: answer per batch
            log.debug("%s: cannot decode batch at offset %d for a timestamp lookup: %s", self.name, h.base_offset, e)
        return max(h.base_offset, lso), h.max_timestamp

    # ================================================================ deletion / replacement
    def delete_oldest_locked(self) -> Segment:
        """Delete the oldest segment (never the active one: the caller checks there are at least two)."""
        seg = self._segments[0]
        self._segments = self._segments[1:]
        self._bases = self._bases[1:]
        if seg.dirty:
            self._dirty = [s for s in self._dirty if s is not seg]
        seg.delete()
        return seg

    def delete_segments_below(self, offset: int) -> int:
        """DeleteRecords: delete the segments wholly below ``offset`` (rolling first if the active one is); the
        number deleted. Caller holds the lock."""
        if self._segments[-1].next_offset <= offset and self._segments[-1].size:
            self.roll_locked()
        n = 0
        while len(self._segments) > 1 and self._segments[1].base_offset <= offset:
            self.delete_oldest_locked()
            n += 1
        return n

    def delete_segments_past_retention(self, now_ms: int, retention_ms: int, retention_bytes: int) -> int:
        """Delete the oldest inactive segments whose newest record is older than ``retention_ms``, then while the
        log is larger than ``retention_bytes`` (-1: no limit); the number deleted. Caller holds the lock."""
        deleted = 0
        if retention_ms >= 0:
            while len(self._segments) > 1:
                seg = self._segments[0]
                newest = seg.max_timestamp if seg.max_timestamp >= 0 else _mtime_ms(seg)
                if now_ms - newest <= retention_ms:
                    break
                self.delete_oldest_locked()
                deleted += 1
        if retention_bytes >= 0:
            excess = self.size_in_bytes - retention_bytes
            while len(self._segments) > 1 and excess - self._segments[0].size >= 0:
                excess -= self.delete_oldest_locked().size
                deleted += 1
        return deleted

    def inactive_fds(self) -> tuple[list[Segment], dict[int, int]]:
        """(segments, id(segment) -> a duplicated fd of every inactive one) for the cleaner, which reads them
        without the lock and closes the fds. Caller holds the lock."""
        segs = self._segments
        fds: dict[int, int] = {}
        try:
            for s in segs[:-1]:
                fds[id(s)] = os.dup(s.fd)
        except OSError:
            for fd in fds.values():
                os.close(fd)
            raise
        return list(segs), fds

    def replace_segments(self, old: list[Segment], install: Callable[[], None]) -> Segment | None:
        """Cleaner swap: if ``old`` are still consecutive inactive segments of this log, run ``install`` (which
        gives the cleaned segment's files their final names, base offset ``old[0].base_offset``) under the log
        lock, open the new segment and put it in their place. Returns it, or None if the log changed (closed,
        segments deleted) and nothing was done. The old segments stay open (concurrent readers may hold them)
        and are closed ``file.delete.delay.ms`` later."""
        with self._lock:
            segs = self._segments
            if self.closed or not old:
                return None
            i = next((j for j, s in enumerate(segs) if s is old[0]), -1)
            if i < 0 or i + len(old) >= len(segs) or any(a is not b for a, b in zip(segs[i:i + len(old)], old)):
                return None
            try:
                install()
                base = old[0].base_offset
                new = open_segment(self.directory, base, self.config, self.clock.wall_ms())
                if not new.load_indexes():
                    new.recover(check_crc=False)
                txn_path = self.directory / segment_file_name(base, TXN_INDEX_SUFFIX)
                new.companions[TXN_INDEX_SUFFIX] = TransactionIndex.load(txn_path, base)
            except (OSError, TxnIndexCorruptError) as e:
                raise KafkaStorageError(f"cannot swap in the cleaned segment of {self.name} at offset "
                                        f"{old[0].base_offset}: {e}; restart to recover") from e
            new_segs = segs[:i] + [new] + segs[i + len(old):]
            # _bases first: read() takes _segments then _bases, and old segments with new bases is safe
            # (new bases are a subset of the old ones, so the lookup starts at or before the right segment)
            self._bases = [s.base_offset for s in new_segs]
            self._segments = new_segs
            if any(s.dirty for s in old):
                self._dirty = [s for s in self._dirty if all(s is not o for o in old)]
            now = self.clock.monotonic_ms()
            self._retired.extend((now, s) for s in old)
            self.close_retired(now - self.config.file_delete_delay_ms)
            return new

    @property
    def has_retired(self) -> bool:
        return bool(self._retired)

    def close_retired(self, retired_before: int) -> None:
        """Close the segments the cleaner replaced at or before ``retired_before`` (monotonic ms)."""
        keep: list[tuple[int, Segment]] = []
        for t, s in self._retired:
            if t <= retired_before:
                try:
                    s.close()
                except OSError as e:  # pragma: no cover
                    log.warning("%s: closing replaced segment %s: %s", self.name, s.log_path.name, e)
            else:
                keep.append((t, s))
        self._retired = keep

    # ================================================================ truncation (the caller holds truncation_lock)
    @property
    def truncation_lock(self) -> threading.Lock:
        """Held across a truncation: no flush runs meanwhile, so none reports a removed offset as durable."""
        return self._flush_lock

    def lower_recovery_point(self, offset: int) -> None:
        """Make every segment from ``offset`` on count as needing recovery (the owner writes the checkpoint)."""
        with self._lock:
            self._recovery_point = min(self._recovery_point, offset)

    def truncate_to(self, offset: int, fault: Callable[[str], None]) -> list[Segment]:
        """Remove everything at or after ``offset`` (Kafka's LocalLog.truncateTo; the caller checked that the
        first segment starts at or below it and that the log ends above it). Segments starting above ``offset``
        are deleted from the last one back, so a crash leaves a prefix; the segment holding ``offset`` is cut
        (a straddling batch goes whole, see Segment.truncate_to), its ``.txnindex`` too, and the cut is made
        durable. The caller has lowered the recovery point below that segment first, so after a crash in the
        middle loading scans it. Returns the deleted segments; the log end may end up below ``offset``."""
        with self._lock:
            segs = self._segments
            keep = [s for s in segs if s.base_offset <= offset]
            gone = segs[len(keep):]
            for s in reversed(gone):
                s.delete()
            fault("segments_deleted")
            self._segments = keep
            self._bases = [s.base_offset for s in keep]
            if gone:
                self._dirty = [s for s in self._dirty if all(s is not g for g in gone)]
            last = keep[-1]
            last.truncate_to(offset)
            txn_idx = last.companions.get(TXN_INDEX_SUFFIX)
            if isinstance(txn_idx, TransactionIndex):
                txn_idx.truncate_to(last.next_offset)
            fault("segment_truncated")
            os.fdatasync(last.fd)
            last.flush_indexes()
            fsync_dir(self.directory)
            self.log_end_offset = last.next_offset
            self._durable = min(self._durable, self.log_end_offset)
            self._recovery_point = min(self._recovery_point, last.base_offset)
            return gone

    def truncate_fully_and_start_at(self, offset: int, fault: Callable[[str], None]) -> None:
        """Delete every segment (the last one first) and start an empty log at ``offset`` (Kafka's
        LocalLog.truncateFullyAndStartAt). A crash in the middle leaves a prefix of the old log, or none."""
        with self._lock:
            for s in reversed(self._segments):
                s.delete()
            self._dirty = []
            fault("segments_deleted")
            new = self.new_segment(offset)
            fsync_dir(self.directory)
            self._segments = [new]
            self._bases = [offset]
            self.log_end_offset = self._durable = self._recovery_point = offset

    # ================================================================ lifecycle
    def update_config(self, config: LogConfig) -> None:
        self.config = config
        for s in self._segments:
            s.index_interval_bytes = config.index_interval_bytes

    def close_active_for_shutdown(self) -> None:
        """Clean close (after a flush, under the lock): the active segment's final time index entry and its
        indexes on disk, so the next open trusts them; the recovery point moves to the active segment."""
        active = self._segments[-1]
        active.time_index.maybe_append(active.max_timestamp, active.offset_of_max_timestamp)
        active.flush_indexes()
        self._recovery_point = max(self._recovery_point, active.base_offset)

    def close_segments(self) -> None:
        self.closed = True
        for s in self._segments:
            s.close()
        self.close_retired(2**63 - 1)


def _mtime_ms(seg: Segment) -> int:
    try:
        return int(os.fstat(seg.fd).st_mtime * 1000)
    except OSError:
        return 0
