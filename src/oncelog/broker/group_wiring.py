"""Start and stop the classic group coordinator inside a broker.

``start_group_coordinator`` creates ``__consumer_offsets`` (``offsets.topic.num.partitions``, compacted), loads
every partition through the coordinator runtime's replay path (offset commits, group snapshots, transactional
offset batches and the COMMIT/ABORT markers that resolve them) at the broker's coordinator epoch, sets
``broker.group_coordinator`` and starts the timer task that calls ``GroupCoordinator.tick()`` every 100 ms
(sessions, join/sync phases, offset retention). A write not durable within ``offsets.commit.timeout.ms`` answers
COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from oncelog.coordinator.group.coordinator import GroupCoordinator
from oncelog.coordinator.group.shard import GroupConfig
from oncelog.protocol.errors import ErrorCode

from .internal_log import InternalTopicLog

if TYPE_CHECKING:
    from .server import Broker

__all__ = [
    "OFFSETS_TOPIC",
    "TICK_INTERVAL_S",
    "start_group_coordinator",
    "stop_group_coordinator",
]

log = logging.getLogger("oncelog.broker.groups")

OFFSETS_TOPIC = "__consumer_offsets"
TICK_INTERVAL_S = 0.1
_TICK_ATTR = "_group_coordinator_ticker"


def group_config(broker: Broker) -> GroupConfig:
    cfg = broker.config
    return GroupConfig(
        min_session_timeout_ms=cfg.group_min_session_timeout_ms,
        max_session_timeout_ms=cfg.group_max_session_timeout_ms,
        initial_rebalance_delay_ms=cfg.group_initial_rebalance_delay_ms,
        max_size=cfg.group_max_size,
        offsets_retention_ms=cfg.offsets_retention_minutes * 60_000,
        offsets_retention_check_interval_ms=cfg.offsets_retention_check_interval_ms,
        offset_metadata_max_bytes=cfg.offset_metadata_max_bytes,
    )


async def start_group_coordinator(broker: Broker, epoch: int) -> GroupCoordinator:
    cfg = broker.config
    offsets_log = InternalTopicLog(broker, OFFSETS_TOPIC, cfg.offsets_topic_num_partitions,
                                   {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)})
    offsets_log.ensure()

    def partition_exists(topic: str, partition: int) -> bool:
        view = broker.topics.get(topic)
        return view is not None and 0 <= partition < len(view.partitions)

    def verify_transaction(transactional_id: str, producer_id: int, producer_epoch: int, partition: int) -> int:
        """TxnOffsetCommit writes only into the producer's ongoing transaction, once AddOffsetsToTxn added this
        ``__consumer_offsets`` partition to it: otherwise no marker would ever end what it writes."""
        txn = broker.txn_coordinator
        if txn is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return txn.verify_partition(producer_id, producer_epoch, OFFSETS_TOPIC, partition, transactional_id)

    coordinator = GroupCoordinator(offsets_log, offsets_log.num_partitions, broker.clock, group_config(broker),
                                   partition_exists=partition_exists, verify_transaction=verify_transaction,
                                   write_timeout_ms=cfg.offsets_commit_timeout_ms)
    groups = 0
    for partition in range(offsets_log.num_partitions):
        offsets_log.become_leader(partition, epoch)
        shard = await coordinator.load(partition, epoch, offsets_log.read(partition))
        groups += len(shard.groups) if shard is not None else 0
    broker.group_coordinator = coordinator
    setattr(broker, _TICK_ATTR, asyncio.get_running_loop().create_task(_tick_loop(coordinator), name="group-timers"))
    log.info("group coordinator loaded %d partition(s) of %s, %d group(s)", offsets_log.num_partitions,
             OFFSETS_TOPIC, groups)
    return coordinator


async def _tick_loop(coordinator: GroupCoordinator) -> None:
    while True:
        await asyncio.sleep(TICK_INTERVAL_S)
        try:
            await coordinator.tick()
        except Exception:
            log.exception("group coordinator timers failed; will retry")


async def stop_group_coordinator(broker: Broker) -> None:
    task = getattr(broker, _TICK_ATTR, None)
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        setattr(broker, _TICK_ATTR, None)
    coordinator = getattr(broker, "group_coordinator", None)
    if coordinator is not None:
        broker.group_coordinator = None
        await coordinator.close()
