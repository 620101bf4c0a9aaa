"""The log cleaner: compaction of partitions whose ``cleanup.policy`` contains ``compact``.

Follows Kafka's ``LogCleaner`` / ``Cleaner`` / ``CleanedTransactionMetadata`` (3.x, with KIP-534 delete
horizons), for one partition per call, with these simplifications (each keeps the log readable and correct):

* The offset map is an exact ``dict`` key bytes -> last offset (Kafka: a fixed-size MD5 hash map). It is capped at
  ``max_map_entries``; when full, mapping stops at a segment boundary and the rest stays dirty for the next run.
* Only whole segments are cleaned: the cleanable range ends at the base offset of the first segment that is the
  active one, or not wholly below the first unstable offset (LSO), the durable offset and the high watermark, or
  that holds a record younger than ``min.compaction.lag.ms`` (Kafka's ``firstUncleanableOffset``, rounded down to
  a segment boundary).
* The dirty offset (Kafka's ``cleaner-offset-checkpoint``) is a per-partition file, ``cleaner.checkpoint``.
* Delete horizons are exact KIP-534: when a retained batch holding tombstones, or a transaction marker whose
  transaction has no data left, is rewritten without a horizon, it gets the ``0x40`` attribute bit and
  ``baseTimestamp = now + delete.retention.ms`` (record timestamp deltas re-based, so absolute timestamps do not
  change). A later run after the horizon drops those tombstones / markers. :func:`needs_cleaning` also fires when
  the earliest horizon written by the last run has passed (so tombstones expire without new dirty data).
* Records without a key are dropped from cleaned segments (Kafka counts them as invalid and drops them too).

What a run does (:meth:`LogCleaner.clean`):

1. Take a snapshot under the log lock (segments with duplicated file descriptors, the producers' last data offset
   and epoch); everything else runs without the lock, reading the immutable inactive segments.
2. Build the key -> offset map over the dirty range ``[first dirty, end)``, skipping aborted transactions (found
   through the ``.txnindex`` files) and control batches.
3. Rewrite every segment from the log start to ``end`` (the clean section too), in groups whose total size fits
   ``segment.bytes`` and whose index entries and offset span fit one segment. Per batch (Kafka's
   ``checkBatchRetention`` / ``shouldRetainRecord``): batches of aborted transactions are dropped; a record is kept
   if it is the latest for its key and not a tombstone whose batch horizon has passed; a COMMIT/ABORT marker is kept
   while data of its transaction is still in the log and until its horizon after that; the batch holding a
   producer's last data offset (or, without one, its last marker in the current epoch) is kept as an empty batch
   (count 0, same offsets, sequence and epoch) if all of its records go, so idempotence and fencing survive.
   Kept batches keep their base offset and last offset delta (hence their sequence range); batches with every
   record kept and no horizon to set are copied byte for byte.
4. Each group is written to ``<base>.log.cleaned`` (+ ``.index/.timeindex/.txnindex.cleaned``), fsynced, then
   swapped in under the log lock (:meth:`PartitionLog.replace_segments`):
   ``.log.cleaned -> .log.swap`` (+ directory fsync: the commit point), old segments' ``.log -> .log.deleted`` and
   their indexes unlinked, the new indexes ``.cleaned -> final``, ``.log.swap -> .log``, directory fsync, unlink
   the ``.deleted`` files. ``loader.recover_cleaner_files`` (run when a log is opened) finishes or rolls back a swap
   interrupted at any point: a ``.log.swap`` means committed (old segments in its offset range are removed, its
   ``.cleaned`` indexes are used if still there), lone ``.cleaned`` files mean not committed (deleted).
   Old segments stay open (readers that took the old segment list keep working) until
   ``file.delete.delay.ms`` later.

The transaction index of a cleaned segment keeps only the aborted transactions whose data this run removed and
whose marker it retained (Kafka's ``cleanedIndex``); entries of aborted transactions with no data left are
dropped, so ``collect_aborted_txns`` stays exact for the data that remains.
"""

from __future__ import annotations

import json
import logging
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from oncelog.protocol.records import (
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TRANSACTIONAL,
    LOG_OVERHEAD,
    BatchHeader,
    CorruptRecordError,
    Record,
    RecordBatchBuilder,
    build_empty_batch,
    compute_crc,
    decode_records,
    parse_batch_header,
    parse_control_record,
)

