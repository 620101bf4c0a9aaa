"""The durable log of one partition: ``<data_dir>/<topic>-<partition>/`` (Kafka's ``UnifiedLog``).

A :class:`PartitionLog` owns a :class:`~oncelog.storage.local_log.LocalLog` (segments, append, roll, flush, read)
and adds what is more than bytes in segments: offsets assigned on append, the log start offset and
``partition.checkpoint``, producer state (idempotence and transactions), the aborted-transaction indexes, the
leader-epoch cache (leader_epoch.py), the high watermark, retention and DeleteRecords. Opening one runs
:class:`~oncelog.storage.loader.LogLoader` (recovery). What a replica uses of it, leader or follower (appends
as leader and as follower, truncation, leader epochs, the high watermark), is the ``ReplicaLog`` protocol
(interface.py).

Threading: ``append``, ``read``, ``roll``, retention and DeleteRecords run on one thread (the broker's event
loop); ``flush`` may run on any thread concurrently with them. Shared state is guarded by ``_lock`` (shared
with the LocalLog). The log cleaner (cleaner.py) runs on a worker thread the same way: it reads inactive segments
through duplicated descriptors (``cleaner_snapshot``) and swaps cleaned segments in under the lock
(``replace_segments``).

Crash safety: data below ``durable_offset`` has been fdatasync'ed; see loader.py for what opening recovers.

Idempotence and transactions (see producer_state.py): ``append`` validates batches that carry a producer id
against the :class:`ProducerStateManager` after offsets are assigned and before anything is written, and
commits the pending state after the write; batches without a producer id cost one comparison. Transaction
markers (origin ``coordinator``) end transactions; an ABORT adds an entry to the ``.txnindex`` of the segment
the marker lands in. Producer state is snapshotted (``<offset>.snapshot``) at every roll and at a clean close.
"""

from __future__ import annotations

import logging
import shutil
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from oncelog.clock import Clock
from oncelog.protocol.records import (
    BatchHeader,
    TimestampType,
    control_batch,
    parse_batch_header,
    set_max_timestamp_log_append,
)

from .cleaner import CleanerState, truncate_cleaner_checkpoint
from .cleaner import needs_cleaning as _needs_cleaning
from .config import LogConfig
from .errors import KafkaStorageError, OffsetOutOfRangeError, UnexpectedAppendOffsetError
from .files import write_atomic
from .interface import AppendResult, HighWatermarkRule
from .leader_epoch import LeaderEpochCache
from .loader import CHECKPOINT_FILE, LogLoader, encode_checkpoint, rebuild_producer_state
from .local_log import LocalLog, ReadResult, RollHook
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
from .segment import Segment
from .txn_index import TXN_INDEX_SUFFIX, AbortedTxn, TransactionIndex

__all__ = ["CHECKPOINT_FILE", "ORIGIN_CLIENT", "ORIGIN_COORDINATOR", "AppendResult", "PartitionLog", "ReadResult",
           "RollHook"]

log = logging.getLogger("oncelog.storage")
_BASE_OFFSET, _LEADER_EPOCH = struct.Struct(">q"), struct.Struct(">i")  # a batch's baseOffset, its partitionLeaderEpoch


