"""oncelog.storage: the durable partition log (segments, indexes, recovery, retention) and topic metadata."""

from .catalog import CATALOG_FILE, TopicCatalog, TopicInfo
from .config import TOPIC_CONFIG_KEYS, ConfigKey, LogConfig
from .errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    StorageError,
    TopicExistsError,
    UnknownTopicError,
)
from .index import OffsetIndex, TimeIndex
from .log import CHECKPOINT_FILE, AppendResult, PartitionLog, ReadResult, RollHook
from .log_manager import CLEAN_SHUTDOWN_FILE, LogManager, validate_topic_name
from .segment import Segment

__all__ = [
    "CATALOG_FILE",
    "CHECKPOINT_FILE",
    "CLEAN_SHUTDOWN_FILE",
    "TOPIC_CONFIG_KEYS",
    "AppendResult",
    "ConfigKey",
    "InvalidConfigError",
    "InvalidPartitionsError",
    "InvalidTopicError",
    "KafkaStorageError",
    "LogConfig",
    "LogManager",
    "OffsetIndex",
    "OffsetOutOfRangeError",
    "PartitionLog",
    "ReadResult",
    "RollHook",
    "Segment",
    "StorageError",
    "TimeIndex",
    "TopicCatalog",
    "TopicExistsError",
    "TopicInfo",
    "UnknownTopicError",
    "validate_topic_name",
]
