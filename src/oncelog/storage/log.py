"""The durable log of one partition: ``<data_dir>/<topic>-<partition>/``.

Threading: ``append``, ``read``, ``roll``, retention and DeleteRecords run on one thread (the broker's event
loop); ``flush`` may run on any thread concurrently with them. Shared state is guarded by ``_lock``; fsyncs run
outside it on duplicated file descriptors, so a segment deleted meanwhile is harmless. The log cleaner
(cleaner.py) runs on a worker thread the same way: it reads inactive segments through duplicated descriptors
(``cleaner_snapshot``) and swaps cleaned segments in under ``_lock`` (``replace_segments``); replaced segments
stay open for ``file.delete.delay.ms`` so readers holding the previous segment list keep working.

Crash safety: data below ``durable_offset`` has been fdatasync'ed. ``partition.checkpoint`` (JSON, replaced
atomically) keeps the log start offset and the recovery point: every segment whose base offset is below the
recovery point is complete on disk with its indexes (it was fsynced after becoming inactive). After an unclean
shutdown only segments at or above the recovery point are scanned (batch structure + CRC32C) and truncated at
the first bad batch; later segments are then dropped, as Kafka's LogLoader does.

Idempotence and transactions (see producer_state.py): ``append`` validates batches that carry a producer id
against the :class:`ProducerStateManager` after offsets are assigned and before anything is written, and
commits the pending state after the write; batches without a producer id cost one comparison. Transaction
markers (origin ``coordinator``) end transactions; an ABORT adds an entry to the ``.txnindex`` of the segment
the marker lands in. Producer state is snapshotted (``<offset>.snapshot``) at every roll and at a clean close;
loading takes the newest valid snapshot at or below the first segment that needs rebuilding and replays the
batches after it (headers only; markers are decoded), rebuilding the ``.txnindex`` of every recovered segment
and of every segment whose ``.txnindex`` is missing or corrupt.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from oncelog.clock import Clock
from oncelog.protocol.records import (
    ATTR_CONTROL,
    LOG_OVERHEAD,
    BatchHeader,
    CorruptRecordError,
    TimestampType,
    build_control_batch,
    decode_records,
    parse_batch_header,
    parse_control_record,
    set_base_offset,
    set_max_timestamp_log_append,
)

from .cleaner import CleanerState, recover_cleaner_files
from .cleaner import needs_cleaning as _needs_cleaning
from .config import LogConfig
from .errors import KafkaStorageError, OffsetOutOfRangeError, ProducerStateError
from .files import TMP_SUFFIX, fsync_dir, write_atomic
from .producer_state import (
    ORIGIN_CLIENT,
    ORIGIN_COORDINATOR,
    ORIGIN_REPLICATION,
    ActiveProducer,
    CompletedTxn,
    ProducerAppendInfo,
    ProducerStateManager,
    TxnMetadata,
)
from .segment import INT32_MAX, LOG_SUFFIX, Segment, parse_segment_base, segment_file_name
from .txn_index import TXN_INDEX_SUFFIX, AbortedTxn, TransactionIndex, TxnIndexCorruptError

__all__ = ["CHECKPOINT_FILE", "ORIGIN_CLIENT", "ORIGIN_COORDINATOR", "AppendResult", "PartitionLog", "ReadResult",
           "RollHook"]

log = logging.getLogger("oncelog.storage")

CHECKPOINT_FILE = "partition.checkpoint"
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
class AppendResult:
    first_offset: int
    last_offset: int
    log_append_time_ms: int  # -1 for CreateTime
    max_timestamp: int
    offset_of_max_timestamp: int


@dataclass(slots=True)
class ReadResult:
    records: list[bytes | memoryview] = field(default_factory=list)
    first_batch_offset: int = -1
    size: int = 0


def _trace_fsync(sizes: list[tuple[Path, int]]) -> None:
    assert _fsync_trace is not None
    line = "".join(f"{path} {size}\n" for path, size in sizes).encode()
    with _fsync_trace_lock:
        fd = os.open(_fsync_trace, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


class PartitionLog:
    def __init__(self, directory: Path, topic: str, partition: int, config: LogConfig, clock: Clock) -> None:
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self.clock = clock
        self.on_roll: list[RollHook] = []  # called as hook(old_segment, new_segment) under the log lock
        self._lock = threading.RLock()
        self._flush_lock = threading.Lock()
        self._ckpt_lock = threading.Lock()
        self._segments: list[Segment] = []  # replaced, never mutated in place (readers take snapshots)
        self._bases: list[int] = []
        self._lso = 0
        self._leo = 0
        self._durable = 0
        self._recovery_point = 0
        self._ckpt_written: tuple[int, int] | None = None
        self._dirty: list[Segment] = []
        self._dir_dirty = False
        self.last_flush_ms = clock.wall_ms()
        self.closed = False
        self._psm = ProducerStateManager(self.name, self.directory)
        self.cleaner_state: CleanerState | None = None  # loaded by the cleaner (cleaner.py) on first use
        self._retired: list[tuple[int, Segment]] = []  # (monotonic ms, segment) replaced by the cleaner

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    # ================================================================ open / recovery
    @classmethod
    def open(cls, directory: Path, topic: str, partition: int, config: LogConfig, clock: Clock, *,
             clean_shutdown: bool) -> PartitionLog:
        self = cls(Path(directory), topic, partition, config, clock)
        try:
            self._load(clean_shutdown)
        except OSError as e:
            self._close_segments()
            raise KafkaStorageError(
                f"cannot open the log of {self.name} in {self.directory}: {e}; check the disk and permissions"
            ) from e
        return self

    def _new_segment(self, base: int) -> Segment:
        seg = Segment.create(self.directory, base, index_interval_bytes=self.config.index_interval_bytes,
                             segment_index_bytes=self.config.segment_index_bytes, created_ms=self.clock.wall_ms())
        seg.companions[TXN_INDEX_SUFFIX] = TransactionIndex.create(
            self.directory / segment_file_name(base, TXN_INDEX_SUFFIX), base)
        return seg

    def _attach_txn_index(self, seg: Segment, rebuild: set[int]) -> None:
        """Load the segment's .txnindex, or create an empty one and mark the segment for rebuilding."""
        path = self.directory / segment_file_name(seg.base_offset, TXN_INDEX_SUFFIX)
        if seg.base_offset not in rebuild:
            try:
                idx = TransactionIndex.load(path, seg.base_offset)
                if idx.entries and idx.entries[-1].last_offset >= seg.next_offset:
                    raise TxnIndexCorruptError(f"{path}: entries beyond the segment end {seg.next_offset}")
                seg.companions[TXN_INDEX_SUFFIX] = idx
                return
            except FileNotFoundError:
                log.info("%s: %s is missing; rebuilding it from the log", self.name, path.name)
            except (TxnIndexCorruptError, OSError) as e:
                log.warning("%s: rebuilding unusable transaction index: %s", self.name, e)
            rebuild.add(seg.base_offset)
        seg.companions[TXN_INDEX_SUFFIX] = TransactionIndex.create(path, seg.base_offset)

    def _load(self, clean_shutdown: bool) -> None:
        d = self.directory
        created = not d.exists()
        d.mkdir(parents=True, exist_ok=True)
        if created:
            fsync_dir(d.parent)
        else:
            recover_cleaner_files(d)  # finish or roll back a cleaner swap interrupted by a crash
        lso, rp = self._read_checkpoint(clean_shutdown)
        bases: list[int] = []
        for p in d.iterdir():
            if p.name.endswith(TMP_SUFFIX):
                p.unlink(missing_ok=True)
                continue
            base = parse_segment_base(p.name)
            if base is not None and p.name.endswith(LOG_SUFFIX):
                bases.append(base)
        bases.sort()
        base_set = set(bases)
        for p in d.iterdir():  # index files whose segment is gone
            base = parse_segment_base(p.name)
            if base is not None and base not in base_set and p.suffix in (".index", ".timeindex", TXN_INDEX_SUFFIX):
                p.unlink(missing_ok=True)

        segments: list[Segment] = []
        recovered: list[Segment] = []
        now = self.clock.wall_ms()
        for i, base in enumerate(bases):
            seg = Segment(d, base, index_interval_bytes=self.config.index_interval_bytes,
                          segment_index_bytes=self.config.segment_index_bytes, created_ms=now, new_file=False)
            segments.append(seg)
            last = i == len(bases) - 1
            needs_scan = not clean_shutdown and (base >= rp or last)
            if not needs_scan and seg.load_indexes():
                continue
            size_before = seg.size
            truncated, next_off = seg.recover(check_crc=True)
            recovered.append(seg)
            if truncated:
                log.warning(
                    "recovered %s: truncated segment %s at offset %d, dropping %d of %d bytes (torn or corrupt tail)",
                    self.name, seg.log_path.name, next_off, truncated, size_before,
                )
                rest = bases[i + 1:]
                if rest:
                    dropped = sum((d / f"{b:020d}{LOG_SUFFIX}").stat().st_size for b in rest)
                    log.warning("recovered %s: deleting %d later segment(s) from offset %d (%d bytes)",
                                self.name, len(rest), rest[0], dropped)
                    for b in rest:
                        s = Segment(d, b, index_interval_bytes=1, segment_index_bytes=8, created_ms=now,
                                    new_file=False)
                        s.delete()
                        (d / segment_file_name(b, TXN_INDEX_SUFFIX)).unlink(missing_ok=True)
                break

        if not segments:
            segments.append(self._new_segment(max(lso, 0)))
            self._dir_dirty = True
        leo = segments[-1].next_offset
        if lso > leo:
            log.warning("%s: log start offset %d is beyond the recovered log end %d; starting an empty log at %d",
                        self.name, lso, leo, lso)
            for s in segments:
                s.delete()
            segments = [self._new_segment(lso)]
            recovered = []
            leo = lso
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._lso = max(lso, segments[0].base_offset)
        self._leo = leo
        rebuild = {s.base_offset for s in recovered}
        for s in segments:
            if TXN_INDEX_SUFFIX not in s.companions:
                self._attach_txn_index(s, rebuild)
        replayed = self._load_producer_state(rebuild)
        for s in recovered:  # what recovery kept is now made durable, so durable_offset = log end is true
            os.fdatasync(s.fd)
            s.flush_indexes()
        if _fsync_trace and recovered:
            _trace_fsync([(s.log_path, s.size) for s in recovered])
        for s in segments:
            if s.base_offset in rebuild:
                for c in s.companions.values():
                    c.flush()
        if recovered or rebuild or self._dir_dirty:
            fsync_dir(d)
            self._dir_dirty = False
        self._durable = leo
        # never past the active segment's base: it is scanned after every unclean shutdown anyway
        self._recovery_point = segments[-1].base_offset
        self._write_checkpoint()
        if replayed:
            self._take_snapshot(sync=False)

    # ================================================================ producer state: load / replay
    def _load_producer_state(self, rebuild: set[int]) -> bool:
        """Snapshot + replay; rebuilds the .txnindex of the segments in ``rebuild``. True if it replayed."""
        psm = self._psm
        leo, lso = self._leo, self._lso
        psm.delete_snapshots(above=leo, below=lso)
        target = min(min(rebuild, default=leo), leo)
        snap = psm.load_latest_snapshot(target)
        start = lso if snap is None else snap
        if start >= leo:
            psm.on_log_start_offset(lso)
            return False
        n = 0
        for seg in self._segments:
            if seg.next_offset <= start:
                continue
            idx = seg.companions[TXN_INDEX_SUFFIX] if seg.base_offset in rebuild else None
            if idx is not None:
                assert isinstance(idx, TransactionIndex)
                idx.truncate_to(start)
            pos = seg.find_position(start) if start > seg.base_offset else 0
            for h in seg.scan(pos, check_crc=False):
                if h.producer_id < 0 or h.last_offset < start:
                    continue
                self._replay_batch(seg, h, idx)
                n += 1
        psm.unreplicated.clear()  # everything loaded is durable (= below the high watermark)
        psm.on_log_start_offset(lso)
        log.info("%s: producer state loaded from %s and %d batch(es) replayed from offset %d: %d producer(s), "
                 "%d ongoing transaction(s)", self.name, "no snapshot" if snap is None else f"snapshot {snap}",
                 n, start, len(psm.producers), len(psm.ongoing))
        return True

    def _replay_batch(self, seg: Segment, h: BatchHeader, idx: TransactionIndex | None) -> None:
        psm = self._psm
        info = psm.prepare_update(h.producer_id, ORIGIN_REPLICATION)
        try:
            if h.attributes & ATTR_CONTROL:
                if not h.records_count:  # emptied by the cleaner: its transaction is gone from the log
                    return
                marker = parse_control_record(seg.pread(h.position, h.size))
                if not marker.is_known:
                    return
                txn = info.append_end_txn_marker(marker.commit, marker.coordinator_epoch, h.producer_epoch,
                                                 h.base_offset, h.max_timestamp)
                psm.update(info)
                if txn is not None:
                    if txn.is_aborted and idx is not None:
                        idx.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset,
                                              psm.last_stable_offset(txn)))
                    psm.complete_txn(txn)
            else:
                info.append_data_batch(h.producer_epoch, h.base_sequence, h.last_sequence, h.max_timestamp,
                                       h.base_offset, h.last_offset, h.is_transactional)
                psm.update(info)
        except (ProducerStateError, CorruptRecordError, ValueError) as e:  # pragma: no cover - validated on append
            log.warning("%s: skipping batch at offset %d while rebuilding producer state: %s",
                        self.name, h.base_offset, e)

    def _take_snapshot(self, *, sync: bool) -> None:
        try:
            self._psm.take_snapshot(self._leo, sync=sync,
                                    keep=(self._recovery_point, self._segments[-1].base_offset))
        except OSError as e:
            log.warning("%s: cannot write the producer state snapshot at offset %d: %s", self.name, self._leo, e)

    def _read_checkpoint(self, clean_shutdown: bool) -> tuple[int, int]:
        p = self.directory / CHECKPOINT_FILE
        try:
            data = json.loads(p.read_text())
            lso, rp = int(data["log_start_offset"]), int(data["recovery_point"])
            self._ckpt_written = (lso, rp)
            return lso, rp
        except FileNotFoundError:
            return 0, 0
        except (ValueError, KeyError, TypeError) as e:
            log.warning("%s: unreadable %s (%s); recovering every segment", self.name, p, e)
            return 0, 0

    def _write_checkpoint(self) -> None:
        with self._ckpt_lock:
            state = (self._lso, self._recovery_point)
            if state == self._ckpt_written:
                return
            body = json.dumps({"version": 1, "log_start_offset": state[0], "recovery_point": state[1]})
            write_atomic(self.directory / CHECKPOINT_FILE, body.encode())
            self._ckpt_written = state

    # ================================================================ properties
    @property
    def log_start_offset(self) -> int:
        return self._lso

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def durable_offset(self) -> int:
        return self._durable

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def unflushed_messages(self) -> int:
        return self._leo - self._durable

    @property
    def segments(self) -> list[Segment]:
        return list(self._segments)

    @property
    def active_segment(self) -> Segment:
        return self._segments[-1]

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    # ================================================================ append
    def append(self, payload: bytearray, headers: list[BatchHeader], *,
               log_append_time_ms: int | None = None, origin: str = ORIGIN_CLIENT,
               markers: dict[int, tuple[bool, int]] | None = None) -> AppendResult:
        """Assign offsets to the (already validated) batches in ``payload`` and write them in one call.

        Batches with a producer id are checked against the producer state first (``origin`` ``client``: full
        idempotence/transaction checks; ``coordinator``: epoch checks only, and control batches are transaction
        markers). Raises a ProducerStateError subclass and writes nothing if any batch fails; raises
        DuplicateSequenceError (with the original offsets, to answer as a success) for a client retry of one
        of the producer's last 5 batches. ``markers`` (origin coordinator only): (commit, coordinator epoch) of the
        control batches by index, when the caller built them (not parsed again).
        """
        if not headers:
            raise ValueError("append needs at least one batch")
        with self._lock:
            if self.closed:
                raise KafkaStorageError(f"the log of {self.name} is closed; the partition was deleted or shut down")
            first = off = self._leo
            max_ts, max_ts_off = -1, first
            if log_append_time_ms is not None:
                for h in headers:
                    if h.timestamp_type != TimestampType.LOG_APPEND_TIME or h.max_timestamp != log_append_time_ms:
                        set_max_timestamp_log_append(payload, h.position, h.size, log_append_time_ms)
                        h.attributes |= 0x08
                        h.max_timestamp = log_append_time_ms
            has_pid = False
            for h in headers:
                set_base_offset(payload, h.position, off)
                h.base_offset = off
                off += h.last_offset_delta + 1
                if h.max_timestamp > max_ts:
                    max_ts, max_ts_off = h.max_timestamp, off - 1
                if h.producer_id >= 0:
                    has_pid = True
            pending = nxt = None
            if has_pid:
                if origin == ORIGIN_CLIENT and len(headers) == 1:
                    nxt = self._psm.prepare_next_batch(headers[0])
                if nxt is None:
                    pending = self._prepare_producer_state(payload, headers, origin, markers)
            seg = self._segments[-1]
            if seg.size and self._should_roll(seg, len(payload), max_ts, off - 1):
                seg = self._roll_locked()
            try:
                seg.append(payload, headers, off)
            except OSError as e:
                raise KafkaStorageError(f"cannot append to {self.name} ({seg.log_path}): {e}") from e
            if not seg.dirty:
                seg.dirty = True
                self._dirty.append(seg)
            self._leo = off
            if nxt is not None:
                self._psm.commit_next_batch(nxt)
            elif pending is not None:
                self._commit_producer_state(seg, pending[0], pending[1])
        if log_append_time_ms is not None:
            max_ts_off = first  # every record carries the same timestamp: the first one has it
        return AppendResult(first, off - 1, -1 if log_append_time_ms is None else log_append_time_ms,
                            max_ts, max_ts_off)

    def _prepare_producer_state(self, payload: bytearray, headers: list[BatchHeader], origin: str,
                                markers: dict[int, tuple[bool, int]] | None = None,
                                ) -> tuple[list[ProducerAppendInfo], list[CompletedTxn]]:
        control: dict[int, tuple[bool, int]] | None = None
        if origin != ORIGIN_CLIENT:
            if origin != ORIGIN_COORDINATOR and origin != ORIGIN_REPLICATION:
                raise ValueError(f"unknown append origin {origin!r}; use 'client', 'coordinator' or 'replication'")
            if markers is not None and origin == ORIGIN_COORDINATOR:
                return self._psm.prepare(headers, origin, markers)
            for i, h in enumerate(headers):
                if h.attributes & ATTR_CONTROL and h.producer_id >= 0:
                    marker = parse_control_record(payload, h.position)
                    if marker.is_known:
                        if control is None:
                            control = {}
                        control[i] = (marker.commit, marker.coordinator_epoch)
        return self._psm.prepare(headers, origin, control)

    def _commit_producer_state(self, seg: Segment, infos: list[ProducerAppendInfo],
                               completed: list[CompletedTxn]) -> None:
        psm = self._psm
        for info in infos:
            psm.update(info)
        for txn in completed:
            if txn.is_aborted:
                idx = seg.companions[TXN_INDEX_SUFFIX]
                assert isinstance(idx, TransactionIndex)
                try:
                    idx.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset,
                                          psm.last_stable_offset(txn)))
                except OSError as e:
                    raise KafkaStorageError(f"cannot append to the transaction index {idx.path}: {e}") from e
            psm.complete_txn(txn)

    def append_marker(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                      timestamp_ms: int, *, log_append_time_ms: int | None = None) -> AppendResult:
        """Write a COMMIT/ABORT transaction marker for ``producer_id`` (origin coordinator: WriteTxnMarkers)."""
        buf = bytearray(build_control_batch(producer_id=producer_id, producer_epoch=producer_epoch, commit=commit,
                                            coordinator_epoch=coordinator_epoch, timestamp_ms=timestamp_ms))
        return self.append(buf, [parse_batch_header(buf, 0)], log_append_time_ms=log_append_time_ms,
                           origin=ORIGIN_COORDINATOR, markers={0: (commit, coordinator_epoch)})

    # ================================================================ transactions / producer state queries
    @property
    def producer_state_manager(self) -> ProducerStateManager:
        return self._psm

    def first_unstable_offset(self) -> int | None:
        """First offset of an ongoing transaction or of a completed one whose marker is not yet below the high
        watermark (clamped to the log start); None if there is none. The LSO is min(this, high watermark)."""
        with self._lock:
            first = self._psm.first_unstable_offset()
        return None if first is None else max(first, self._lso)

    def last_stable_offset(self, high_watermark: int) -> int:
        first = self.first_unstable_offset()
        return high_watermark if first is None else min(first, high_watermark)

    def on_high_watermark(self, high_watermark: int) -> None:
        """The high watermark moved: transactions whose marker is below it stop holding the LSO back.
        (``flush`` already does this up to the durable offset.)"""
        if not self._psm.unreplicated:  # nothing to release (the common case, asked on every append)
            return
        with self._lock:
            self._psm.on_high_watermark(high_watermark)

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [fetch_offset, upper_bound_offset) for a READ_COMMITTED fetch:
        entries with last offset >= fetch_offset and first offset < upper_bound_offset, from the segment that
        holds ``fetch_offset`` on, stopping at the first entry whose LSO is >= ``upper_bound_offset``
        (Kafka's collectAbortedTransactions). Pass the offset after the last fetched batch as upper bound."""
        segs = self._segments
        i = max(bisect_right(self._bases, fetch_offset) - 1, 0)
        out: list[AbortedTxn] = []
        for seg in segs[i:]:
            idx = seg.companions.get(TXN_INDEX_SUFFIX)
            if idx is not None and idx.collect(fetch_offset, upper_bound_offset, out):  # type: ignore[attr-defined]
                break
        return out

    def producer_states(self) -> list[ActiveProducer]:
        """Every producer id with state here (DescribeProducers)."""
        with self._lock:
            return self._psm.active_producers()

    def ongoing_transactions(self) -> list[TxnMetadata]:
        """(producer id, first offset) of every transaction ongoing on this partition, by first offset."""
        with self._lock:
            return self._psm.ongoing_transactions()

    def expire_producers(self, now_ms: int, producer_id_expiration_ms: int) -> list[int]:
        """Forget producers idle for ``producer_id_expiration_ms`` or more with no ongoing transaction."""
        with self._lock:
            gone = self._psm.expire(now_ms, producer_id_expiration_ms)
        if gone:
            log.info("%s: expired %d producer id(s)", self.name, len(gone))
        return gone

    def take_producer_snapshot(self) -> None:
        with self._lock:
            self._take_snapshot(sync=True)

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
            return self._roll_locked()

    def _roll_locked(self) -> Segment:
        old = self._segments[-1]
        old.on_become_inactive()
        if not old.dirty:  # its indexes still need an fsync before the recovery point may pass it
            old.dirty = True
            self._dirty.append(old)
        new = self._new_segment(self._leo)
        self._segments = self._segments + [new]
        self._bases = self._bases + [new.base_offset]
        self._dir_dirty = True
        self._take_snapshot(sync=False)
        for hook in self.on_roll:
            hook(old, new)
        return new

    # ================================================================ flush
    def flush(self) -> int:
        """fdatasync everything appended so far; return the new durable offset. Safe from any thread."""
        with self._flush_lock:
            with self._lock:
                if self.closed:
                    return self._durable
                end = self._leo
                segs, self._dirty = self._dirty, []
                active = self._segments[-1]
                active.offset_index.write_pending()
                active.time_index.write_pending()
                jobs: list[tuple[int, list[int]]] = []
                sizes = [(s.log_path, s.size) for s in segs] if _fsync_trace else []
                for s in segs:
                    s.dirty = False
                    idx_fds: list[int] = []
                    if s is not active:
                        idx_fds = [os.dup(s.offset_index._open_fd()), os.dup(s.time_index._open_fd())]
                        txn_idx = s.companions.get(TXN_INDEX_SUFFIX)
                        txn_fd = txn_idx.sync_fd() if txn_idx is not None else None  # type: ignore[attr-defined]
                        if txn_fd is not None:
                            idx_fds.append(txn_fd)
                    jobs.append((os.dup(s.fd), idx_fds))
                dir_dirty, self._dir_dirty = self._dir_dirty, False
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
                if sizes:
                    _trace_fsync(sizes)
            except OSError as e:
                with self._lock:
                    self._dir_dirty = self._dir_dirty or dir_dirty
                raise KafkaStorageError(f"fsync of {self.name} failed: {e}; data above offset "
                                        f"{self._durable} is not durable") from e
            finally:
                for fd, idx_fds in jobs:
                    os.close(fd)
                    for i in idx_fds:
                        os.close(i)
            with self._lock:
                self._durable = max(self._durable, end)
                self._psm.on_high_watermark(self._durable)
                self.last_flush_ms = self.clock.wall_ms()
                advance = rp > self._recovery_point
                if advance:
                    self._recovery_point = rp
            if advance:
                self._write_checkpoint()
            return self._durable

    # ================================================================ read
    def _check_range(self, offset: int) -> None:
        if offset < self._lso or offset > self._leo:
            raise OffsetOutOfRangeError(self.topic, self.partition, offset, self._lso, self._leo)

    def read(self, offset: int, max_bytes: int, max_offset: int, *, min_one_batch: bool = True) -> ReadResult:
        """Whole batches from the one containing ``offset``, each with last offset < ``max_offset``, up to
        ``max_bytes`` (the first batch is returned whole anyway when ``min_one_batch``, KIP-74)."""
        self._check_range(offset)
        if offset >= self._leo or offset >= max_offset:
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

    def iter_batches(self, from_offset: int = 0, *, chunk_bytes: int = 1 << 20) -> Iterator[tuple[BatchHeader, bytes]]:
        """(header, batch bytes) for every batch from the one containing ``from_offset`` to the current end."""
        offset = max(from_offset, self._lso)
        end = self._leo
        while offset < end:
            try:
                res = self.read(offset, chunk_bytes, end)
            except OffsetOutOfRangeError:  # log start moved past us (retention): continue from there
                offset = self._lso
                continue
            if not res.size:
                return
            for chunk in res.records:
                pos = 0
                while pos < len(chunk):
                    h = parse_batch_header(chunk, pos)
                    yield h, bytes(chunk[pos:pos + h.size])
                    pos += h.size
                    offset = h.next_offset

    # ================================================================ timestamps
    def offset_for_timestamp(self, ts_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``ts_ms``; None if there is none.

        Only the one batch that holds the answer is decoded (decompressed if needed).
        """
        lso = self._lso
        for seg in self._segments:
            if seg.max_timestamp < ts_ms or seg.next_offset <= lso or seg.closed:
                continue
            _, t_off = seg.time_index.lookup(ts_ms)
            pos = seg.find_position(max(t_off, lso))
            try:
                for h in seg.scan(pos, check_crc=False, end=seg.size):
                    if h.last_offset < lso or h.max_timestamp < ts_ms:
                        continue
                    return self._first_record_at(seg, h, ts_ms, lso)
            except CorruptRecordError:  # pragma: no cover - recovery keeps segments well formed
                continue
        return None

    def max_timestamp_and_offset(self) -> tuple[int, int]:
        """(max timestamp, offset of the first record carrying it) over the log; (-1, -1) if no timestamps."""
        best: Segment | None = None
        for seg in self._segments:
            if seg.max_timestamp >= 0 and seg.next_offset > self._lso and (
                    best is None or seg.max_timestamp > best.max_timestamp):
                best = seg
        if best is None:
            return -1, -1
        ts = best.max_timestamp
        pos = best.find_position(best.offset_of_max_timestamp)
        for h in best.scan(pos, check_crc=False, end=best.size):
            if h.max_timestamp == ts and h.last_offset >= self._lso:
                off, rts = self._first_record_at(best, h, ts, self._lso)
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

    # ================================================================ deletion
    def _delete_oldest_locked(self) -> Segment:
        seg = self._segments[0]
        self._segments = self._segments[1:]
        self._bases = self._bases[1:]
        if seg.dirty:
            self._dirty = [s for s in self._dirty if s is not seg]
        seg.delete()
        return seg

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: make ``offset`` the log start offset; delete segments wholly below it. Returns it."""
        with self._lock:
            if offset > self._leo or offset < 0:
                raise OffsetOutOfRangeError(self.topic, self.partition, offset, self._lso, self._leo)
            if offset <= self._lso:
                return self._lso
            self._lso = offset
            self._write_checkpoint()
            self._on_log_start_moved()
            if self._segments[-1].next_offset <= offset and self._segments[-1].size:
                self._roll_locked()
            n = 0
            while len(self._segments) > 1 and self._segments[1].base_offset <= offset:
                self._delete_oldest_locked()
                n += 1
            if n:
                log.info("%s: log start offset now %d, deleted %d segment(s)", self.name, offset, n)
            return self._lso

    def apply_retention(self, now_ms: int) -> int:
        """Delete the oldest inactive segments past retention.ms (by newest timestamp) or retention.bytes."""
        c = self.config
        if not c.delete_enabled:
            return 0
        deleted = 0
        with self._lock:
            if self.closed:
                return 0
            if c.retention_ms >= 0:
                while len(self._segments) > 1:
                    seg = self._segments[0]
                    newest = seg.max_timestamp if seg.max_timestamp >= 0 else _mtime_ms(seg)
                    if now_ms - newest <= c.retention_ms:
                        break
                    self._delete_oldest_locked()
                    deleted += 1
            if c.retention_bytes >= 0:
                excess = sum(s.size for s in self._segments) - c.retention_bytes
                while len(self._segments) > 1 and excess - self._segments[0].size >= 0:
                    excess -= self._delete_oldest_locked().size
                    deleted += 1
            if deleted:
                self._lso = max(self._lso, self._segments[0].base_offset)
                self._write_checkpoint()
                self._on_log_start_moved()
        return deleted

    def _on_log_start_moved(self) -> None:
        gone = self._psm.on_log_start_offset(self._lso)
        if gone:
            log.info("%s: log start offset %d: dropped %d producer id(s) whose batches were all deleted",
                     self.name, self._lso, len(gone))
        try:
            self._psm.delete_snapshots(below=self._lso)
        except OSError as e:  # pragma: no cover
            log.warning("%s: cannot delete old producer snapshots: %s", self.name, e)

    # ================================================================ compaction (see cleaner.py)
    def needs_cleaning(self, now_ms: int) -> bool:
        """Whether the log cleaner should compact this log now (compact policy and dirty enough). Also closes
        segments the cleaner replaced more than ``file.delete.delay.ms`` ago (their files are already unlinked)."""
        if self._retired:
            with self._lock:
                self._close_retired(self.clock.monotonic_ms() - self.config.file_delete_delay_ms)
        return _needs_cleaning(self, now_ms)

    def cleaner_snapshot(self) -> tuple[list[Segment], int, dict[int, tuple[int, int]], dict[int, int]]:
        """For the cleaner, atomically: (segments, log start offset, producer id -> (last data offset or -1,
        epoch), id(segment) -> a duplicated fd of every inactive segment). The caller closes the fds."""
        with self._lock:
            if self.closed:
                raise KafkaStorageError(f"the log of {self.name} is closed")
            segs = list(self._segments)
            producers = {pid: (e.last_data_offset, e.producer_epoch) for pid, e in self._psm.producers.items()}
            fds: dict[int, int] = {}
            try:
                for s in segs[:-1]:
                    fds[id(s)] = os.dup(s.fd)
            except OSError:
                for fd in fds.values():
                    os.close(fd)
                raise
            return segs, self._lso, producers, fds

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
                new = Segment(self.directory, base, index_interval_bytes=self.config.index_interval_bytes,
                              segment_index_bytes=self.config.segment_index_bytes, created_ms=self.clock.wall_ms(),
                              new_file=False)
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
            self._close_retired(now - self.config.file_delete_delay_ms)
            return new

    def _close_retired(self, retired_before: int) -> None:
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

    # ================================================================ lifecycle
    def update_config(self, config: LogConfig) -> None:
        with self._lock:
            self.config = config
            for s in self._segments:
                s.index_interval_bytes = config.index_interval_bytes

    def _close_segments(self) -> None:
        for s in self._segments:
            s.close()
        self._close_retired(2**63 - 1)

    def close(self) -> None:
        """Flush, write final index entries and the checkpoint, close every file."""
        if self.closed:
            return
        self.flush()
        with self._lock:
            active = self._segments[-1]
            active.time_index.maybe_append(active.max_timestamp, active.offset_of_max_timestamp)
            active.flush_indexes()
            self._recovery_point = max(self._recovery_point, active.base_offset)
            self._write_checkpoint()
            self._take_snapshot(sync=True)
            self.closed = True
            self._close_segments()

    def close_without_flush(self) -> None:
        """Close every file; further appends fail. For a log about to be deleted."""
        with self._lock:
            if not self.closed:
                self.closed = True
                self._close_segments()

    def delete(self) -> None:
        """Close without flushing and remove the partition folder."""
        self.close_without_flush()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __repr__(self) -> str:
        return f"PartitionLog({self.name}, start={self._lso}, end={self._leo}, durable={self._durable})"


def _mtime_ms(seg: Segment) -> int:
    try:
        return int(os.fstat(seg.fd).st_mtime * 1000)
    except OSError:
        return 0
