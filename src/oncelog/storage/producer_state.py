"""Producer state of one partition: what makes idempotent and transactional appends exactly-once.

Mirrors Kafka's ProducerStateManager / ProducerAppendInfo / ProducerStateEntry (Kafka 3.x/4.x behaviour,
transaction version 0/1 markers):

* Per producer id: epoch, the metadata of its last 5 batches (duplicate detection), the first offset of its
  ongoing transaction on this partition, the epoch of the coordinator that wrote its last marker, and the
  timestamp of its last write.
* Validation is two-phase. :meth:`ProducerStateManager.prepare` checks every batch of a partition payload
  against the committed state and returns pending :class:`ProducerAppendInfo` objects (plus the transactions
  the payload's markers complete) without changing anything; after the log write succeeded the caller commits
  them with :meth:`ProducerStateManager.update` and :meth:`ProducerStateManager.complete_txn`. One bad batch
  rejects the whole payload.
* Rules for client batches (origin ``client``), in Kafka's order:
    - duplicate of one of the producer's last 5 batches (same epoch, same first and last sequence) ->
      :class:`DuplicateSequenceError` carrying the original offsets (the broker answers success, writes nothing);
      but a transactional batch is a retry only of a batch of the same, still open transaction: one that matches
      a batch of a transaction already ended (by a marker of the same producer epoch) is a *reused* sequence
      (librdkafka's ``abort_transaction()`` purges records whose response timed out although they were written,
      and gives their sequences to the next transaction) -> :class:`InvalidTxnStateError`. Answering it as a
      duplicate would acknowledge records that were aborted, and the next commit would miss them. Kafka answers
      INVALID_TXN_STATE to a transactional batch outside an ongoing transaction (KIP-890's "Record was not part of
      an ongoing transaction"); librdkafka and the Java client take it as an abortable error (abort, then go on),
      where OUT_OF_ORDER_SEQUENCE_NUMBER at the head of the line is fatal for librdkafka's transactional producer;
    - epoch older than the producer's -> :class:`InvalidProducerEpochError`;
    - a newer epoch must start at sequence 0, else :class:`OutOfOrderSequenceError`;
    - same epoch: sequence must be last + 1 (int32 wrap: 0 follows 2147483647), else
      :class:`OutOfOrderSequenceError`; but a batch past a gap left by the producer's own batch that the broker
      refused before appending (a retriable error, :meth:`ProducerStateManager.note_refused`) gets
      :class:`SequenceAfterRefusedBatchError` (retriable): it was pipelined behind that batch, and an OOS would make
      librdkafka bump its epoch and re-send records that may already be written;
    - an unknown producer id is accepted at any sequence (Kafka >= 2.5, KIP-360: its state may have been
      removed by retention or expiry), so :class:`UnknownProducerIdError` is never raised;
    - a non-transactional batch while the producer has a transaction ongoing -> :class:`InvalidTxnStateError`;
      a transactional batch with none ongoing starts one at the batch's first offset.
  Batches written by a coordinator (origin ``coordinator``: group-coordinator offset commits, transaction
  markers) get only the epoch check; replayed batches (origin ``replication``) are never rejected.
* Markers (control batches): marker epoch older than the producer's -> :class:`InvalidProducerEpochError`;
  coordinator epoch older than the last one seen -> :class:`TransactionCoordinatorFencedError`. A marker for a
  producer with no ongoing transaction here is written and completes nothing. A completed transaction leaves
  the ongoing set and waits in the "unreplicated" set until the high watermark passes its marker.

Snapshots (``<20-digit offset>.snapshot``) store the full state at an offset (all 5 batch metadata per
producer, unlike Kafka which keeps only the last one, so duplicate detection survives a restart):

    int16 version (1) | uint32 CRC32C of the rest | int64 offset | int32 producer count | producers...
    producer: int64 id | int16 epoch | int32 coordinator epoch | int64 last timestamp
              | int64 current txn first offset (-1: none) | int8 batch count | batches...
    batch:    int32 last sequence | int64 last offset | int32 offset delta | int64 timestamp
"""

from __future__ import annotations

import logging
import struct
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import crc32c as _crc32c

from oncelog.protocol.records import ATTR_CONTROL, ATTR_TRANSACTIONAL, BatchHeader, parse_control_record