from .config import LONG_MAX, LogConfig
from .files import fsync_dir, write_all, write_atomic
from .index import OffsetIndex, TimeIndex
from .loader import INDEX_SUFFIXES
from .segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    INT32_MAX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIMEINDEX_SUFFIX,
    Segment,
    segment_file_name,
)
from .txn_index import TXN_INDEX_SUFFIX, AbortedTxn, TransactionIndex

__all__ = ["CLEANED_SUFFIX", "CLEANER_CHECKPOINT", "DELETED_SUFFIX", "SWAP_SUFFIX", "CleanStats", "CleanableLog",
           "CleanerState", "LogCleaner", "needs_cleaning", "truncate_cleaner_checkpoint"]

log = logging.getLogger("oncelog.storage.cleaner")

CLEANER_CHECKPOINT = "cleaner.checkpoint"
_READ_CHUNK = 4 << 20
_WRITE_CHUNK = 1 << 20


# ==================================================================== results / persistent state
@dataclass(slots=True)
class CleanStats:
    bytes_before: int = 0  # size of the segments rewritten
    bytes_after: int = 0  # size of the segments that replaced them
    records_removed: int = 0
    segments_cleaned: int = 0  # source segments rewritten
    segments_after: int = 0  # segments that replaced them
    records_read: int = 0
    batches_emptied: int = 0  # batches kept without records (a producer's last batch)
    map_entries: int = 0
    first_dirty_offset: int = -1
    end_offset: int = -1  # new first dirty offset
    aborted_groups: int = 0  # groups not swapped in (the log changed underneath, e.g. retention)


@dataclass(slots=True)
class CleanerState:
    """Per-partition cleaner checkpoint (``cleaner.checkpoint``)."""

    first_dirty_offset: int = 0
    next_delete_horizon_ms: int = -1  # earliest KIP-534 horizon among kept batches, -1: none
    path: Path | None = field(default=None, repr=False)

    @classmethod
    def load(cls, directory: Path) -> CleanerState:
        p = directory / CLEANER_CHECKPOINT
        try:
            data = json.loads(p.read_text())
            return cls(int(data["first_dirty_offset"]), int(data.get("next_delete_horizon_ms", -1)), p)
        except FileNotFoundError:
            return cls(0, -1, p)
        except (ValueError, KeyError, TypeError) as e:
            log.warning("%s: unreadable cleaner checkpoint (%s); the whole log counts as dirty", p, e)
            return cls(0, -1, p)

    def save(self) -> None:
        assert self.path is not None
        body = json.dumps({"version": 1, "first_dirty_offset": self.first_dirty_offset,
                           "next_delete_horizon_ms": self.next_delete_horizon_ms})
        write_atomic(self.path, body.encode())


class CleanableLog(Protocol):
    """What the cleaner uses of a partition's log (:class:`~.log.PartitionLog` is one): its folder, configuration
    and cleaner checkpoint, its segments and bounds, the aborted transactions, a snapshot under the log lock, and
    the swap of cleaned segments."""

    directory: Path
    config: LogConfig
    cleaner_state: CleanerState | None

    @property
    def name(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    @property
    def segments(self) -> list[Segment]: ...
    @property
    def log_start_offset(self) -> int: ...
    @property
    def durable_offset(self) -> int: ...
    @property
    def high_watermark(self) -> int: ...
    def first_unstable_offset(self) -> int | None: ...
    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]: ...
    def cleaner_snapshot(self) -> tuple[list[Segment], int, dict[int, tuple[int, int]], dict[int, int]]: ...
    def replace_segments(self, old: list[Segment], install: Callable[[], None]) -> Segment | None: ...


def _state(plog: CleanableLog) -> CleanerState:
    st = plog.cleaner_state
    if st is None:
        st = plog.cleaner_state = CleanerState.load(plog.directory)
    return st


