"""oncelog.storage: the durable partition log (segments, indexes, recovery, retention) and topic metadata."""

from .catalog import CATALOG_FILE, TopicCatalog, TopicInfo
from .config import TOPIC_CONFIG_KEYS, ConfigKey, LogConfig
from .errors import (
    DuplicateSequenceError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidProducerEpochError,
    InvalidTopicError,
    InvalidTxnStateError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    ProducerStateError,
    SequenceAfterRefusedBatchError,
    StorageError,
    TopicExistsError,
    TransactionCoordinatorFencedError,
    UnexpectedAppendOffsetError,
    UnknownProducerIdError,
    UnknownTopicError,
)
from .index import OffsetIndex, TimeIndex
from .interface import BrokerLog, HighWatermarkRule, ReplicaLog
from .leader_epoch import LEADER_EPOCH_CHECKPOINT, EpochEntry, LeaderEpochCache
from .log import CHECKPOINT_FILE, AppendResult, PartitionLog, ReadResult, RollHook
from .log_manager import CLEAN_SHUTDOWN_FILE, LogManager, validate_topic_name
from .producer_state import (
    ORIGIN_CLIENT,
    ORIGIN_COORDINATOR,
    ORIGIN_REPLICATION,
    ActiveProducer,
    ProducerStateEntry,
    ProducerStateManager,
    TxnMetadata,
)
from .segment import Segment
from .txn_index import AbortedTxn, TransactionIndex

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
