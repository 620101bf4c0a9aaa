"""Helpers shared by handlers: error mapping and topic lookup."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.protocol.errors import ErrorCode
from oncelog.storage import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    TopicExistsError,
    UnknownTopicError,
)

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.partition import Partition
    from oncelog.broker.topics import TopicView

__all__ = ["error_for", "leadership_error", "lookup_or_create", "missing_partition_error"]


def leadership_error(partition: "Partition", current_leader_epoch: int) -> ErrorCode:
    """NONE when this broker leads ``partition`` at the epoch the request names (-1: any); a single node leads
    every partition at epoch 0. The epoch is checked first, as Kafka's Partition.localLogWithEpochOrThrow does: a
    request from a newer epoch than this broker knows (UNKNOWN_LEADER_EPOCH) is retried soon, this broker may be
    about to lead at it."""
    if current_leader_epoch > partition.leader_epoch:
        return ErrorCode.UNKNOWN_LEADER_EPOCH
    if 0 <= current_leader_epoch < partition.leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    if not partition.is_leader:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    return ErrorCode.NONE


def missing_partition_error(broker: "BrokerContext", topic: str, index: int, default: ErrorCode) -> ErrorCode:
    """For a partition this broker has no log of: in a cluster whose view has it, another broker holds it
    (NOT_LEADER_OR_FOLLOWER sends the client to its metadata); ``default`` otherwise."""
    if broker.cluster is not None and broker.cluster.view.partition(topic, index) is not None:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    return default


def error_for(exc: BaseException) -> tuple[ErrorCode, str]:
    """Kafka error code and message for an exception raised by the storage layer."""
    if isinstance(exc, OffsetOutOfRangeError):
        return ErrorCode.OFFSET_OUT_OF_RANGE, str(exc)
    if isinstance(exc, TopicExistsError):
        return ErrorCode.TOPIC_ALREADY_EXISTS, str(exc)
    if isinstance(exc, InvalidTopicError):
        return ErrorCode.INVALID_TOPIC_EXCEPTION, str(exc)
    if isinstance(exc, UnknownTopicError):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, str(exc)
    if isinstance(exc, InvalidPartitionsError):
        return ErrorCode.INVALID_PARTITIONS, str(exc)
    if isinstance(exc, InvalidConfigError):
        return ErrorCode.INVALID_CONFIG, str(exc)
    if isinstance(exc, KafkaStorageError):
        return ErrorCode.KAFKA_STORAGE_ERROR, str(exc)
    return ErrorCode.UNKNOWN_SERVER_ERROR, f"{type(exc).__name__}: {exc}"


def lookup_or_create(broker: "BrokerContext", name: str, allow_auto_create: bool) -> "TopicView | None":
    view = broker.topics.get(name)
    if view is None and allow_auto_create and broker.config.auto_create_topics_enable:
        try:
            view = broker.topics.create(name, broker.config.num_partitions)
        except (InvalidTopicError, TopicExistsError):
            view = broker.topics.get(name)
    return view
