"""Start and stop the classic group coordinator inside a broker.

``start_group_coordinator`` creates ``__consumer_offsets`` (``offsets.topic.num.partitions``, compacted), loads
every partition through the coordinator runtime's replay path (offset commits, group snapshots, transactional
offset batches and the COMMIT/ABORT markers that resolve them) at the broker's coordinator epoch, sets
``broker.group_coordinator`` and arms one event-loop timer at the coordinator's earliest deadline (sessions,
join/sync phases, offset retention), re-armed whenever a sooner one is scheduled; when it fires it calls
``GroupCoordinator.tick()``, which fires what is due at that moment (a session expires at its deadline, not up to a
polling period later, and groups without a due deadline cost nothing). A write not durable within
``offsets.commit.timeout.ms`` answers COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from oncelog.coordinator.group.coordinator import GroupCoordinator
from oncelog.coordinator.group.shard import GroupConfig
from oncelog.protocol.errors import ErrorCode

from .timers import DeadlineDriver
from .internal_log import InternalTopicLog

if TYPE_CHECKING:
    from ..server import Broker

__all__ = [
    "OFFSETS_TOPIC",
    "build_group_coordinator",
    "start_group_timers",
    "start_group_coordinator",
    "stop_group_coordinator",
]

log = logging.getLogger("oncelog.broker.groups")

OFFSETS_TOPIC = "__consumer_offsets"
_TIMER_ATTR = "_group_coordinator_timer"
GROUP_TIMER_MAX_WAIT_MS = 200


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


def build_group_coordinator(broker: Broker, offsets_log: InternalTopicLog,
                            partition_exists: Callable[[str, int], bool]) -> GroupCoordinator:
    """The coordinator over ``offsets_log`` with its timer driver (started by :func:`start_group_timers`); no
    partition loaded yet."""
    cfg = broker.config

    def verify_transaction(transactional_id: str, producer_id: int, producer_epoch: int, partition: int) -> int:
        """TxnOffsetCommit writes only into the producer's ongoing transaction, once AddOffsetsToTxn added this
        ``__consumer_offsets`` partition to it: otherwise no marker would ever end what it writes. In a cluster the
        transaction's coordinator may be another broker: checked only where it is this one (Kafka's behaviour
        without KIP-890's verification request)."""
        txn = broker.txn_coordinator
        if txn is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if broker.cluster is not None and not txn.owns(txn.partition_for(transactional_id)):
            return ErrorCode.NONE
        return txn.verify_partition(producer_id, producer_epoch, OFFSETS_TOPIC, partition, transactional_id)

    coordinator = GroupCoordinator(offsets_log, offsets_log.num_partitions, broker.clock, group_config(broker),
                                   partition_exists=partition_exists, verify_transaction=verify_transaction,
                                   write_timeout_ms=cfg.offsets_commit_timeout_ms)
    # at most GROUP_TIMER_MAX_WAIT_MS between two looks at the clock, as Kafka's SystemTimer reaper advances its wheel
    # every 200 ms: deadlines are on the broker's clock, the event loop's timer on the process's monotonic one, so a
    # step of the broker's clock (a VM resumed, a test's skew) is noticed within that time, not a session later
    timer = DeadlineDriver("group-timers", broker.clock.monotonic_ms, coordinator.next_deadline, coordinator.tick,
                           max_wait_ms=GROUP_TIMER_MAX_WAIT_MS)
    coordinator.on_timer = timer.wake
    setattr(broker, _TIMER_ATTR, timer)
    return coordinator


def start_group_timers(broker: Broker) -> None:
    timer: DeadlineDriver | None = getattr(broker, _TIMER_ATTR, None)
    if timer is not None:
        timer.start()


async def start_group_coordinator(broker: Broker, epoch: int) -> GroupCoordinator:
    """A single node: it leads every ``__consumer_offsets`` partition, at the epoch of this start."""
    cfg = broker.config
    offsets_log = InternalTopicLog(broker, OFFSETS_TOPIC, cfg.offsets_topic_num_partitions,
                                   {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)})
    offsets_log.ensure()

    def partition_exists(topic: str, partition: int) -> bool:
        view = broker.topics.get(topic)
        return view is not None and 0 <= partition < len(view.partitions)

    coordinator = build_group_coordinator(broker, offsets_log, partition_exists)
    groups = 0
    for partition in range(offsets_log.num_partitions):
        offsets_log.become_leader(partition, epoch)
        shard = await coordinator.load(partition, epoch, offsets_log.read(partition))
        groups += len(shard.groups) if shard is not None else 0
    broker.group_coordinator = coordinator
    start_group_timers(broker)
    log.info("group coordinator loaded %d partition(s) of %s, %d group(s)", offsets_log.num_partitions,
             OFFSETS_TOPIC, groups)
    return coordinator


async def stop_group_coordinator(broker: Broker) -> None:
    timer = getattr(broker, _TIMER_ATTR, None)
    if timer is not None:
        await timer.close()
        setattr(broker, _TIMER_ATTR, None)
    coordinator = getattr(broker, "group_coordinator", None)
    if coordinator is not None:
        broker.group_coordinator = None
        await coordinator.close()
