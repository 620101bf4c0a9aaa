"""The broker side of the coordinators: internal topics as durable logs, and transaction markers.

``InternalTopicLog`` gives a coordinator runtime what it needs from ``__transaction_state`` or
``__consumer_offsets`` (``oncelog.coordinator.runtime.CoordinatorLog``): write a batch of (key, value) records —
transactional for a TxnOffsetCommit — and hand back a future done once it is on disk; read a partition back, records
and COMMIT/ABORT markers in log order, for loading. Every write carries the coordinator epoch it was decided under;
the log refuses one whose epoch is not the epoch this broker currently leads the partition with
(NOT_LEADER_OR_FOLLOWER, which a coordinator answers as NOT_COORDINATOR). On a single node the broker leads every
internal partition with the epoch of its start; a cluster sets it from the partition's leader epoch.
``BrokerMarkerWriter`` appends COMMIT/ABORT control batches to data partitions and waits until they are durable,
which is when a transaction may be completed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Iterator

from oncelog.coordinator.runtime import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, LoadedMarker, LoadedRecord, LogEntry
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.records import RecordBatchBuilder, decode_records, parse_batch_header, parse_control_record

if TYPE_CHECKING:
    from .partition import Partition
    from .server import Broker

__all__ = ["InternalTopicLog", "BrokerMarkerWriter", "CoordinatorLogError"]

log = logging.getLogger("oncelog.broker.coordinator")

OFFSETS_TOPIC = "__consumer_offsets"


class CoordinatorLogError(RuntimeError):
    """An internal topic partition could not be written (missing, deleted, or led with another epoch)."""

    def __init__(self, message: str, error_code: ErrorCode = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) -> None:
        super().__init__(message)
        self.error_code = error_code


class InternalTopicLog:
    def __init__(self, broker: "Broker", topic: str, num_partitions: int, configs: dict[str, str]) -> None:
        self.broker = broker
        self.topic = topic
        self.num_partitions = num_partitions
        self.configs = configs
        self._leader_epochs: dict[int, int] = {}  # partition -> epoch this broker leads it with

    def ensure(self) -> None:
        """Create the internal topic on first use; an existing one keeps its partition count."""
        view = self.broker.topics.get(self.topic)
        if view is None:
            view = self.broker.topics.create(self.topic, self.num_partitions, self.configs)
        self.num_partitions = len(view.partitions)

    def become_leader(self, partition: int, epoch: int) -> None:
        """This broker leads ``partition`` from now on with ``epoch``: writes carrying it are accepted."""
        self._leader_epochs[partition] = epoch

    def resign(self, partition: int) -> None:
        """This broker no longer leads ``partition``: every write to it is refused."""
        self._leader_epochs.pop(partition, None)

    def _partition(self, index: int) -> "Partition":
        p = self.broker.topics.partition(self.topic, index)
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
        builder = RecordBatchBuilder(producer_id=producer_id, producer_epoch=producer_epoch,
                                     base_sequence=-1, is_transactional=producer_id >= 0)
        now = self.broker.clock.wall_ms()
        for key, value in records:
            builder.append(now, key, value)
        payload = bytearray(builder.build())
        headers = [parse_batch_header(payload, 0)]  # built here, one batch: no CRC check needed
        result = p.append(payload, headers, None, origin="coordinator", lazy=lazy)
        return result.first_offset, p.wait_durable(result.last_offset)

    def read(self, partition: int) -> Iterator[LogEntry]:
        """Every entry of one partition in log order, for loading: records (with the producer id/epoch of a
        transactional batch) and the COMMIT/ABORT markers that end those transactions."""
        p = self.broker.topics.partition(self.topic, partition)
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


class BrokerMarkerWriter:
    def __init__(self, broker: "Broker") -> None:
        self.broker = broker

    def start_markers(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                      partitions: list[tuple[str, int]]
                      ) -> tuple[dict[tuple[str, int], int], "asyncio.Future[Any] | None"]:
        """Append the markers now; return the error code per partition and a future done once every written
        marker is durable (None if nothing was written). Lets the coordinator write them without first
        hopping into its completion task."""
        errors: dict[tuple[str, int], int] = {}
        waits: list[asyncio.Future[None]] = []
        offsets_markers: list[tuple[int, int]] = []
        now = self.broker.clock.wall_ms()
        for tp in partitions:
            p = self.broker.topics.partition(*tp)
            if p is None:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            try:
                result = p.append_marker(producer_id, producer_epoch, commit, coordinator_epoch, now)
            except Exception as e:
                code = getattr(e, "error_code", ErrorCode.UNKNOWN_SERVER_ERROR)
                log.warning("%s marker for producer %d epoch %d on %s-%d refused: %s",
                            "COMMIT" if commit else "ABORT", producer_id, producer_epoch, tp[0], tp[1], e)
                errors[tp] = int(code)
                continue
            waits.append(p.wait_durable(result.last_offset))
            errors[tp] = ErrorCode.NONE
            if tp[0] == OFFSETS_TOPIC:
                offsets_markers.append((tp[1], result.first_offset))
        if offsets_markers and self.broker.group_coordinator is not None:
            return errors, asyncio.ensure_future(
                self._then_resolve_offsets(waits, offsets_markers, producer_id, producer_epoch, commit))
        if not waits:
            return errors, None
        # one partition (the common case): its own future, no gather and so one event-loop hop fewer
        return errors, waits[0] if len(waits) == 1 else asyncio.gather(*waits)

    async def _then_resolve_offsets(self, waits: list["asyncio.Future[None]"], offsets_markers: list[tuple[int, int]],
                                    producer_id: int, producer_epoch: int, commit: bool) -> None:
        """Once the markers are durable, the producer's pending transactional offset commits on those
        ``__consumer_offsets`` partitions become visible (COMMIT) or are dropped (ABORT) — before the
        transaction is completed and EndTxn answered, so the committer's next OffsetFetch sees them."""
        await asyncio.gather(*waits)
        groups = self.broker.group_coordinator
        if groups is not None:
            for index, offset in offsets_markers:
                await groups.replay_end_transaction_marker(index, producer_id, producer_epoch, commit, offset)

    async def write_markers(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                            partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        errors, durable = self.start_markers(producer_id, producer_epoch, commit, coordinator_epoch, partitions)
        if durable is not None:
            await durable
        return errors
