"""The broker side of the coordinators: the internal topics as their durable logs.

``InternalTopicLog`` gives a coordinator runtime what it needs from ``__transaction_state`` or
``__consumer_offsets`` (``oncelog.coordinator.runtime.CoordinatorLog``): write a batch of (key, value) records —
transactional for a TxnOffsetCommit — and hand back a future done once it is on disk; read a partition back, records
and COMMIT/ABORT markers in log order, for loading. Every write carries the coordinator epoch it was decided under;
the log refuses one whose epoch is not the epoch this broker currently leads the partition with
(NOT_LEADER_OR_FOLLOWER, which a coordinator answers as NOT_COORDINATOR). On a single node the broker leads every
internal partition with the coordinator epoch of its start (``become_leader``), which keeps growing across restarts
so markers of an older run are fenced, while the partitions themselves stay at leader epoch 0; in a cluster the
coordinator epoch is the partition's leader epoch (``broker.Partition.leader_epoch``) and this check becomes that
partition's own. (Transaction markers are written by ``markers.py``.)

In a cluster (the partition is ``replicated``) a coordinator write is a leader append at the coordinator epoch, as
Kafka's coordinators append with ``acks=-1``: refused unless this broker leads the partition at that leader epoch
(NOT_LEADER_OR_FOLLOWER) and the ISR has ``min.insync.replicas`` members (NOT_ENOUGH_REPLICAS, which the caller sees
as COORDINATOR_NOT_AVAILABLE), and its future is done once the high watermark passes it (every ISR member has it,
durably in the durable default): a coordinator answers nothing that a failover could take back. The topic itself
is created through the cluster (``cluster_topics.AutoCreator``), not here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Iterator

from oncelog.coordinator.runtime import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, LoadedMarker, LoadedRecord, LogEntry
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.record_encode import one_record_batch
from oncelog.protocol.records import RecordBatchBuilder, decode_records, parse_batch_header, parse_control_record

if TYPE_CHECKING:
    from oncelog.clock import Clock

    from ..partition import Partition
    from ..topics import TopicRegistry

__all__ = ["InternalTopicLog", "CoordinatorLogError"]

log = logging.getLogger("oncelog.broker.coordinator")


class CoordinatorLogError(RuntimeError):
    """An internal topic partition could not be written (missing, deleted, or led with another epoch)."""

    def __init__(self, message: str, error_code: ErrorCode = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) -> None:
        super().__init__(message)
        self.error_code = error_code


class InternalTopicLog:
    def __init__(self, topics: TopicRegistry, clock: Clock, topic: str, num_partitions: int,
                 configs: dict[str, str]) -> None:
        self.topics = topics
        self.clock = clock
        self.topic = topic
        self.num_partitions = num_partitions
        self.configs = configs
        self._leader_epochs: dict[int, int] = {}  # partition -> epoch this broker leads it with

    def ensure(self) -> None:
        """Create the internal topic on first use (single node); an existing one keeps its partition count."""
        view = self.topics.get(self.topic)
        if view is None:
            view = self.topics.create(self.topic, self.num_partitions, self.configs)
        self.num_partitions = len(view.partitions)

    def become_leader(self, partition: int, epoch: int) -> None:
        """This broker leads ``partition`` from now on with ``epoch``: writes carrying it are accepted."""
        self._leader_epochs[partition] = epoch

    def resign(self, partition: int) -> None:
        """This broker no longer leads ``partition``: every write to it is refused."""
        self._leader_epochs.pop(partition, None)

    def _partition(self, index: int) -> "Partition":
        p = self.topics.partition(self.topic, index)
        if p is None:
            raise CoordinatorLogError(f"internal topic partition {self.topic}-{index} does not exist")
        return p

    def append(self, partition: int, epoch: int, records: Sequence[tuple[bytes, bytes | None]],
               producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
               lazy: bool = False) -> tuple[int, "asyncio.Future[None]"]:
        """Write records as one batch now (transactional when ``producer_id`` is set); return its base offset and a
        future done once it is durable (the coordinator runtime watches the future itself: no extra event-loop
        hop). ``lazy``: nobody waits for that future now; the batch is fsynced by the partition's next group-commit
        round. Producer-state errors (a fenced producer) propagate with their error code."""
        if self._leader_epochs.get(partition) != epoch:
            raise CoordinatorLogError(
                f"{self.topic}-{partition} is not led by this broker with coordinator epoch {epoch} (current: "
                f"{self._leader_epochs.get(partition)}); the write is refused", ErrorCode.NOT_LEADER_OR_FOLLOWER)
        p = self._partition(partition)
        if p.replicated:
            self._check_leader(p, epoch)
        now = self.clock.wall_ms()
        if len(records) == 1:  # (a transaction's state change): the batch and its header in one call
            key, value = records[0]
            payload, header = one_record_batch(now, key, value, producer_id=producer_id,
                                               producer_epoch=producer_epoch, is_transactional=producer_id >= 0)
        else:
            builder = RecordBatchBuilder(producer_id=producer_id, producer_epoch=producer_epoch,
                                         base_sequence=-1, is_transactional=producer_id >= 0)
            for key, value in records:
                builder.append(now, key, value)
            payload = bytearray(builder.build())
            header = parse_batch_header(payload, 0)  # built here, one batch: no CRC check needed
        result = p.append(payload, [header], None, origin="coordinator", lazy=lazy)
        if p.replicated:
            return result.first_offset, _committed(p, result.last_offset)
        return result.first_offset, p.wait_durable(result.last_offset)

    def _check_leader(self, p: "Partition", epoch: int) -> None:
        if not p.is_leader or p.leader_epoch != epoch:
            raise CoordinatorLogError(
                f"{self.topic}-{p.index} is not led by this broker at leader epoch {epoch} (role {p.role.value}, "
                f"epoch {p.leader_epoch}); the write is refused", ErrorCode.NOT_LEADER_OR_FOLLOWER)
        lr = p.leader_replicas
        if lr is not None and len(lr.isr) < lr.min_isr:
            raise CoordinatorLogError(
                f"{self.topic}-{p.index} has {len(lr.isr)} in-sync replica(s) {sorted(lr.isr)}, fewer than "
                f"min.insync.replicas={lr.min_isr}; the write is refused", ErrorCode.NOT_ENOUGH_REPLICAS)

    def read(self, partition: int) -> Iterator[LogEntry]:
        """Every entry of one partition in log order, for loading: records (with the producer id/epoch of a
        transactional batch) and the COMMIT/ABORT markers that end those transactions."""
        p = self.topics.partition(self.topic, partition)
        if p is None:
            return
        for header, data in p.log.iter_batches(p.log_start_offset):
            if header.is_control:
                marker = parse_control_record(data)
                if marker.is_known:
                    yield LoadedMarker(header.producer_id, header.producer_epoch, marker.commit, header.base_offset)
                continue
            if header.is_transactional:
                pid, epoch = header.producer_id, header.producer_epoch
                for rec in decode_records(data):
                    yield LoadedRecord(rec.key, rec.value, rec.offset, pid, epoch)
            else:
                for rec in decode_records(data):
                    yield LoadedRecord(rec.key, rec.value, rec.offset)


def _committed(p: "Partition", last_offset: int) -> "asyncio.Future[None]":
    """A future done once the high watermark passes ``last_offset``; failed with the partition's error code if
    leadership moves first or the ISR fell below min ISR meanwhile."""
    replicated = p.wait_replicated(last_offset)
    out: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def done(f: "asyncio.Future[int]") -> None:
        if out.done():
            return
        code = f.result()
        if code == ErrorCode.NONE:
            out.set_result(None)
        else:
            out.set_exception(CoordinatorLogError(
                f"{p.topic}-{p.index}: the write was not replicated ({ErrorCode(code).name})", ErrorCode(code)))

    if replicated.done():
        done(replicated)
    else:
        replicated.add_done_callback(done)
    return out
