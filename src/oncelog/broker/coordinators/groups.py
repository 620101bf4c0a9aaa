"""The classic group coordinator inside a broker: built from what it uses, started and closed through a handle.

:func:`build_group_coordinator` makes a :class:`GroupCoordinatorHandle`: the coordinator over ``__consumer_offsets``
(an :class:`InternalTopicLog`) and one event-loop timer at the coordinator's earliest deadline (sessions, join/sync
phases, offset retention), re-armed whenever a sooner one is scheduled; when it fires it calls
``GroupCoordinator.tick()``, which fires what is due at that moment (a session expires at its deadline, not up to a
polling period later, and groups without a due deadline cost nothing). A write not durable within
``offsets.commit.timeout.ms`` answers COORDINATOR_NOT_AVAILABLE.

On a single node :func:`start_single_node_groups` creates ``__consumer_offsets`` (``offsets.topic.num.partitions``,
compacted) and loads every partition through the coordinator runtime's replay path (offset commits, group
snapshots, transactional offset batches and the COMMIT/ABORT markers that resolve them) at the broker's coordinator
epoch. In a cluster ``cluster.py`` loads partitions as their leadership arrives.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import uuid
from collections.abc import Iterable, Mapping

from oncelog.clock import Clock
from oncelog.coordinator.group.config import GroupConfig
from oncelog.coordinator.group.coordinator import GroupCoordinator
from oncelog.coordinator.group.topic_image import TopicImage, TopicInfo
from oncelog.protocol.errors import ErrorCode
from oncelog.security.store import SecurityStore

from ..settings.group_configs import GroupOverrides

from .internal_log import InternalTopicLog
from .single_node import LoadOnFirstUse
from .timers import DeadlineDriver

if TYPE_CHECKING:
    from oncelog.cluster.model import TopicMeta
    from oncelog.coordinator.transaction import TransactionCoordinator

    from ..settings.config import BrokerConfig
    from ..topics import TopicRegistry

__all__ = ["OFFSETS_TOPIC", "ClusterTopicImage", "GroupCoordinatorHandle", "RegistryTopicImage",
           "build_group_coordinator", "build_single_node_groups", "start_single_node_groups"]

log = logging.getLogger("oncelog.broker.groups")

OFFSETS_TOPIC = "__consumer_offsets"
GROUP_TIMER_MAX_WAIT_MS = 200


class GroupCoordinatorHandle:
    """The group coordinator and its timer: :meth:`start` arms the timer (for what loading scheduled), :meth:`close`
    stops both."""

    def __init__(self, coordinator: GroupCoordinator, timer: DeadlineDriver) -> None:
        self.coordinator = coordinator
        self.timer = timer
        self.first_use: LoadOnFirstUse | None = None  # a single node: loads __consumer_offsets on first use

    def start(self) -> None:
        self.timer.start()

    async def close(self) -> None:
        await self.timer.close()
        await self.coordinator.close()


def group_config(cfg: BrokerConfig) -> GroupConfig:
    return GroupConfig(
        min_session_timeout_ms=cfg.group_min_session_timeout_ms,
        max_session_timeout_ms=cfg.group_max_session_timeout_ms,
        initial_rebalance_delay_ms=cfg.group_initial_rebalance_delay_ms,
        max_size=cfg.group_max_size,
        offsets_retention_ms=cfg.offsets_retention_minutes * 60_000,
        offsets_retention_check_interval_ms=cfg.offsets_retention_check_interval_ms,
        offset_metadata_max_bytes=cfg.offset_metadata_max_bytes,
        consumer_session_timeout_ms=cfg.group_consumer_session_timeout_ms,
        consumer_heartbeat_interval_ms=cfg.group_consumer_heartbeat_interval_ms,
        consumer_max_size=cfg.group_consumer_max_size,
        consumer_assignors=[a.strip() for a in cfg.group_consumer_assignors.split(",") if a.strip()],
        consumer_migration_policy=cfg.group_consumer_migration_policy,
    )


class RegistryTopicImage:
    """The topics a consumer group sees on a single node: the broker's topic registry."""

    def __init__(self, topics: TopicRegistry) -> None:
        self._topics = topics

    def by_name(self, name: str) -> TopicInfo | None:
        view = self._topics.get(name)
        return None if view is None else TopicInfo(view.topic_id, view.name, len(view.partitions))

    def by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        view = self._topics.by_id(topic_id)
        return None if view is None else TopicInfo(view.topic_id, view.name, len(view.partitions))

    def names(self) -> Iterable[str]:
        return [view.name for view in self._topics]