from .errors import (
    DuplicateSequenceError,
    InvalidProducerEpochError,
    SequenceAfterRefusedBatchError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from .files import write_atomic

__all__ = [
    "NUM_BATCHES_TO_RETAIN",
    "ORIGIN_CLIENT",
    "ORIGIN_COORDINATOR",
    "ORIGIN_REPLICATION",
    "SNAPSHOT_SUFFIX",
    "ActiveProducer",
    "BatchMetadata",
    "CompletedTxn",
    "CorruptSnapshotError",
    "ProducerAppendInfo",
    "ProducerStateEntry",
    "ProducerStateManager",
    "TxnMetadata",
    "snapshot_file_name",
]

log = logging.getLogger("oncelog.storage")

NUM_BATCHES_TO_RETAIN = 5
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
INT32_MAX = 0x7FFFFFFF

ORIGIN_CLIENT = "client"
ORIGIN_COORDINATOR = "coordinator"
ORIGIN_REPLICATION = "replication"

_SNAP_HEADER = struct.Struct(">hIqi")  # version, crc, offset, count
_SNAP_ENTRY = struct.Struct(">qhiqqb")
_SNAP_BATCH = struct.Struct(">iqiq")
_CRC_START = 6  # the CRC covers everything after version + crc


def snapshot_file_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def decrement_sequence(seq: int, decrement: int) -> int:
    """Kafka's DefaultRecordBatch.decrementSequence: sequences wrap from int32 max to 0."""
    if seq < decrement:
        return INT32_MAX - (decrement - seq) + 1
    return seq - decrement


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class CorruptSnapshotError(ValueError):
    """A producer snapshot file fails its CRC or does not parse."""


class BatchMetadata(NamedTuple):
    """One of the last batches of a producer."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


class CompletedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int  # offset of the marker
    is_aborted: bool


@dataclass(slots=True)
class TxnMetadata:
    producer_id: int
    first_offset: int
    last_offset: int | None = None  # marker offset once completed


@dataclass(frozen=True, slots=True)
class ActiveProducer:
    """What DescribeProducers reports for one producer (-1 where unknown)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


class ProducerStateEntry:
    """The committed state of one producer id on this partition."""

    __slots__ = ("batches", "coordinator_epoch", "current_txn_first_offset", "last_timestamp", "producer_epoch",
                 "producer_id")

    def __init__(self, producer_id: int, producer_epoch: int = -1, coordinator_epoch: int = -1,
                 last_timestamp: int = -1, current_txn_first_offset: int | None = None,
                 batches: Iterable[BatchMetadata] = ()) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.coordinator_epoch = coordinator_epoch
        self.last_timestamp = last_timestamp
        self.current_txn_first_offset = current_txn_first_offset
        self.batches: deque[BatchMetadata] = deque(batches, NUM_BATCHES_TO_RETAIN)

    @property
    def is_empty(self) -> bool:
        return not self.batches

    @property
    def first_seq(self) -> int:
        return self.batches[0].first_seq if self.batches else -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    @property
    def first_data_offset(self) -> int:
        return self.batches[0].first_offset if self.batches else -1

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for b in self.batches:
            if b.last_seq == last_seq and b.first_seq == first_seq:
                return b
        return None

    def in_open_txn(self, batch: BatchMetadata) -> bool:
        """Whether ``batch`` (one of :attr:`batches`) belongs to the producer's transaction still open here."""
        first = self.current_txn_first_offset
        return first is not None and batch.first_offset >= first

    def summary(self) -> ActiveProducer:
        txn = self.current_txn_first_offset
        return ActiveProducer(self.producer_id, self.producer_epoch, self.last_seq, self.last_timestamp,
                              self.coordinator_epoch, -1 if txn is None else txn)

    def as_tuple(self) -> tuple[int, int, int, int, int | None, tuple[BatchMetadata, ...]]:
        return (self.producer_id, self.producer_epoch, self.coordinator_epoch, self.last_timestamp,
                self.current_txn_first_offset, tuple(self.batches))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ProducerStateEntry) and self.as_tuple() == other.as_tuple()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (f"ProducerStateEntry(pid={self.producer_id}, epoch={self.producer_epoch}, "
                f"coordinator_epoch={self.coordinator_epoch}, last_ts={self.last_timestamp}, "
                f"txn_first_offset={self.current_txn_first_offset}, batches={list(self.batches)})")


