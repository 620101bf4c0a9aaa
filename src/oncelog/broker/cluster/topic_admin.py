"""Topics in a cluster: CreateTopics and Metadata's auto-creation, CreatePartitions and DeleteTopics, written to
etcd and answered once this broker's view shows them.

Kafka's ``ControllerApis.createTopics`` -> ``ReplicationControlManager.createTopic`` on the KRaft controller; here
any broker decides and writes: replica placement is a pure decision over the view
(:func:`oncelog.cluster.placement.new_topic_partitions`: Kafka's ``StripedReplicaPlacer`` or the request's manual
assignment), and the etcd store's compare-and-swap creation makes exactly one of two concurrent creations of a name
win (the other gets TOPIC_ALREADY_EXISTS). The store returns once this broker's view shows the topic, so a Metadata
request that follows sees it. The replicas then create their logs from the view (the replica manager).

Auto-creation (Metadata with ``allow_auto_topic_creation``, Kafka's ``AutoTopicCreationManager``) takes the same
path with ``num.partitions`` and ``default.replication.factor``; the internal topics get their own settings
(``offsets.topic.replication.factor``, ``transaction.state.log.replication.factor`` ...).

CreatePartitions places the new partitions like CreateTopics (the replication factor of partition 0), a
compare-and-swap on the topic's partition count. DeleteTopics removes the topic from the view at once, as KRaft
does; every replica deletes its log when it sees that (or, if it was down, as a stray when it starts).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from oncelog.cluster.api_error import ApiError
from oncelog.cluster.model import TopicMeta
from oncelog.cluster.placement import new_partitions, new_topic_partitions
from oncelog.cluster.store import MetadataUnavailableError, TopicExistsInClusterError
from oncelog.protocol.errors import ErrorCode
from oncelog.storage import InvalidConfigError, InvalidTopicError, LogConfig, validate_topic_name

from .node import ClusterNode
from ..settings.config import BrokerConfig

__all__ = ["AutoCreator", "NewTopic", "auto_create_spec", "create_partitions", "create_topic", "delete_topic"]

log = logging.getLogger("oncelog.broker.topics")

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
_INTERNAL_SEGMENT_BYTES = str(100 * 1024 * 1024)
_WARN_EVERY_S = 10.0
_SEEN_TIMEOUT_S = 2.0
_CAS_ATTEMPTS = 5  # how long auto-creation waits to see a topic another broker created at the same time


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic as created (or as it would be, for ``validate_only``)."""

    name: str
    topic_id: uuid.UUID
    num_partitions: int
    replication_factor: int
    configs: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class _Spec:
    num_partitions: int
    replication_factor: int
    configs: Mapping[str, str]


def auto_create_spec(name: str, config: BrokerConfig) -> _Spec:
    """What an auto-created topic gets (Kafka's ``AutoTopicCreationManager.creatableTopic``)."""
    if name == OFFSETS_TOPIC:
        return _Spec(config.offsets_topic_num_partitions, config.offsets_topic_replication_factor,
                     MappingProxyType({"cleanup.policy": "compact", "segment.bytes": _INTERNAL_SEGMENT_BYTES}))
    if name == TRANSACTION_STATE_TOPIC:
        return _Spec(config.transaction_state_log_num_partitions, config.transaction_state_log_replication_factor,
                     MappingProxyType({"cleanup.policy": "compact", "segment.bytes": _INTERNAL_SEGMENT_BYTES,
                                       "min.insync.replicas": str(config.transaction_state_log_min_isr)}))
    return _Spec(config.num_partitions, config.default_replication_factor, MappingProxyType({}))


def _kafka_message(error: ApiError, replication_factor: int) -> ApiError:
    """Kafka's wording: ``ReplicationControlManager.createTopic`` prefixes the placer's message."""
    if error.code is ErrorCode.INVALID_REPLICATION_FACTOR and error.message and error.message.startswith("The target"):
        return ApiError(error.code, f"Unable to replicate the partition {replication_factor} time(s): "
                                    f"{error.message}")
    return error


