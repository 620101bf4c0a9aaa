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
    from oncelog.broker.topics import TopicView

__all__ = ["error_for", "lookup_or_create"]


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