class ProducerAppendInfo:
    """Pending changes of one producer for one partition payload (Kafka's ProducerAppendInfo).

    Starts from the committed entry (or an empty one for an unknown producer) and accumulates the validated
    batches; nothing is visible until :meth:`ProducerStateManager.update`.
    """

    __slots__ = ("batches", "coordinator_epoch", "current", "epoch", "last_timestamp", "origin", "partition",
                 "producer_id", "refused", "started_txns", "txn_first_offset")

    def __init__(self, partition: str, producer_id: int, current: ProducerStateEntry | None, origin: str,
                 refused: tuple[int, int] | None = None) -> None:
        self.partition = partition
        self.refused = refused  # (epoch, first sequence) of its batch last refused before the append
        self.producer_id = producer_id
        self.current = current
        self.origin = origin
        if current is None:
            self.epoch = self.coordinator_epoch = self.last_timestamp = -1
            self.txn_first_offset: int | None = None
        else:
            self.epoch = current.producer_epoch
            self.coordinator_epoch = current.coordinator_epoch
            self.last_timestamp = current.last_timestamp
            self.txn_first_offset = current.current_txn_first_offset
        self.batches: list[BatchMetadata] = []  # new batches of the current ``epoch``
        self.started_txns: list[int] = []

    def _check_epoch(self, epoch: int, offset: int, what: str) -> None:
        if epoch < self.epoch and self.origin != ORIGIN_REPLICATION:
            raise InvalidProducerEpochError(
                f"{what} of producer {self.producer_id} at offset {offset} in {self.partition} has epoch {epoch}, "
                f"older than the last seen epoch {self.epoch}: the producer was fenced by a newer instance "
                f"(or its transaction was aborted); it must abort and re-initialise",
                self.producer_id,
            )

    def _check_sequence(self, epoch: int, first_seq: int, offset: int) -> None:
        if epoch != self.epoch:
            if first_seq != 0 and self.epoch != -1:
                raise OutOfOrderSequenceError(
                    f"invalid sequence number for new epoch {epoch} of producer {self.producer_id} at offset "
                    f"{offset} in {self.partition}: {first_seq} (a new epoch must start at sequence 0; "
                    f"current epoch {self.epoch})",
                    self.producer_id,
                )
            return
        cur = self.current
        if self.batches:
            last_seq = self.batches[-1].last_seq
        elif cur is not None and epoch == cur.producer_epoch:
            last_seq = cur.last_seq
        else:
            last_seq = -1
        if cur is not None and cur.producer_epoch != -1 and not in_sequence(last_seq, first_seq):
            expected = 0 if last_seq == INT32_MAX else last_seq + 1
            if self.refused == (epoch, expected) and first_seq > expected:
                raise SequenceAfterRefusedBatchError(
                    f"batch of producer {self.producer_id} (epoch {epoch}) at sequence {first_seq} in "
                    f"{self.partition} follows its batch at sequence {expected}, which was refused before the "
                    f"append (retriable): retry them in order", self.producer_id)
            raise OutOfOrderSequenceError(
                f"out of order sequence number for producer {self.producer_id} (epoch {epoch}) at offset {offset} "
                f"in {self.partition}: {first_seq} (incoming), {last_seq} (last appended); expected "
                f"{0 if last_seq == INT32_MAX else last_seq + 1}",
                self.producer_id,
            )

    def append_data_batch(self, epoch: int, first_seq: int, last_seq: int, last_timestamp: int,
                          first_offset: int, last_offset: int, is_transactional: bool) -> None:
        self._check_epoch(epoch, first_offset, "batch")
        if self.origin == ORIGIN_CLIENT:
            self._check_sequence(epoch, first_seq, first_offset)
        if epoch != self.epoch:
            self.batches.clear()
            self.epoch = epoch
        self.batches.append(BatchMetadata(last_seq, last_offset, last_offset - first_offset, last_timestamp))
        self.last_timestamp = last_timestamp
        if self.txn_first_offset is not None:
            if not is_transactional:
                raise InvalidTxnStateError(
                    f"expected a transactional write from producer {self.producer_id} (epoch {epoch}) at offset "
                    f"{first_offset} in {self.partition}: it has a transaction ongoing since offset "
                    f"{self.txn_first_offset}",
                    self.producer_id,
                )
        elif is_transactional:
            self.txn_first_offset = first_offset
            self.started_txns.append(first_offset)

    def append_end_txn_marker(self, commit: bool, coordinator_epoch: int, epoch: int, offset: int,
                              timestamp: int) -> CompletedTxn | None:
        self._check_epoch(epoch, offset, "COMMIT marker" if commit else "ABORT marker")
        if self.coordinator_epoch > coordinator_epoch and self.origin != ORIGIN_REPLICATION:
            raise TransactionCoordinatorFencedError(
                f"invalid coordinator epoch for producer {self.producer_id} at offset {offset} in {self.partition}: "
                f"{coordinator_epoch} (zombie coordinator), {self.coordinator_epoch} (current)",
                self.producer_id,
            )
        first = self.txn_first_offset
        completed = None if first is None else CompletedTxn(self.producer_id, first, offset, not commit)
        if epoch != self.epoch:
            self.batches.clear()
            self.epoch = epoch
        self.coordinator_epoch = coordinator_epoch
        self.txn_first_offset = None
        self.last_timestamp = timestamp
        return completed