def truncate_cleaner_checkpoint(plog: CleanableLog, end_offset: int) -> None:
    """The log was truncated to ``end_offset``: the dirty section starts there at the latest, so what is
    written again at those offsets is compacted (Kafka's LogCleaner.maybeTruncateCheckpoint)."""
    if plog.cleaner_state is None and not (plog.directory / CLEANER_CHECKPOINT).exists():
        return
    st = _state(plog)
    if st.first_dirty_offset > end_offset:
        st.first_dirty_offset = end_offset
        st.save()


# ==================================================================== the cleanable range
def _largest_ts(seg: Segment) -> int:
    if seg.max_timestamp >= 0:
        return seg.max_timestamp
    try:
        return int(os.stat(seg.log_path).st_mtime * 1000)
    except OSError:
        return 0


def _cleanable_end(plog: CleanableLog, segs: list[Segment], upper: int, first_dirty: int, now_ms: int) -> int:
    """Base offset of the first segment that may not be cleaned (a segment boundary <= ``upper``)."""
    lag = plog.config.min_compaction_lag_ms
    for i in range(len(segs) - 1):  # the active segment never
        seg, nxt = segs[i], segs[i + 1]
        if nxt.base_offset > upper:
            return seg.base_offset
        if lag > 0 and nxt.base_offset > first_dirty and _largest_ts(seg) > now_ms - lag:
            return seg.base_offset
    return segs[-1].base_offset


def _upper_bound(plog: CleanableLog, active_base: int) -> int:
    first_unstable = plog.first_unstable_offset()
    upper = min(active_base, plog.durable_offset, plog.high_watermark)
    return upper if first_unstable is None else min(upper, first_unstable)


def needs_cleaning(plog: CleanableLog, now_ms: int) -> bool:
    """Whether a compacted log should be cleaned now: its cleanable dirty ratio is at least
    ``min.cleanable.dirty.ratio``, or a dirty segment is older than ``max.compaction.lag.ms``, or the earliest
    delete horizon written by the last run has passed. Cheap (segment sizes only)."""
    c = plog.config
    if not c.compact or plog.closed:
        return False
    segs = plog.segments
    if len(segs) < 2:
        return False
    st = _state(plog)
    start = plog.log_start_offset
    first_dirty = max(st.first_dirty_offset, start)
    end = _cleanable_end(plog, segs, _upper_bound(plog, segs[-1].base_offset), first_dirty, now_ms)
    clean = dirty = 0
    earliest = LONG_MAX
    for i in range(len(segs) - 1):
        seg = segs[i]
        if seg.base_offset >= end:
            break
        if segs[i + 1].base_offset <= first_dirty:
            clean += seg.size
        else:
            dirty += seg.size
            rts = seg.rolling_timestamp()
            if rts is not None and rts > 0:
                earliest = min(earliest, rts)
    if dirty:
        if dirty / (clean + dirty) >= c.min_cleanable_dirty_ratio:
            return True
        if c.max_compaction_lag_ms < LONG_MAX and earliest < now_ms - max(c.max_compaction_lag_ms, 0):
            return True
    return 0 <= st.next_delete_horizon_ms <= now_ms and clean + dirty > 0


# ==================================================================== transactions (CleanedTransactionMetadata)
class _TxnTracker:
    """Which batches belong to aborted transactions, which markers may go (Kafka's CleanedTransactionMetadata)."""

    def __init__(self, aborted: list[AbortedTxn], cleaned_index: list[AbortedTxn] | None = None) -> None:
        self.aborted = deque(sorted(aborted, key=lambda a: (a.first_offset, a.last_offset)))
        self.ongoing_aborted: dict[int, list[object]] = {}  # pid -> [AbortedTxn, observed a batch]
        self.ongoing_committed: set[int] = set()
        self.cleaned_index = cleaned_index  # where retained ABORT markers' entries go (rewrite pass)

    def _consume(self, offset: int) -> None:
        aborted = self.aborted
        while aborted and aborted[0].first_offset <= offset:
            a = aborted.popleft()
            self.ongoing_aborted.setdefault(a.producer_id, [a, False])

    def on_data(self, h: BatchHeader) -> bool:
        """True if the batch belongs to an aborted transaction (drop it)."""
        self._consume(h.last_offset)
        m = self.ongoing_aborted.get(h.producer_id)
        if m is not None:
            m[1] = True
            return True
        if h.attributes & ATTR_TRANSACTIONAL:
            self.ongoing_committed.add(h.producer_id)
        return False

    def on_control(self, h: BatchHeader, buf: bytes | memoryview) -> bool:
        """True if the marker may be removed (once past its delete horizon): no data of its transaction is left."""
        self._consume(h.last_offset)
        if h.records_count == 0:  # already emptied by an earlier run
            return True
        try:
            marker = parse_control_record(buf)
        except CorruptRecordError:
            return False
        if not marker.is_known:
            return False
        pid = h.producer_id
        if not marker.commit:
            m = self.ongoing_aborted.pop(pid, None)
            if m is not None and m[1]:
                if self.cleaned_index is not None:
                    txn = m[0]
                    assert isinstance(txn, AbortedTxn)
                    self.cleaned_index.append(txn)
                return False
            return True
        if pid in self.ongoing_committed:
            self.ongoing_committed.discard(pid)
            return False
        return True


