"""The broker side of the coordinators: internal topics as durable logs, and transaction markers.

``InternalTopicLog`` gives a coordinator runtime what it needs from ``__transaction_state`` or
``__consumer_offsets``: append a batch of (key, value) records and return once it is on disk; read a partition
back at start-up. ``BrokerMarkerWriter`` appends COMMIT/ABORT control batches to data partitions and waits until
they are durable, which is when a transaction may be completed.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Iterator

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.records import RecordBatchBuilder, decode_records, parse_batch_header

if TYPE_CHECKING:
    from .partition import Partition
    from .server import Broker

__all__ = ["InternalTopicLog", "BrokerMarkerWriter", "CoordinatorLogError"]

log = logging.getLogger("oncelog.broker.coordinator")

OFFSETS_TOPIC = "__consumer_offsets"


class CoordinatorLogError(RuntimeError):
    """An internal topic partition could not be written (missing, deleted, or a disk error)."""


class InternalTopicLog:
    def __init__(self, broker: "Broker", topic: str, num_partitions: int, configs: dict[str, str]) -> None:
        self.broker = broker
        self.topic = topic
        self.num_partitions = num_partitions
        self.configs = configs

    def ensure(self) -> None:
        """Create the internal topic on first use; an existing one keeps its partition count."""
        view = self.broker.topics.get(self.topic)
        if view is None:
            view = self.broker.topics.create(self.topic, self.num_partitions, self.configs)
        self.num_partitions = len(view.partitions)

    def _partition(self, index: int) -> "Partition":
        p = self.broker.topics.partition(self.topic, index)
        if p is None:
            raise CoordinatorLogError(f"internal topic partition {self.topic}-{index} does not exist")
        return p

    def append_nowait(self, partition: int, records: list[tuple[bytes, bytes | None]],
                      producer_id: int = -1, producer_epoch: int = -1, transactional: bool = False,
                      lazy: bool = False) -> tuple[int, "asyncio.Future[None]"]:
        """Write records as one batch now; return its base offset and a future done once it is durable
        (the coordinator runtime watches the future itself: no extra event-loop hop). ``lazy``: nobody waits for
        that future now; the batch is fsynced by the partition's next group-commit round."""
        p = self._partition(partition)
        builder = RecordBatchBuilder(producer_id=producer_id, producer_epoch=producer_epoch,
                                     base_sequence=-1, is_transactional=transactional)
        now = self.broker.clock.wall_ms()
        for key, value in records:
            builder.append(now, key, value)
        payload = bytearray(builder.build())
        headers = [parse_batch_header(payload, 0)]  # built here, one batch: no CRC check needed
        result = p.append(payload, headers, None, origin="coordinator", lazy=lazy)
        return result.first_offset, p.wait_durable(result.last_offset)

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]],
                     producer_id: int = -1, producer_epoch: int = -1, transactional: bool = False) -> int:
        """Append records as one batch; return its base offset once it is durable."""
        first, durable = self.append_nowait(partition, records, producer_id, producer_epoch, transactional)
        await durable
        return first

    def read(self, partition: int) -> Iterator[tuple[bytes | None, bytes | None, int]]:
        """Every record of one partition, oldest first, as (key, value, offset), control batches skipped."""
        p = self._partition(partition)
        for header, data in p.log.iter_batches(p.log_start_offset):
            if header.is_control:
                continue
            for rec in decode_records(data):
                yield rec.key, rec.value, rec.offset


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
        offsets_partitions = [tp[1] for tp, code in errors.items() if tp[0] == OFFSETS_TOPIC and code == 0]
        if offsets_partitions and self.broker.group_coordinator is not None:
            return errors, asyncio.ensure_future(
                self._then_resolve_offsets(waits, offsets_partitions, producer_id, commit))
        if not waits:
            return errors, None
        # one partition (the common case): its own future, no gather and so one event-loop hop fewer
        return errors, waits[0] if len(waits) == 1 else asyncio.gather(*waits)

    async def _then_resolve_offsets(self, waits: list["asyncio.Future[None]"], offsets_partitions: list[int],
                                    producer_id: int, commit: bool) -> None:
        """Once the markers are durable, the producer's pending transactional offset commits on those
        ``__consumer_offsets`` partitions become visible (COMMIT) or are dropped (ABORT) — before the
        transaction is completed and EndTxn answered, so the committer's next OffsetFetch sees them."""
        await asyncio.gather(*waits)
        groups = self.broker.group_coordinator
        if groups is not None:
            for index in offsets_partitions:
                await groups.on_transaction_completed(index, producer_id, commit)

    async def write_markers(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                            partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        errors, durable = self.start_markers(producer_id, producer_epoch, commit, coordinator_epoch, partitions)
        if durable is not None:
            await durable
        return errors
