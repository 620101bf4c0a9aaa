"""Storage-layer exceptions. Each names what failed, on what, and what the caller or operator can do.

The broker maps them to Kafka error codes:

    OffsetOutOfRangeError   -> OFFSET_OUT_OF_RANGE (1)
    InvalidTopicError       -> INVALID_TOPIC_EXCEPTION (17)
    TopicExistsError        -> TOPIC_ALREADY_EXISTS (36)
    UnknownTopicError       -> UNKNOWN_TOPIC_OR_PARTITION (3)
    InvalidPartitionsError  -> INVALID_PARTITIONS (37)
    InvalidConfigError      -> INVALID_CONFIG (40)
    KafkaStorageError       -> KAFKA_STORAGE_ERROR (56)
"""

from __future__ import annotations

__all__ = [
    "InvalidConfigError",
    "InvalidPartitionsError",
    "InvalidTopicError",
    "KafkaStorageError",
    "OffsetOutOfRangeError",
    "StorageError",
    "TopicExistsError",
    "UnknownTopicError",
]


class StorageError(Exception):
    """Base class of every oncelog.storage error."""


class OffsetOutOfRangeError(StorageError):
    def __init__(self, topic: str, partition: int, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset
        super().__init__(
            f"offset {offset} is out of range for {topic}-{partition} "
            f"(valid offsets are {log_start_offset}..{log_end_offset}); "
            f"reset the consumer position to the log start or end offset"
        )


class InvalidTopicError(StorageError, ValueError):
    """The topic name is not legal (characters, length, '.'/'..') or collides with an existing one."""


class TopicExistsError(StorageError):
    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"topic {name!r} already exists; pick another name or delete the topic first")


class UnknownTopicError(StorageError, KeyError):
    def __init__(self, name: str, partition: int | None = None) -> None:
        self.name = name
        self.partition = partition
        what = f"topic {name!r}" if partition is None else f"partition {name}-{partition}"
        super().__init__(f"{what} does not exist on this broker; create it first or check the name")

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return str(self.args[0])


class InvalidPartitionsError(StorageError, ValueError):
    """A partition count is < 1, or add_partitions would not increase the count."""


class InvalidConfigError(StorageError, ValueError):
    """A topic config key is unknown or its value does not parse/validate."""

    def __init__(self, message: str, key: str | None = None) -> None:
        self.key = key
        super().__init__(message)


class KafkaStorageError(StorageError, OSError):
    """An I/O error on the data directory (disk full, permissions, failing device)."""