# ==================================================================== reading / writing batches
def _iter_batches(fd: int, size: int, start: int = 0) -> Iterator[tuple[BatchHeader, memoryview]]:
    """(header, batch bytes) of every batch in [start, size) of the file, CRC-checked."""
    pos = start
    want = _READ_CHUNK
    while pos < size:
        buf = os.pread(fd, min(want, size - pos), pos)
        if not buf:
            raise CorruptRecordError(f"segment ends at {pos}, expected {size} bytes")
        mv = memoryview(buf)
        off = 0
        blen = len(buf)
        while off + LOG_OVERHEAD + 5 <= blen:
            total = int.from_bytes(buf[off + 8:off + 12], "big", signed=True) + LOG_OVERHEAD
            if off + total > blen:
                break
            h = parse_batch_header(mv, off)
            if compute_crc(mv, off, total) != h.crc:
                raise CorruptRecordError(f"batch at position {pos + off} (base offset {h.base_offset}) fails its "
                                         "CRC32C")
            h.position = pos + off
            yield h, mv[off:off + total]
            off += total
        if off == 0:
            if pos + blen >= size:
                raise CorruptRecordError(f"torn batch at position {pos}")
            want = max(want * 2, int.from_bytes(buf[8:12], "big", signed=True) + LOG_OVERHEAD)
            continue
        pos += off
        want = _READ_CHUNK


def _build_batch(h: BatchHeader, records: list[Record], delete_horizon: int | None) -> bytes:
    """``h`` rebuilt with ``records`` (Kafka's MemoryRecords.buildRetainedRecordsInto): same base offset, last
    offset (so sequence range), producer fields, codec and timestamp type; record offsets and timestamps kept;
    the base timestamp is the KIP-534 delete horizon when one is set."""
    b = RecordBatchBuilder(compression=h.compression, producer_id=h.producer_id, producer_epoch=h.producer_epoch,
                           base_sequence=h.base_sequence, is_transactional=h.is_transactional,
                           is_control=h.is_control, base_offset=h.base_offset,
                           partition_leader_epoch=h.partition_leader_epoch, timestamp_type=h.timestamp_type,
                           delete_horizon_ms=delete_horizon)
    for r in records:
        b.append(r.timestamp, r.key, r.value, r.headers, offset=r.offset)
    b.override_last_offset(h.last_offset)
    return b.build()


def _empty_batch(h: BatchHeader) -> bytes:
    """``h`` without records: same offsets, sequence and epoch (Kafka's DefaultRecordBatch.writeEmptyHeader)."""
    return build_empty_batch(base_offset=h.base_offset, last_offset=h.last_offset, max_timestamp=h.max_timestamp,
                             producer_id=h.producer_id, producer_epoch=h.producer_epoch,
                             base_sequence=h.base_sequence, partition_leader_epoch=h.partition_leader_epoch,
                             timestamp_type=h.timestamp_type, is_transactional=h.is_transactional,
                             is_control=h.is_control)


def _horizon(h: BatchHeader) -> int | None:
    return h.base_timestamp if h.attributes & ATTR_DELETE_HORIZON else None


