"""oncelog.storage: the durable partition log (segments, indexes, recovery, retention) and topic metadata.

The public names load on first use (PEP 562): a broker on a fresh data folder opens its catalog without importing
the partition log, record batches or the cleaner, which load with the first topic.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what each name is, for type checkers (at run time: __getattr__)
    from .catalog import CATALOG_FILE, TopicCatalog, TopicInfo
    from .config import TOPIC_CONFIG_KEYS, ConfigKey, LogConfig
    from .errors import (
        DuplicateSequenceError, InvalidConfigError, InvalidPartitionsError, InvalidProducerEpochError,
        InvalidTopicError, InvalidTxnStateError, KafkaStorageError, OffsetOutOfRangeError,
        OutOfOrderSequenceError, ProducerFencedError, ProducerStateError, SequenceAfterRefusedBatchError,
        StorageError, TopicExistsError, TransactionCoordinatorFencedError, UnexpectedAppendOffsetError,
        UnknownProducerIdError, UnknownTopicError,
    )
    from .index import OffsetIndex, TimeIndex
    from .interface import BrokerLog, HighWatermarkRule, ReplicaLog
    from .leader_epoch import LEADER_EPOCH_CHECKPOINT, EpochEntry, LeaderEpochCache
    from .log import CHECKPOINT_FILE, AppendResult, PartitionLog, ReadResult, RollHook
    from .log_manager import CLEAN_SHUTDOWN_FILE, LogManager, validate_topic_name
    from .producer_state import (
        ORIGIN_CLIENT, ORIGIN_COORDINATOR, ORIGIN_REPLICATION, ActiveProducer, ProducerStateEntry,
        ProducerStateManager, TxnMetadata,
    )
    from .segment import Segment
    from .txn_index import AbortedTxn, TransactionIndex

#: public name -> the submodule that defines it
_WHERE: dict[str, str] = {
    **dict.fromkeys(["CATALOG_FILE", "TopicCatalog", "TopicInfo"], "catalog"),
    **dict.fromkeys(["TOPIC_CONFIG_KEYS", "ConfigKey", "LogConfig"], "config"),
    **dict.fromkeys([
        "DuplicateSequenceError", "InvalidConfigError", "InvalidPartitionsError",
        "InvalidProducerEpochError", "InvalidTopicError", "InvalidTxnStateError", "KafkaStorageError",
        "OffsetOutOfRangeError", "OutOfOrderSequenceError", "ProducerFencedError", "ProducerStateError",
        "SequenceAfterRefusedBatchError", "StorageError", "TopicExistsError",
        "TransactionCoordinatorFencedError", "UnexpectedAppendOffsetError", "UnknownProducerIdError",
        "UnknownTopicError"
    ], "errors"),
    **dict.fromkeys(["OffsetIndex", "TimeIndex"], "index"),
    **dict.fromkeys(["BrokerLog", "HighWatermarkRule", "ReplicaLog"], "interface"),
    **dict.fromkeys(["LEADER_EPOCH_CHECKPOINT", "EpochEntry", "LeaderEpochCache"], "leader_epoch"),
    **dict.fromkeys(["CHECKPOINT_FILE", "AppendResult", "PartitionLog", "ReadResult", "RollHook"], "log"),
    **dict.fromkeys(["CLEAN_SHUTDOWN_FILE", "LogManager", "validate_topic_name"], "log_manager"),
    **dict.fromkeys([
        "ORIGIN_CLIENT", "ORIGIN_COORDINATOR", "ORIGIN_REPLICATION", "ActiveProducer", "ProducerStateEntry",
        "ProducerStateManager", "TxnMetadata"
    ], "producer_state"),
    **dict.fromkeys(["Segment"], "segment"),
    **dict.fromkeys(["AbortedTxn", "TransactionIndex"], "txn_index"),
}

__all__ = [
    "CATALOG_FILE",
    "CHECKPOINT_FILE",
    "CLEAN_SHUTDOWN_FILE",
    "LEADER_EPOCH_CHECKPOINT",
    "ORIGIN_CLIENT",
    "ORIGIN_COORDINATOR",
    "ORIGIN_REPLICATION",
    "TOPIC_CONFIG_KEYS",
    "AbortedTxn",
    "ActiveProducer",
    "AppendResult",
    "BrokerLog",
    "ConfigKey",
    "DuplicateSequenceError",
    "EpochEntry",
    "HighWatermarkRule",
    "InvalidConfigError",
    "InvalidPartitionsError",
    "InvalidProducerEpochError",
    "InvalidTopicError",
    "InvalidTxnStateError",
    "KafkaStorageError",
    "LeaderEpochCache",
    "LogConfig",
    "LogManager",
    "OffsetIndex",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "PartitionLog",
    "ProducerFencedError",
    "ProducerStateEntry",
    "ProducerStateError",
    "ProducerStateManager",
    "ReadResult",
    "ReplicaLog",
    "RollHook",
    "Segment",
    "SequenceAfterRefusedBatchError",
    "StorageError",
    "TimeIndex",
    "TopicCatalog",
    "TopicExistsError",
    "TopicInfo",
    "TransactionCoordinatorFencedError",
    "TransactionIndex",
    "TxnMetadata",
    "UnexpectedAppendOffsetError",
    "UnknownProducerIdError",
    "UnknownTopicError",
    "validate_topic_name",
]


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{where}"), name)
    globals()[name] = value  # the next access is a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