NextBatch = tuple[ProducerStateEntry, BatchMetadata, "int | None"]
_tuple_new = tuple.__new__


class ProducerStateManager:
    """Producer ids -> :class:`ProducerStateEntry`, ongoing/unreplicated transactions, snapshots."""

    def __init__(self, partition: str, directory: Path | None = None) -> None:
        self.partition = partition
        self.directory = directory
        self.producers: dict[int, ProducerStateEntry] = {}
        # first offset -> producer id; insertion order is first-offset order (transactions start at increasing
        # offsets), so the first key is the first undecided offset
        self.ongoing: dict[int, int] = {}
        # completed transactions whose marker is not yet below the high watermark, by first offset
        self.unreplicated: dict[int, TxnMetadata] = {}
        self.last_snap_offset = -1
        self.refused: dict[int, tuple[int, int]] = {}  # producer id -> (epoch, first seq) refused before the append

    def note_refused(self, producer_id: int, epoch: int, first_seq: int) -> None:
        """The broker refused this producer's batch before appending it, with a retriable error (the ISR below
        min.insync.replicas, its transaction not verified yet): until it appends again, its batches past that
        gap are refused the same way (SequenceAfterRefusedBatchError), not as out of order. Only the batch that
        was next in sequence leaves such a gap."""
        e = self.producers.get(producer_id)
        if e is not None and e.producer_epoch == epoch and e.batches and in_sequence(e.last_seq, first_seq):
            self.refused[producer_id] = (epoch, first_seq)

    # ================================================================ validation (phase 1)
    def prepare_update(self, producer_id: int, origin: str) -> ProducerAppendInfo:
        return ProducerAppendInfo(self.partition, producer_id, self.producers.get(producer_id), origin)

    def prepare(self, headers: list[BatchHeader], origin: str,
                control: dict[int, tuple[bool, int]] | None = None,
                ) -> tuple[list[ProducerAppendInfo], list[CompletedTxn]]:
        """Validate the batches of one partition payload (offsets already assigned in the headers).

        ``control`` maps the index of each control batch in ``headers`` to (commit, coordinator epoch) of its
        marker; control batches missing from it (unknown control types) are ignored, as in Kafka.
        Raises a ProducerStateError (DuplicateSequenceError for a client retry of a recent batch); on success
        returns the pending infos and the transactions the markers complete, to commit after the write.
        """
        producers = self.producers
        infos: dict[int, ProducerAppendInfo] = {}
        completed: list[CompletedTxn] = []
        for i, h in enumerate(headers):
            pid = h.producer_id
            if pid < 0:
                continue
            base = h.base_offset
            if origin == ORIGIN_CLIENT:
                entry = producers.get(pid)
                if entry is not None and entry.producer_epoch == h.producer_epoch and entry.batches:
                    last_seq = h.last_sequence
                    dup = entry.find_duplicate(h.producer_epoch, h.base_sequence, last_seq)
                    if dup is not None:
                        if h.attributes & ATTR_TRANSACTIONAL and not entry.in_open_txn(dup):
                            raise InvalidTxnStateError(
                                f"transactional batch of producer {pid} (epoch {h.producer_epoch}, sequences "
                                f"{h.base_sequence}..{last_seq}) in {self.partition} repeats the sequences of the "
                                f"batch at offsets {dup.first_offset}..{dup.last_offset}, whose transaction has "
                                f"ended: not a retry but a reused sequence; the producer must abort its "
                                f"transaction",
                                pid,
                            )
                        raise DuplicateSequenceError(
                            f"batch of producer {pid} (epoch {h.producer_epoch}, sequences {h.base_sequence}.."
                            f"{last_seq}) in {self.partition} duplicates the one appended at offsets "
                            f"{dup.first_offset}..{dup.last_offset}",
                            pid, dup.first_offset, dup.last_offset, dup.timestamp,
                        )
            info = infos.get(pid)
            if info is None:
                info = infos[pid] = ProducerAppendInfo(self.partition, pid, producers.get(pid), origin,
                                                       self.refused.get(pid))
            if h.attributes & ATTR_CONTROL:
                marker = control.get(i) if control else None
                if marker is None:
                    continue
                txn = info.append_end_txn_marker(marker[0], marker[1], h.producer_epoch, base, h.max_timestamp)
                if txn is not None:
                    completed.append(txn)
            else:
                info.append_data_batch(h.producer_epoch, h.base_sequence, h.last_sequence, h.max_timestamp,
                                       base, base + h.last_offset_delta, bool(h.attributes & ATTR_TRANSACTIONAL))
        return list(infos.values()), completed

    def prepare_payload(self, payload: bytes | bytearray | memoryview, headers: list[BatchHeader], origin: str,
                        markers: dict[int, tuple[bool, int]] | None = None,
                        ) -> tuple[list[ProducerAppendInfo], list[CompletedTxn]]:
        """:meth:`prepare` for a payload of ``origin`` whose control batches are parsed here (origin
        ``coordinator`` may pass its ``markers`` already built; client payloads never hold control batches)."""
        control: dict[int, tuple[bool, int]] | None = None
        if origin != ORIGIN_CLIENT:
            if origin != ORIGIN_COORDINATOR and origin != ORIGIN_REPLICATION:
                raise ValueError(f"unknown append origin {origin!r}; use 'client', 'coordinator' or 'replication'")
            if markers is not None and origin == ORIGIN_COORDINATOR:
                return self.prepare(headers, origin, markers)
            for i, h in enumerate(headers):
                if h.attributes & ATTR_CONTROL and h.producer_id >= 0:
                    marker = parse_control_record(payload, h.position)
                    if marker.is_known:
                        if control is None:
                            control = {}
                        control[i] = (marker.commit, marker.coordinator_epoch)
        return self.prepare(headers, origin, control)

    # ================================================================ commit (phase 2)
    def prepare_next_batch(self, h: BatchHeader) -> NextBatch | None:
        """Fast path of :meth:`prepare` for the common case: one client data batch that directly follows its
        known producer's last batch in the same epoch and does not break transaction rules (no duplicate is
        possible then). Returns what :meth:`commit_next_batch` needs, or None: use :meth:`prepare`."""
        entry = self.producers.get(h.producer_id)
        if entry is None or entry.producer_epoch != h.producer_epoch or not entry.batches:
            return None
        attrs = h.attributes
        first_seq = h.base_sequence
        prev = entry.batches[-1][0]  # last_seq
        txn_first = entry.current_txn_first_offset
        is_txn = attrs & ATTR_TRANSACTIONAL
        if (first_seq != prev + 1 and (first_seq or prev != INT32_MAX)) or attrs & ATTR_CONTROL or (
                txn_first is not None and not is_txn):
            return None
        base = h.base_offset
        delta = h.last_offset_delta
        meta = _tuple_new(BatchMetadata, ((first_seq + delta) & INT32_MAX, base + delta, delta, h.max_timestamp))
        return entry, meta, base if is_txn and txn_first is None else None

    def commit_next_batch(self, nb: NextBatch) -> None:
        entry, meta, txn_first = nb
        if self.refused:
            self.refused.pop(entry.producer_id, None)
        entry.batches.append(meta)
        entry.last_timestamp = meta[3]
        if txn_first is not None:
            entry.current_txn_first_offset = txn_first
            self._add_ongoing(txn_first, entry.producer_id)

    def update(self, info: ProducerAppendInfo) -> None:
        pid = info.producer_id
        if self.refused and info.batches:
            self.refused.pop(pid, None)
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerStateEntry(pid)
        if entry.producer_epoch != info.epoch:
            entry.batches.clear()
            entry.producer_epoch = info.epoch
        if info.batches:
            entry.batches.extend(info.batches)
        entry.coordinator_epoch = info.coordinator_epoch
        entry.current_txn_first_offset = info.txn_first_offset
        entry.last_timestamp = info.last_timestamp
        for first in info.started_txns:
            self._add_ongoing(first, pid)

    def _add_ongoing(self, first_offset: int, producer_id: int) -> None:
        ongoing = self.ongoing
        if ongoing and first_offset < next(reversed(ongoing)):  # keep first-offset order (only after loads)
            items = sorted([*ongoing.items(), (first_offset, producer_id)])
            ongoing.clear()
            ongoing.update(items)
        else:
            ongoing[first_offset] = producer_id

    def last_stable_offset(self, txn: CompletedTxn) -> int:
        """LSO to record with an aborted transaction in the txn index (before :meth:`complete_txn`)."""
        for first, pid in self.ongoing.items():
            if pid != txn.producer_id:
                return first
        return txn.last_offset + 1

    def complete_txn(self, txn: CompletedTxn) -> None:
        pid = self.ongoing.pop(txn.first_offset, None)
        if pid is None:
            raise ValueError(f"transaction {txn} on {self.partition} was never started")
        self.unreplicated[txn.first_offset] = TxnMetadata(txn.producer_id, txn.first_offset, txn.last_offset)

    # ================================================================ LSO
    def first_undecided_offset(self) -> int | None:
        return next(iter(self.ongoing), None)

    def first_unstable_offset(self) -> int | None:
        undecided = next(iter(self.ongoing), None)
        if not self.unreplicated:
            return undecided
        first = min(self.unreplicated)
        return first if undecided is None or first < undecided else undecided

    def on_high_watermark(self, high_watermark: int) -> None:
        """Release completed transactions whose marker is below ``high_watermark``."""
        if self.unreplicated:
            done = [k for k, t in self.unreplicated.items() if t.last_offset is not None
                    and t.last_offset < high_watermark]
            for k in done:
                del self.unreplicated[k]

    # ================================================================ expiry / log start
    def expire(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Remove producers idle for ``expiration_ms`` or more without an ongoing transaction; their ids."""
        gone = [pid for pid, e in self.producers.items()
                if e.current_txn_first_offset is None and now_ms - e.last_timestamp >= expiration_ms]
        for pid in gone:
            del self.producers[pid]
        return gone

    def on_log_start_offset(self, log_start_offset: int) -> list[int]:
        """The log start moved: forget completed transactions below it and producers whose every batch
        (as far as cached) lies below it and that have no ongoing transaction. Producers with a transaction
        ongoing are kept (its marker still has to come; the LSO is clamped to the log start). Returns the
        removed producer ids."""
        self.on_high_watermark(log_start_offset)
        gone = [pid for pid, e in self.producers.items()
                if e.batches and e.batches[-1].last_offset < log_start_offset
                and e.current_txn_first_offset is None]
        for pid in gone:
            del self.producers[pid]
        return gone

    # ================================================================ introspection
    def active_producers(self) -> list[ActiveProducer]:
        return [e.summary() for e in self.producers.values()]

    def ongoing_transactions(self) -> list[TxnMetadata]:
        return [TxnMetadata(pid, first) for first, pid in self.ongoing.items()]

    def state(self) -> tuple[dict[int, tuple[object, ...]], list[tuple[int, int]]]:
        """Comparable view (producers, ongoing transactions) for tests."""
        return ({pid: e.as_tuple() for pid, e in self.producers.items()}, sorted(self.ongoing.items()))

    # ================================================================ reset / load entries
    def clear(self) -> None:
        self.refused.clear()
        self.producers.clear()
        self.ongoing.clear()
        self.unreplicated.clear()

    def load_entries(self, entries: Iterable[ProducerStateEntry]) -> None:
        self.clear()
        txns: list[tuple[int, int]] = []
        for e in entries:
            self.producers[e.producer_id] = e
            if e.current_txn_first_offset is not None:
                txns.append((e.current_txn_first_offset, e.producer_id))
        self.ongoing.update(sorted(txns))

    # ================================================================ snapshots
    def _snapshot_path(self, offset: int) -> Path:
        if self.directory is None:
            raise ValueError(f"the producer state of {self.partition} has no directory for snapshots")
        return self.directory / snapshot_file_name(offset)

    def snapshot_offsets(self) -> list[int]:
        if self.directory is None:
            return []
        out: list[int] = []
        for p in self.directory.iterdir():
            name = p.name
            if name.endswith(SNAPSHOT_SUFFIX) and len(name) == 20 + len(SNAPSHOT_SUFFIX) and name[:20].isdigit():
                out.append(int(name[:20]))
        out.sort()
        return out

    def serialize(self, offset: int) -> bytes:
        parts = [b""]
        entries = list(self.producers.values())
        for e in entries:
            txn = e.current_txn_first_offset
            parts.append(_SNAP_ENTRY.pack(e.producer_id, e.producer_epoch, e.coordinator_epoch, e.last_timestamp,
                                          -1 if txn is None else txn, len(e.batches)))
            for b in e.batches:
                parts.append(_SNAP_BATCH.pack(b.last_seq, b.last_offset, b.offset_delta, b.timestamp))
        body = struct.pack(">qi", offset, len(entries)) + b"".join(parts)
        crc = _crc32c.crc32c(body)
        return struct.pack(">hI", SNAPSHOT_VERSION, crc) + body

    @staticmethod
    def deserialize(data: bytes) -> tuple[int, list[ProducerStateEntry]]:
        """(offset, entries) of a snapshot; raises CorruptSnapshotError."""
        try:
            version, crc, offset, count = _SNAP_HEADER.unpack_from(data, 0)
            if version != SNAPSHOT_VERSION:
                raise CorruptSnapshotError(f"unknown snapshot version {version}")
            if _crc32c.crc32c(memoryview(data)[_CRC_START:]) != crc:
                raise CorruptSnapshotError("snapshot fails its CRC32C")
            pos = _SNAP_HEADER.size
            entries: list[ProducerStateEntry] = []
            for _ in range(count):
                pid, epoch, ce, ts, txn, nb = _SNAP_ENTRY.unpack_from(data, pos)
                pos += _SNAP_ENTRY.size
                batches = []
                for _ in range(nb):
                    batches.append(BatchMetadata(*_SNAP_BATCH.unpack_from(data, pos)))
                    pos += _SNAP_BATCH.size
                entries.append(ProducerStateEntry(pid, epoch, ce, ts, None if txn < 0 else txn, batches))
            if pos != len(data):
                raise CorruptSnapshotError(f"{len(data) - pos} trailing bytes")
            return offset, entries
        except struct.error as e:
            raise CorruptSnapshotError(f"snapshot is truncated: {e}") from e

    def take_snapshot(self, offset: int, *, sync: bool = False, keep: Iterable[int] = ()) -> Path | None:
        """Write the state (which must be the state at ``offset``) unless a snapshot at ``offset`` was the
        last one written; then delete old snapshots, keeping the newest two and, for each offset in ``keep``,
        the newest snapshot at or below it (for recovery of the segments from there on)."""
        path = None
        if offset != self.last_snap_offset or not self._snapshot_path(offset).exists():
            path = self._snapshot_path(offset)
            write_atomic(path, self.serialize(offset), durable=sync)
            self.last_snap_offset = offset
        self.prune_snapshots(keep)
        return path

    def prune_snapshots(self, keep: Iterable[int] = ()) -> None:
        offsets = self.snapshot_offsets()
        kept = set(offsets[-2:])
        for k in keep:
            below = [o for o in offsets if o <= k]
            if below:
                kept.add(below[-1])
        for o in offsets:
            if o not in kept:
                self._snapshot_path(o).unlink(missing_ok=True)

    def delete_snapshots(self, *, above: int | None = None, below: int | None = None) -> None:
        for o in self.snapshot_offsets():
            if (above is not None and o > above) or (below is not None and o < below):
                self._snapshot_path(o).unlink(missing_ok=True)

    def load_latest_snapshot(self, max_offset: int) -> int | None:
        """Load the newest readable snapshot at or below ``max_offset``; corrupt ones are deleted. Returns its
        offset, or None (state cleared) if there is none."""
        for o in reversed(self.snapshot_offsets()):
            if o > max_offset:
                continue
            path = self._snapshot_path(o)
            try:
                offset, entries = self.deserialize(path.read_bytes())
                if offset != o:
                    raise CorruptSnapshotError(f"snapshot says offset {offset}, its name {o}")
            except (CorruptSnapshotError, OSError) as e:
                log.warning("%s: deleting unusable producer snapshot %s: %s", self.partition, path.name, e)
                path.unlink(missing_ok=True)
                continue
            self.load_entries(entries)
            self.last_snap_offset = o
            return o
        self.clear()
        return None