# ==================================================================== the cleaner
class LogCleaner:
    """Cleans one compacted partition log per :meth:`clean` call; stateless between calls (the dirty offset
    lives in the partition's ``cleaner.checkpoint``), so one instance may serve every log, one log at a time.

    ``fault``: test hook called with a step name (``"cleaned"``, ``"swap"``, ``"deleted"``, ``"indexes"``,
    ``"renamed"``) during the file dance; raising there simulates a crash at that point.
    """

    def __init__(self, *, max_map_entries: int = 5_000_000, fault: Callable[[str], None] | None = None) -> None:
        self.max_map_entries = max_map_entries
        self.fault = fault

    # ---------------------------------------------------------------- entry point
    def clean(self, plog: CleanableLog, now_ms: int) -> CleanStats:
        stats = CleanStats()
        if not plog.config.compact or plog.closed:
            return stats
        segs, lso, producers, fds = plog.cleaner_snapshot()
        try:
            self._clean(plog, segs, lso, producers, fds, now_ms, stats)
        finally:
            for fd in fds.values():
                os.close(fd)
        return stats

    def _clean(self, plog: CleanableLog, segs: list[Segment], lso: int, producers: dict[int, tuple[int, int]],
               fds: dict[int, int], now_ms: int, stats: CleanStats) -> None:
        st = _state(plog)
        if len(segs) < 2:
            return
        first_dirty = max(st.first_dirty_offset, lso)
        end = _cleanable_end(plog, segs, _upper_bound(plog, segs[-1].base_offset), first_dirty, now_ms)
        horizon_due = 0 <= st.next_delete_horizon_ms <= now_ms
        if end <= segs[0].base_offset or (end <= first_dirty and not horizon_due):
            return
        first_dirty = min(first_dirty, end)
        stats.first_dirty_offset = first_dirty
        cand = [s for s in segs[:-1] if s.base_offset < end]
        offset_map, end = self._build_map(plog, cand, fds, first_dirty, end)
        cand = [s for s in cand if s.base_offset < end]
        stats.map_entries = len(offset_map)
        stats.end_offset = end
        c = plog.config
        txn = _TxnTracker(plog.collect_aborted_txns(cand[0].base_offset, end))
        ctx = _Ctx(offset_map, producers, now_ms, c.delete_retention_ms, txn)
        for group in self._group(cand, end, c.segment_bytes, c.segment_index_bytes):
            if not self._clean_group(plog, group, fds, ctx, stats):
                if plog.closed:
                    return
                stats.aborted_groups += 1
        st.first_dirty_offset = end
        st.next_delete_horizon_ms = ctx.min_horizon
        st.save()
        log.info("%s: cleaned %d segment(s) into %d up to offset %d: %d -> %d bytes, %d record(s) removed, "
                 "%d key(s) mapped", plog.name, stats.segments_cleaned, stats.segments_after, end,
                 stats.bytes_before, stats.bytes_after, stats.records_removed, stats.map_entries)

    # ---------------------------------------------------------------- offset map
    def _build_map(self, plog: CleanableLog, cand: list[Segment], fds: dict[int, int], first_dirty: int,
                   end: int) -> tuple[dict[bytes, int], int]:
        m: dict[bytes, int] = {}
        if first_dirty >= end:
            return m, end
        txn = _TxnTracker(plog.collect_aborted_txns(first_dirty, end))
        for i, seg in enumerate(cand):
            seg_end = cand[i + 1].base_offset if i + 1 < len(cand) else end
            if seg_end <= first_dirty:
                continue
            pos = seg.find_position(first_dirty) if first_dirty > seg.base_offset else 0
            for h, buf in _iter_batches(fds[id(seg)], seg.size, pos):
                if h.last_offset < first_dirty:
                    continue
                if h.attributes & ATTR_CONTROL:
                    txn.on_control(h, buf)
                    continue
                if txn.on_data(h) or not h.records_count:
                    continue
                for r in decode_records(buf, check_crc=False):
                    if r.key is not None and r.offset >= first_dirty:
                        m[r.key] = r.offset
            if len(m) >= self.max_map_entries and i + 1 < len(cand):
                log.info("%s: offset map full (%d keys); cleaning up to offset %d this time", plog.name, len(m),
                         seg_end)
                return m, seg_end
        return m, end

    # ---------------------------------------------------------------- grouping (groupSegmentsBySize)
    @staticmethod
    def _group(cand: list[Segment], end: int, max_size: int, index_bytes: int) -> list[list[Segment]]:
        max_oi = max(1, index_bytes // OffsetIndex.entry_size)
        max_ti = max(1, index_bytes // TimeIndex.entry_size)
        groups: list[list[Segment]] = []
        i = 0
        while i < len(cand):
            first = cand[i]
            group = [first]
            size, oi, ti = first.size, len(first.offset_index), len(first.time_index)
            i += 1
            while i < len(cand):
                s = cand[i]
                last = (cand[i + 1].base_offset if i + 1 < len(cand) else end) - 1
                if (size + s.size > max_size or oi + len(s.offset_index) > max_oi
                        or ti + len(s.time_index) > max_ti or last - first.base_offset > INT32_MAX):
                    break
                group.append(s)
                size += s.size
                oi += len(s.offset_index)
                ti += len(s.time_index)
                i += 1
            groups.append(group)
        return groups

    # ---------------------------------------------------------------- one group -> one segment
    def _clean_group(self, plog: CleanableLog, group: list[Segment], fds: dict[int, int], ctx: _Ctx,
                     stats: CleanStats) -> bool:
        d = plog.directory
        c = plog.config
        base = group[0].base_offset
        paths = {suf: d / segment_file_name(base, suf + CLEANED_SUFFIX) for suf in (LOG_SUFFIX, *INDEX_SUFFIXES)}
        for p in paths.values():
            p.unlink(missing_ok=True)
        oidx = OffsetIndex(paths[INDEX_SUFFIX], base, c.segment_index_bytes // OffsetIndex.entry_size)
        tidx = TimeIndex(paths[TIMEINDEX_SUFFIX], base, c.segment_index_bytes // TimeIndex.entry_size)
        entries: list[AbortedTxn] = []
        ctx.txn.cleaned_index = entries
        interval = c.index_interval_bytes
        before = sum(s.size for s in group)
        removed = emptied = read = 0
        fd = os.open(paths[LOG_SUFFIX], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            pending = bytearray()
            pos = since = 0
            max_ts, max_ts_off = -1, base
            for seg in group:
                for h, buf in _iter_batches(fds[id(seg)], seg.size):
                    read += h.records_count
                    out = ctx.filter_batch(h, buf)
                    if out is None:
                        removed += h.records_count
                        continue
                    data, kept = out
                    removed += h.records_count - kept
                    if not kept and h.records_count:
                        emptied += 1
                    bts = int.from_bytes(data[35:43], "big", signed=True)
                    if bts > max_ts:
                        max_ts, max_ts_off = bts, h.last_offset
                    if since > interval:
                        oidx.append(h.last_offset, pos)
                        tidx.maybe_append(max_ts, max_ts_off)
                        since = 0
                    since += len(data)
                    pos += len(data)
                    pending += data
                    if len(pending) >= _WRITE_CHUNK:
                        write_all(fd, pending)
                        pending.clear()
            if pending:
                write_all(fd, pending)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            _unlink_all(paths.values())
            raise
        os.close(fd)
        try:
            tidx.maybe_append(max_ts, max_ts_off)
            oidx.fsync()
            tidx.fsync()
            tx = TransactionIndex.create(paths[TXN_INDEX_SUFFIX], base)
            for e in entries:
                tx.append(e)
            tx.flush()
            tx.close()
            fsync_dir(d)
            self._fault("cleaned")
        except BaseException:
            _unlink_all(paths.values())
            raise
        finally:
            oidx.close()
            tidx.close()
        new = plog.replace_segments(group, lambda: self._install(d, base, group))
        if new is None:  # the log changed underneath (segments deleted, log closed): drop our work
            _unlink_all(paths.values())
            return False
        stats.bytes_before += before
        stats.bytes_after += new.size
        stats.records_read += read
        stats.records_removed += removed
        stats.batches_emptied += emptied
        stats.segments_cleaned += len(group)
        stats.segments_after += 1
        return True

    def _fault(self, step: str) -> None:
        if self.fault is not None:
            self.fault(step)

    def _install(self, d: Path, base: int, group: list[Segment]) -> None:
        """The file dance, run under the log lock by PartitionLog.replace_segments (see the module doc)."""
        swap = d / segment_file_name(base, LOG_SUFFIX + SWAP_SUFFIX)
        os.replace(d / segment_file_name(base, LOG_SUFFIX + CLEANED_SUFFIX), swap)
        fsync_dir(d)  # commit point: from here a crash recovers to the cleaned segment
        self._fault("swap")
        for seg in group:
            os.replace(seg.log_path, seg.log_path.with_name(seg.log_path.name + DELETED_SUFFIX))
            for suf in INDEX_SUFFIXES:
                (d / segment_file_name(seg.base_offset, suf)).unlink(missing_ok=True)
        self._fault("deleted")
        for suf in INDEX_SUFFIXES:
            os.replace(d / segment_file_name(base, suf + CLEANED_SUFFIX), d / segment_file_name(base, suf))
        self._fault("indexes")
        os.replace(swap, d / segment_file_name(base, LOG_SUFFIX))
        fsync_dir(d)
        self._fault("renamed")
        for seg in group:
            seg.log_path.with_name(seg.log_path.name + DELETED_SUFFIX).unlink(missing_ok=True)


class _Ctx:
    """Per-run state of the rewrite pass: the batch/record retention rules."""

    __slots__ = ("delete_retention_ms", "map", "min_horizon", "now", "producers", "txn")

    def __init__(self, offset_map: dict[bytes, int], producers: dict[int, tuple[int, int]], now_ms: int,
                 delete_retention_ms: int, txn: _TxnTracker) -> None:
        self.map = offset_map
        self.producers = producers
        self.now = now_ms
        self.delete_retention_ms = delete_retention_ms
        self.txn = txn
        self.min_horizon = -1

    def _is_last_of_producer(self, h: BatchHeader) -> bool:
        """Kafka's isBatchLastRecordOfProducer: the batch with the producer's last data offset, or, if it has
        none, its marker in the current epoch."""
        info = self.producers.get(h.producer_id)
        if info is None:
            return False
        last_data, epoch = info
        if last_data >= 0:
            return h.last_offset == last_data
        return bool(h.attributes & ATTR_CONTROL) and h.producer_epoch == epoch

    def _note_horizon(self, horizon: int | None) -> None:
        if horizon is not None and (self.min_horizon < 0 or horizon < self.min_horizon):
            self.min_horizon = horizon

    def filter_batch(self, h: BatchHeader, buf: memoryview) -> tuple[bytes, int] | None:
        """(bytes to write, records kept) for a source batch, or None to drop it."""
        now = self.now
        control = h.attributes & ATTR_CONTROL
        hz = _horizon(h)
        if control:
            can_discard = self.txn.on_control(h, buf)
            discard = can_discard and hz is not None and hz <= now
        else:
            can_discard = discard = self.txn.on_data(h)
        last = h.producer_id >= 0 and self._is_last_of_producer(h)
        count = h.records_count
        if discard or not count:
            if not last:
                return None
            return (bytes(buf) if not count else _empty_batch(h)), 0
        if control:
            if can_discard and hz is None:  # the transaction has no data left: start the marker's horizon
                hz = now + self.delete_retention_ms
                self._note_horizon(hz)
                return _build_batch(h, decode_records(buf, check_crc=False), hz), count
            self._note_horizon(hz)
            return bytes(buf), count
        records = decode_records(buf, check_crc=False)
        m = self.map
        keep: list[Record] = []
        tombstones = False
        for r in records:
            key = r.key
            if key is None:
                continue
            found = m.get(key)
            if found is not None and r.offset < found:
                continue
            if r.value is None:
                if hz is not None and now >= hz:
                    continue
                tombstones = True
            keep.append(r)
        if not keep:
            return (_empty_batch(h), 0) if last else None
        if tombstones and hz is None:
            hz = now + self.delete_retention_ms
            self._note_horizon(hz)
            return _build_batch(h, keep, hz), len(keep)
        if tombstones:
            self._note_horizon(hz)
        if len(keep) == count:
            return bytes(buf), count
        return _build_batch(h, keep, hz), len(keep)


def _unlink_all(paths: Iterable[Path]) -> None:
    for p in paths:
        try:
            p.unlink(missing_ok=True)
        except OSError:  # pragma: no cover
            pass