async def create_topic(node: ClusterNode, name: str, num_partitions: int, replication_factor: int,
                       assignments: Sequence[tuple[int, Sequence[int]]], configs: Mapping[str, str | None],
                       defaults: LogConfig, *, validate_only: bool = False,
                       rng: random.Random | None = None) -> NewTopic | ApiError:
    """Create a topic cluster-wide (or only check that it could be, ``validate_only``).

    ``num_partitions`` / ``replication_factor`` of -1 mean the broker's defaults; ``assignments`` are manual
    (partition, replicas) pairs. Returns once the view shows the topic."""
    try:
        validate_topic_name(name)
    except InvalidTopicError as e:
        return ApiError(ErrorCode.INVALID_TOPIC_EXCEPTION, str(e))
    try:
        overrides = LogConfig.validate_overrides(configs)
        LogConfig.from_kafka(overrides, defaults)
    except InvalidConfigError as e:
        return ApiError(ErrorCode.INVALID_CONFIG, str(e))
    view = node.view
    if name in view.topics:
        return ApiError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    cfg = node.config
    states = new_topic_partitions(view, num_partitions, replication_factor, assignments, rng=rng or random.Random(),
                                  default_num_partitions=cfg.num_partitions,
                                  default_replication_factor=cfg.default_replication_factor)
    if isinstance(states, ApiError):
        rf = cfg.default_replication_factor if replication_factor == -1 else replication_factor
        return _kafka_message(states, rf)
    meta = TopicMeta(name, uuid.uuid4(), len(states), MappingProxyType(dict(overrides)))
    result = NewTopic(name, meta.topic_id, len(states), len(states[0].replicas), meta.configs)
    if validate_only:
        return result
    try:
        await node.store.create_topic(meta, states)
    except TopicExistsInClusterError:
        return ApiError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    except MetadataUnavailableError as e:
        return ApiError(ErrorCode.REQUEST_TIMED_OUT, f"the cluster metadata (etcd) did not take the topic: {e}; "
                                                     f"retry")
    leaders: dict[int, int] = {}
    for s in states:
        leaders[s.leader] = leaders.get(s.leader, 0) + 1
    log.info("created topic %s (id %s): %d partition(s), replication factor %d, leaders per broker %s", name,
             meta.topic_id, len(states), result.replication_factor, dict(sorted(leaders.items())))
    return result


async def create_partitions(node: ClusterNode, name: str, count: int, assignments: Sequence[Sequence[int]] | None,
                            *, validate_only: bool = False, rng: random.Random | None = None) -> ApiError | None:
    """Grow ``name`` to ``count`` partitions (Kafka's ``ReplicationControlManager.createPartitions``); None once the
    view shows them (or, ``validate_only``, once they could be created)."""
    rng = rng or random.Random()
    for _ in range(_CAS_ATTEMPTS):
        view = node.view
        states = new_partitions(view, name, count, assignments, rng=rng)
        if isinstance(states, ApiError):
            first = view.partition(name, 0)
            return _kafka_message(states, len(first.replicas) if first is not None else 0)
        if validate_only:
            return None
        current = view.topics[name].num_partitions
        try:
            if await node.store.add_partitions(name, current, states):
                log.info("topic %s grown from %d to %d partition(s)", name, current, count)
                return None
        except MetadataUnavailableError as e:
            return ApiError(ErrorCode.REQUEST_TIMED_OUT, f"the cluster metadata (etcd) did not take the partitions: "
                                                         f"{e}; retry")
        await node.store.wait_for_change(view.revision, timeout=1.0)  # the topic changed meanwhile: decide again
    return ApiError(ErrorCode.REQUEST_TIMED_OUT, f"topic {name} kept changing while its partitions were added; retry")


async def delete_topic(node: ClusterNode, name: str) -> ApiError | None:
    """Remove a topic from the cluster; None once the view no longer has it."""
    if not node.config.delete_topic_enable:
        return ApiError(ErrorCode.TOPIC_DELETION_DISABLED, "delete.topic.enable is false on this broker")
    if name in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC):
        return ApiError(ErrorCode.INVALID_REQUEST, f"{name} is an internal topic and cannot be deleted")
    try:
        if not await node.store.mark_topic_deleting(name):
            return ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        await node.store.remove_topic(name)
    except MetadataUnavailableError as e:
        return ApiError(ErrorCode.REQUEST_TIMED_OUT, f"the cluster metadata (etcd) did not take the deletion: {e}; "
                                                     f"retry")
    log.info("deleted topic %s", name)
    return None


class AutoCreator:
    """Metadata's auto-creation on one broker: creates through :func:`create_topic`, and says once per
    ``_WARN_EVERY_S`` per topic why a topic could not be created."""

    def __init__(self, node: ClusterNode) -> None:
        self.node = node
        self._warned: dict[str, float] = {}

    async def create(self, name: str, defaults: LogConfig) -> ApiError | None:
        """None once the view has the topic (created here or by a concurrent request), else the error."""
        spec = auto_create_spec(name, self.node.config)
        got = await create_topic(self.node, name, spec.num_partitions, spec.replication_factor, (), spec.configs,
                                 defaults)
        if isinstance(got, NewTopic):
            return None
        if got.code is ErrorCode.TOPIC_ALREADY_EXISTS:  # created meanwhile through another broker
            if await self._seen(name):
                return None
            return ApiError(ErrorCode.LEADER_NOT_AVAILABLE, f"topic {name} is being created; retry")
        now = time.monotonic()
        if now - self._warned.get(name, -_WARN_EVERY_S) >= _WARN_EVERY_S:
            self._warned[name] = now
            log.warning("cannot auto-create topic %s: %s", name, got)
        return got

    async def _seen(self, name: str) -> bool:
        """Wait (bounded) until this broker's view shows a topic another writer created."""
        store = self.node.store
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _SEEN_TIMEOUT_S
        view = store.view
        while name not in view.topics:
            left = deadline - loop.time()
            if left <= 0:
                return False
            view = await store.wait_for_change(view.revision, timeout=left)
        return True