class PartitionLog:
    def __init__(self, directory: Path, topic: str, partition: int, config: LogConfig, clock: Clock) -> None:
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self.clock = clock
        self._lock = threading.RLock()
        self._ckpt_lock = threading.Lock()
        self._lso = 0
        self._ckpt_written: tuple[int, int] | None = None
        self._psm = ProducerStateManager(self.name, self.directory)
        self._local: LocalLog  # set by open()
        self._epochs: LeaderEpochCache  # set by open()
        self._hw = 0
        self.high_watermark_rule = HighWatermarkRule.DURABLE
        self.cleaner_state: CleanerState | None = None  # loaded by the cleaner (cleaner.py) on first use
        #: test hook called with a step name during a truncation; raising there simulates a crash at that point
        self.fault: Callable[[str], None] | None = None

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    # ================================================================ open
    @classmethod
    def open(cls, directory: Path, topic: str, partition: int, config: LogConfig, clock: Clock, *,
             clean_shutdown: bool, high_watermark: int | None = None, defer_sync: bool = False) -> PartitionLog:
        """Open (create, or load and recover) the log. The high watermark starts at the log end (everything
        loaded is durable), or at ``high_watermark`` if given (a replica's checkpointed value; clamped to the
        log): transactions whose marker is above it keep holding the last stable offset back."""
        self = cls(Path(directory), topic, partition, config, clock)
        try:
            loaded = LogLoader(self.directory, self.name, config, clock, self._psm).load(clean_shutdown, defer_sync)
        except OSError as e:
            raise KafkaStorageError(
                f"cannot open the log of {self.name} in {self.directory}: {e}; check the disk and permissions"
            ) from e
        self._local = LocalLog(self.directory, self.name, config, clock, self._lock, loaded.segments,
                               recovery_point=loaded.recovery_point, unsynced=loaded.unsynced)
        self._local.on_roll.append(self._snapshot_on_roll)
        self._lso = loaded.log_start_offset
        self._ckpt_written = loaded.checkpoint
        self._epochs = loaded.epochs
        leo = self._local.log_end_offset
        self._hw = leo if high_watermark is None else min(max(high_watermark, self._lso), leo)
        self._psm.on_high_watermark(self._hw)
        try:
            self._write_checkpoint(durable=not loaded.unsynced)
            if loaded.replayed:
                self._take_snapshot(sync=False)
        except OSError as e:
            self._local.close_segments()
            raise KafkaStorageError(
                f"cannot open the log of {self.name} in {self.directory}: {e}; check the disk and permissions"
            ) from e
        return self

    def _snapshot_on_roll(self, old: Segment, new: Segment) -> None:
        self._take_snapshot(sync=False)

    def _take_snapshot(self, *, sync: bool) -> None:
        try:
            self._psm.take_snapshot(self._local.log_end_offset, sync=sync,
                                    keep=(self._local.recovery_point, self._local.active_segment.base_offset))
        except OSError as e:
            log.warning("%s: cannot write the producer state snapshot at offset %d: %s", self.name,
                        self._local.log_end_offset, e)

    def _write_checkpoint(self, durable: bool = True) -> None:
        with self._ckpt_lock:
            state = (self._lso, self._local.recovery_point)
            if state == self._ckpt_written:
                return
            write_atomic(self.directory / CHECKPOINT_FILE, encode_checkpoint(*state), durable=durable)
            self._ckpt_written = state

    # ================================================================ properties
    @property
    def log_start_offset(self) -> int:
        return self._lso

    @property
    def log_end_offset(self) -> int:
        return self._local.log_end_offset

    @property
    def durable_offset(self) -> int:
        return self._local.durable_offset

    @property
    def recovery_point(self) -> int:
        return self._local.recovery_point

    @property
    def unflushed_messages(self) -> int:
        return self._local.log_end_offset - self._local.durable_offset

    @property
    def last_flush_ms(self) -> int:
        return self._local.last_flush_ms

    @property
    def closed(self) -> bool:
        return self._local.closed

    @property
    def on_roll(self) -> list[RollHook]:
        """Hooks called as hook(old_segment, new_segment) under the log lock when a segment is rolled."""
        return self._local.on_roll

    @property
    def segments(self) -> list[Segment]:
        return self._local.segments

    @property
    def active_segment(self) -> Segment:
        return self._local.active_segment

    @property
    def size_in_bytes(self) -> int:
        return self._local.size_in_bytes

    # ================================================================ append
    def append(self, payload: bytearray, headers: list[BatchHeader], *,
               log_append_time_ms: int | None = None, origin: str = ORIGIN_CLIENT,
               markers: dict[int, tuple[bool, int]] | None = None, leader_epoch: int | None = None) -> AppendResult:
        """As leader: assign offsets to the (already validated) batches in ``payload`` and write them in one call
        (Kafka's appendAsLeader). ``leader_epoch``: stamped on every batch as its partitionLeaderEpoch and recorded
        in the leader-epoch cache when it is new (None: batches keep theirs).

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
            local = self._local
            if local.closed:
                raise KafkaStorageError(f"the log of {self.name} is closed; the partition was deleted or shut down")
            first = off = local.log_end_offset
            max_ts, max_ts_off = -1, first
            if log_append_time_ms is not None:
                for h in headers:
                    if h.timestamp_type != TimestampType.LOG_APPEND_TIME or h.max_timestamp != log_append_time_ms:
                        set_max_timestamp_log_append(payload, h.position, h.size, log_append_time_ms)
                        h.attributes |= 0x08
                        h.max_timestamp = log_append_time_ms
            has_pid = False
            for h in headers:  # (set_base_offset and set_partition_leader_epoch, inlined: once per append)
                _BASE_OFFSET.pack_into(payload, h.position, off)
                h.base_offset = off
                off += h.last_offset_delta + 1
                if h.max_timestamp > max_ts:
                    max_ts, max_ts_off = h.max_timestamp, off - 1
                if h.producer_id >= 0:
                    has_pid = True
                if leader_epoch is not None:
                    _LEADER_EPOCH.pack_into(payload, h.position + 12, leader_epoch)
                    h.partition_leader_epoch = leader_epoch
            pending = nxt = None
            if has_pid:
                if origin == ORIGIN_CLIENT and len(headers) == 1:
                    nxt = self._psm.prepare_next_batch(headers[0])
                if nxt is None:
                    pending = self._psm.prepare_payload(payload, headers, origin, markers)
            if leader_epoch is None:
                self._assign_epochs(headers)
            elif leader_epoch != self._epochs.latest_epoch:  # (every batch carries it: the first one starts it)
                self._epochs.assign(leader_epoch, first)
            seg = local.append(payload, headers, off, max_ts)
            if nxt is not None:
                self._psm.commit_next_batch(nxt)
            elif pending is not None:
                self._commit_producer_state(seg, pending[0], pending[1])
            if self.high_watermark_rule is HighWatermarkRule.LOG_END:
                self._set_hw(off)
        if log_append_time_ms is not None:
            max_ts_off = first  # every record carries the same timestamp: the first one has it
        return AppendResult(first, off - 1, -1 if log_append_time_ms is None else log_append_time_ms,
                            max_ts, max_ts_off)

    def append_as_follower(self, payload: bytearray, headers: list[BatchHeader]) -> AppendResult:
        """As follower (Kafka's appendAsFollower): write batches whose offsets, timestamps and leader epochs the
        leader assigned, as they are. The first batch must not start below the log end and each batch must start
        after the previous one (gaps are fine: the leader's log may be compacted); otherwise
        UnexpectedAppendOffsetError and nothing is written. Producer state is updated with replication semantics
        (no sequence or epoch validation, markers complete transactions, aborted ones go to the ``.txnindex``)
        and a newer leader epoch is recorded in the cache. The high watermark is not moved (the leader's comes
        with the fetch: ``update_high_watermark``)."""
        if not headers:
            raise ValueError("append_as_follower needs at least one batch")
        with self._lock:
            local = self._local
            if local.closed:
                raise KafkaStorageError(f"the log of {self.name} is closed; the partition was deleted or shut down")
            leo = local.log_end_offset
            expect = leo
            max_ts, max_ts_off = -1, headers[0].base_offset
            has_pid = False
            for h in headers:
                if h.base_offset < expect:
                    raise UnexpectedAppendOffsetError(
                        f"follower append to {self.name}: batch at offset {h.base_offset} does not follow "
                        f"{'the log end' if expect == leo else 'the previous batch, which ends at'} "
                        f"{expect}; nothing was written, fetch again from the log end {leo}",
                        h.base_offset, leo)
                expect = h.next_offset
                if h.max_timestamp > max_ts:
                    max_ts, max_ts_off = h.max_timestamp, h.last_offset
                if h.producer_id >= 0:
                    has_pid = True
            pending = self._psm.prepare_payload(payload, headers, ORIGIN_REPLICATION) if has_pid else None
            self._assign_epochs(headers)
            seg = local.append(payload, headers, expect, max_ts, first_offset=headers[0].base_offset)
            if pending is not None:
                self._commit_producer_state(seg, pending[0], pending[1])
        return AppendResult(headers[0].base_offset, expect - 1, -1, max_ts, max_ts_off)

    def _assign_epochs(self, headers: list[BatchHeader]) -> None:
        """Record the leader epoch of every batch that carries a new one (Kafka's maybeAssignEpochStartOffset);
        batches without one (-1) are ignored. Called before the data is written, as in Kafka: after a crash an
        entry beyond the log end is dropped on load."""
        epochs = self._epochs
        latest = epochs.latest_epoch
        for h in headers:
            epoch = h.partition_leader_epoch
            if epoch >= 0 and epoch != latest:
                epochs.assign(epoch, h.base_offset)
                latest = epochs.latest_epoch

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
                      timestamp_ms: int, *, log_append_time_ms: int | None = None,
                      leader_epoch: int | None = None) -> AppendResult:
        """Write a COMMIT/ABORT transaction marker for ``producer_id`` (origin coordinator: WriteTxnMarkers)."""
        buf, header = control_batch(producer_id, producer_epoch, commit, coordinator_epoch, timestamp_ms)
        return self.append(buf, [header], log_append_time_ms=log_append_time_ms,
                           origin=ORIGIN_COORDINATOR, markers={0: (commit, coordinator_epoch)},
                           leader_epoch=leader_epoch)

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

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [fetch_offset, upper_bound_offset) for a READ_COMMITTED fetch:
        entries with last offset >= fetch_offset and first offset < upper_bound_offset, from the segment that
        holds ``fetch_offset`` on, stopping at the first entry whose LSO is >= ``upper_bound_offset``
        (Kafka's collectAbortedTransactions). Pass the offset after the last fetched batch as upper bound."""
        out: list[AbortedTxn] = []
        for seg in self._local.segments_from(fetch_offset):
            idx = seg.companions.get(TXN_INDEX_SUFFIX)
            if isinstance(idx, TransactionIndex) and idx.collect(fetch_offset, upper_bound_offset, out):
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

    def has_ongoing_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        """Whether ``producer_id`` has a transaction ongoing here at ``producer_epoch`` (KIP-890)."""
        e = self._psm.producers.get(producer_id)
        return e is not None and e.producer_epoch == producer_epoch and e.current_txn_first_offset is not None

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

    # ================================================================ high watermark
    @property
    def high_watermark(self) -> int:
        return self._hw

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark, clamped to [log start, log end] (Kafka's updateHighWatermark: a follower
        taking the leader's value, or a leader initialising it; it may go down). Transactions whose marker is
        below it stop holding the last stable offset back. Returns the new value."""
        with self._lock:
            hw = min(max(offset, self._lso), self._local.log_end_offset)
            self._hw = hw
            self._psm.on_high_watermark(hw)
            return hw

    def maybe_increment_high_watermark(self, offset: int) -> bool:
        """Move the high watermark up to ``offset`` if it is higher (Kafka's maybeIncrementHighWatermark: a
        leader after its followers' fetches). Raises ValueError above the log end. True if it moved."""
        if offset <= self._hw:
            return False
        with self._lock:
            if offset > self._local.log_end_offset:
                raise ValueError(f"high watermark {offset} of {self.name} would pass the log end "
                                 f"{self._local.log_end_offset}")
            return self._set_hw(offset)

    def _set_hw(self, offset: int) -> bool:
        """Under the lock: raise the high watermark to ``offset`` (<= log end) if higher."""
        if offset <= self._hw:
            return False
        self._hw = offset
        if self._psm.unreplicated:  # nothing to release in the common case
            self._psm.on_high_watermark(offset)
        return True

    # ================================================================ leader epochs
    @property
    def latest_epoch(self) -> int | None:
        """The newest leader epoch with an entry in the leader-epoch cache (None: none yet)."""
        return self._epochs.latest_epoch

    @property
    def leader_epoch_cache(self) -> LeaderEpochCache:
        return self._epochs

    def assign_leader_epoch(self, epoch: int, start_offset: int) -> None:
        """Record that the leader of ``epoch`` writes from ``start_offset`` on (a new leader does it at its log
        end as it takes over, Kafka's maybeAssignEpochStartOffset); a no-op if already known. The checkpoint file
        is written and made durable by the next flush (KAFKA-15046 takes the fsync off this path in Kafka): a broker
        taking over thousands of partitions at once neither waits for two fsyncs each (10,000 partitions: ~5 s of
        a failover) nor writes a file each (~0.4 ms a partition on its event loop)."""
        with self._lock:
            self._epochs.assign(epoch, start_offset, durable=False)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) as OffsetForLeaderEpoch answers it (LeaderEpochCache.end_offset_for at the log
        end); (-1, -1) when unknown."""
        with self._lock:
            return self._epochs.end_offset_for(epoch, self._local.log_end_offset)

    # ================================================================ roll / flush
    def roll(self) -> Segment:
        """Start a new active segment at the log end (no-op if the active segment is empty). Returns it."""
        return self._local.roll()

    def flush(self) -> int:
        """fdatasync everything appended so far; return the new durable offset. Safe from any thread. Under
        HighWatermarkRule.DURABLE the high watermark follows."""
        with self._lock:
            self._epochs.sync()  # an epoch assigned without fsync, before anything of it counts as durable
        durable, advanced = self._local.flush()
        if self.high_watermark_rule is HighWatermarkRule.DURABLE:
            with self._lock:
                if not self._local.closed:
                    self._set_hw(min(durable, self._local.log_end_offset))
        if advanced:
            self._write_checkpoint()
        return durable

    # ================================================================ truncation (KIP-101 / KIP-279)
    def _fault(self, step: str) -> None:
        if self.fault is not None:
            self.fault(step)

    def truncate_to(self, offset: int) -> bool:
        """Remove everything at or after ``offset`` (Kafka's UnifiedLog.truncateTo: a follower dropping a tail
        that diverges from its leader). A batch straddling ``offset`` goes whole (the log may end below it);
        segments, offset/time indexes, ``.txnindex`` entries and producer snapshots above the new end go; the
        producer state is rebuilt from the newest snapshot below it, the leader-epoch cache truncated from the
        end, the high watermark lowered to the new end if above it. If the log starts above ``offset``
        it is emptied and restarted there (truncate_fully_and_start_at). Crash-safe: the recovery point is
        lowered first, so a crash in the middle leaves a log that loads (a prefix of the old one, rescanned).
        Returns whether anything was removed."""
        if offset < 0:
            raise ValueError(f"cannot truncate {self.name} to a negative offset {offset}")
        local = self._local
        with local.truncation_lock, self._lock:
            if local.closed:
                raise KafkaStorageError(f"the log of {self.name} is closed; the partition was deleted or shut down")
            leo = local.log_end_offset
            if offset >= leo:
                # a leader may have recorded its epoch at the log end and written nothing before losing it
                self._epochs.truncate_from_end(leo)
                return False
            if local.segments[0].base_offset > offset:
                self._truncate_fully_locked(offset)
                return True
            try:
                local.lower_recovery_point(local.segments_from(offset)[0].base_offset)
                self._write_checkpoint()
                self._fault("checkpoint")
                gone = local.truncate_to(offset, self._fault)
                new_end = local.log_end_offset
                self._epochs.truncate_from_end(new_end)
                self._fault("epochs")
                self._lso = min(self._lso, new_end)
                self._psm.clear()
                rebuild_producer_state(self.name, self._psm, local.segments, self._lso, set())
                self._write_checkpoint()
                self._hw = min(self._hw, new_end)
                self._psm.on_high_watermark(self._hw)
                truncate_cleaner_checkpoint(self, new_end)
            except OSError as e:
                raise KafkaStorageError(f"truncation of {self.name} to offset {offset} failed: {e}; restart the "
                                        "broker to recover the log") from e
        log.info("%s: truncated to offset %d (log end was %d, now %d; %d segment(s) deleted)", self.name, offset, leo,
                 new_end, len(gone))
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete everything and restart the log empty at ``offset``, which becomes its log start (Kafka's
        truncateFullyAndStartAt: a follower whose leader's log start moved past its end). Producer state,
        snapshots and the leader-epoch cache are cleared. A crash in the middle leaves a prefix of the old log
        (or an empty one), which loads."""
        if offset < 0:
            raise ValueError(f"cannot restart {self.name} at a negative offset {offset}")
        local = self._local
        with local.truncation_lock, self._lock:
            if local.closed:
                raise KafkaStorageError(f"the log of {self.name} is closed; the partition was deleted or shut down")
            self._truncate_fully_locked(offset)

    def _truncate_fully_locked(self, offset: int) -> None:
        old_end = self._local.log_end_offset
        try:
            self._psm.clear()
            self._psm.delete_snapshots(above=-1)
            self._psm.last_snap_offset = -1
            self._fault("snapshots_deleted")
            self._local.truncate_fully_and_start_at(offset, self._fault)
            self._epochs.clear()
            self._fault("epochs")
            self._lso = offset
            self._write_checkpoint()
            self._hw = offset
            truncate_cleaner_checkpoint(self, offset)
        except OSError as e:
            raise KafkaStorageError(f"emptying {self.name} to restart it at offset {offset} failed: {e}; restart "
                                    "the broker to recover the log") from e
        log.info("%s: emptied (log end was %d) and restarted at offset %d", self.name, old_end, offset)

    # ================================================================ read
    def _check_range(self, offset: int) -> None:
        if offset < self._lso or offset > self._local.log_end_offset:
            raise OffsetOutOfRangeError(self.topic, self.partition, offset, self._lso, self._local.log_end_offset)

    def read(self, offset: int, max_bytes: int, max_offset: int, *, min_one_batch: bool = True) -> ReadResult:
        """Whole batches from the one containing ``offset``, each with last offset < ``max_offset``, up to
        ``max_bytes`` (the first batch is returned whole anyway when ``min_one_batch``, KIP-74)."""
        self._check_range(offset)
        return self._local.read(offset, max_bytes, max_offset, min_one_batch=min_one_batch)

    def iter_batches(self, from_offset: int = 0, *, chunk_bytes: int = 1 << 20) -> Iterator[tuple[BatchHeader, bytes]]:
        """(header, batch bytes) for every batch from the one containing ``from_offset`` to the current end."""
        offset = max(from_offset, self._lso)
        end = self._local.log_end_offset
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

    def offset_for_timestamp(self, ts_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``ts_ms``; None if there is none.

        Only the one batch that holds the answer is decoded (decompressed if needed).
        """
        return self._local.offset_for_timestamp(ts_ms, self._lso)

    def max_timestamp_and_offset(self) -> tuple[int, int]:
        """(max timestamp, offset of the first record carrying it) over the log; (-1, -1) if no timestamps."""
        return self._local.max_timestamp_and_offset(self._lso)

    # ================================================================ deletion
    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: make ``offset`` the log start offset; delete segments wholly below it. Returns it."""
        with self._lock:
            local = self._local
            if offset > local.log_end_offset or offset < 0:
                raise OffsetOutOfRangeError(self.topic, self.partition, offset, self._lso, local.log_end_offset)
            if offset <= self._lso:
                return self._lso
            self._lso = offset
            self._write_checkpoint()
            self._on_log_start_moved()
            n = local.delete_segments_below(offset)
            if n:
                log.info("%s: log start offset now %d, deleted %d segment(s)", self.name, offset, n)
            return self._lso

    def apply_retention(self, now_ms: int) -> int:
        """Delete the oldest inactive segments past retention.ms (by newest timestamp) or retention.bytes."""
        c = self.config
        if not c.delete_enabled:
            return 0
        with self._lock:
            local = self._local
            if local.closed:
                return 0
            deleted = local.delete_segments_past_retention(now_ms, c.retention_ms, c.retention_bytes)
            if deleted:
                self._lso = max(self._lso, local.segments[0].base_offset)
                self._write_checkpoint()
                self._on_log_start_moved()
        return deleted

    def _on_log_start_moved(self) -> None:
        if self._hw < self._lso:
            self._hw = self._lso
        self._epochs.truncate_from_start(self._lso)
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
        if self._local.has_retired:
            with self._lock:
                self._local.close_retired(self.clock.monotonic_ms() - self.config.file_delete_delay_ms)
        return _needs_cleaning(self, now_ms)

    def cleaner_snapshot(self) -> tuple[list[Segment], int, dict[int, tuple[int, int]], dict[int, int]]:
        """For the cleaner, atomically: (segments, log start offset, producer id -> (last data offset or -1,
        epoch), id(segment) -> a duplicated fd of every inactive segment). The caller closes the fds."""
        with self._lock:
            if self._local.closed:
                raise KafkaStorageError(f"the log of {self.name} is closed")
            producers = {pid: (e.last_data_offset, e.producer_epoch) for pid, e in self._psm.producers.items()}
            segs, fds = self._local.inactive_fds()
            return segs, self._lso, producers, fds

    def replace_segments(self, old: list[Segment], install: Callable[[], None]) -> Segment | None:
        """Cleaner swap (see LocalLog.replace_segments): None if the log changed and nothing was done."""
        return self._local.replace_segments(old, install)

    # ================================================================ lifecycle
    def update_config(self, config: LogConfig) -> None:
        with self._lock:
            self.config = config
            self._local.update_config(config)

    def close(self) -> None:
        """Flush, write final index entries and the checkpoint, close every file."""
        if self._local.closed:
            return
        self.flush()
        with self._lock:
            self._local.close_active_for_shutdown()
            self._write_checkpoint()
            self._take_snapshot(sync=True)
            self._local.close_segments()

    def close_without_flush(self) -> None:
        """Close every file; further appends fail. For a log about to be deleted."""
        with self._lock:
            if not self._local.closed:
                self._local.close_segments()

    def delete(self) -> None:
        """Close without flushing and remove the partition folder."""
        self.close_without_flush()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __repr__(self) -> str:
        return (f"PartitionLog({self.name}, start={self._lso}, end={self._local.log_end_offset}, "
                f"durable={self._local.durable_offset})")


if TYPE_CHECKING:
    from .interface import BrokerLog

    def _partition_log_is_a_broker_log(log: PartitionLog) -> BrokerLog:  # mypy checks PartitionLog conforms
        return log