class ClusterTopicImage:
    """The topics a consumer group sees in a cluster: the cluster view's (every topic, led here or not; one being
    deleted is gone). ``view_topics`` gives the current view's topics by name."""

    def __init__(self, view_topics: Callable[[], Mapping[str, TopicMeta]]) -> None:
        self._view_topics = view_topics
        self._indexed: Mapping[str, TopicMeta] | None = None
        self._by_id: dict[uuid.UUID, str] = {}

    def by_name(self, name: str) -> TopicInfo | None:
        meta = self._view_topics().get(name)
        if meta is None or meta.deleting:
            return None
        return TopicInfo(meta.topic_id, name, meta.num_partitions)

    def by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        topics = self._view_topics()
        if topics is not self._indexed:  # a new view: index it once
            self._by_id = {meta.topic_id: name for name, meta in topics.items()}
            self._indexed = topics
        name = self._by_id.get(topic_id)
        return None if name is None else self.by_name(name)

    def names(self) -> Iterable[str]:
        return [name for name, meta in self._view_topics().items() if not meta.deleting]


def build_group_coordinator(cfg: BrokerConfig, clock: Clock, offsets_log: InternalTopicLog,
                            partition_exists: Callable[[str, int], bool],
                            transactions: Callable[[], TransactionCoordinator | None],
                            clustered: bool, topics: TopicImage | None = None,
                            store: SecurityStore | None = None) -> GroupCoordinatorHandle:
    """The coordinator over ``offsets_log`` with its timer driver (armed by :meth:`GroupCoordinatorHandle.start`);
    no partition loaded yet. ``transactions`` gives this broker's transaction coordinator (None while it is not
    loaded), ``clustered`` whether a transaction's coordinator may be on another broker."""

    def verify_transaction(transactional_id: str, producer_id: int, producer_epoch: int, partition: int) -> int:
        """TxnOffsetCommit writes only into the producer's ongoing transaction, once AddOffsetsToTxn added this
        ``__consumer_offsets`` partition to it: otherwise no marker would ever end what it writes. In a cluster the
        transaction's coordinator may be another broker: checked only where it is this one (Kafka's behaviour
        without KIP-890's verification request)."""
        txn = transactions()
        if txn is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if clustered and not txn.owns(txn.partition_for(transactional_id)):
            return ErrorCode.NONE
        return txn.verify_partition(producer_id, producer_epoch, OFFSETS_TOPIC, partition, transactional_id)

    coordinator = GroupCoordinator(offsets_log, offsets_log.num_partitions, clock, group_config(cfg),
                                   partition_exists=partition_exists, verify_transaction=verify_transaction,
                                   write_timeout_ms=cfg.offsets_commit_timeout_ms, topics=topics,
                                   group_overrides=GroupOverrides(store))
    # at most GROUP_TIMER_MAX_WAIT_MS between two looks at the clock, as Kafka's SystemTimer reaper advances its wheel
    # every 200 ms: deadlines are on the broker's clock, the event loop's timer on the process's monotonic one, so a
    # step of the broker's clock (a VM resumed, a test's skew) is noticed within that time, not a session later
    timer = DeadlineDriver("group-timers", clock.monotonic_ms, coordinator.next_deadline, coordinator.tick,
                           max_wait_ms=GROUP_TIMER_MAX_WAIT_MS)
    coordinator.on_timer = timer.wake
    return GroupCoordinatorHandle(coordinator, timer)


def build_single_node_groups(cfg: BrokerConfig, clock: Clock, topics: TopicRegistry, epoch: int,
                             transactions: Callable[[], TransactionCoordinator | None],
                             store: SecurityStore | None = None) -> GroupCoordinatorHandle:
    """A single node's group coordinator (it leads every ``__consumer_offsets`` partition, at the epoch of this
    start), not started, nothing loaded: ``handle.first_use`` loads the partitions (creating the topic when
    absent). ``store`` keeps the groups' configs."""
    offsets_log = InternalTopicLog(topics, clock, OFFSETS_TOPIC, cfg.offsets_topic_num_partitions,
                                   {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)})
    existing = topics.get(OFFSETS_TOPIC)
    if existing is not None:
        offsets_log.num_partitions = len(existing.partitions)

    def partition_exists(topic: str, partition: int) -> bool:
        view = topics.get(topic)
        return view is not None and 0 <= partition < len(view.partitions)

    handle = build_group_coordinator(cfg, clock, offsets_log, partition_exists, transactions, clustered=False,
                                     topics=RegistryTopicImage(topics), store=store)
    handle.first_use = LoadOnFirstUse(offsets_log, epoch, handle.coordinator.load)
    return handle


async def start_single_node_groups(cfg: BrokerConfig, clock: Clock, topics: TopicRegistry, epoch: int,
                                   transactions: Callable[[], TransactionCoordinator | None],
                                   store: SecurityStore | None = None) -> GroupCoordinatorHandle:
    """A single node: it leads every ``__consumer_offsets`` partition, at the epoch of this start. The partitions are
    loaded now when the topic exists, else on first use (``handle.first_use``, as Kafka creates the topic on the
    first FindCoordinator for a group). Returns the started handle."""
    handle = build_single_node_groups(cfg, clock, topics, epoch, transactions, store)
    assert handle.first_use is not None
    if handle.first_use.exists:
        await handle.first_use.ensure()
        groups = sum(len(shard.groups) for shard in handle.coordinator.runtime.shards().values())
        log.info("group coordinator: %d group(s) in %s", groups, OFFSETS_TOPIC)
    handle.start()
    return handle
