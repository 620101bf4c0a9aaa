"""oncelog.coordinator.transaction: Kafka's transaction coordinator (state table, metadata, log records,
producer id blocks, the decisions, the marker driver, the coordinator service)."""

from .coordinator import (
    OFFSETS_TOPIC,
    InitProducerIdResult,
    TransactionConfig,
    TransactionCoordinator,
    TxnCoordinatorConfig,
    TxnDescription,
    TxnListing,
    TxnListResult,
)
from .markers import MarkerChannel, MarkerDriver, MarkerResults, PendingCompletion, TxnMarker
from .metadata import IllegalTransitionError, TransactionMetadata, TxnError, TxnTransitMetadata
from .partitioner import java_string_hash, partition_for
from .producer_ids import FileProducerIdStore, ProducerIdManager
from .records import decode_key, decode_value, encode_txn_record
from .shard import TransactionShard
from .state import VALID_PREVIOUS, TxnState

__all__ = [
    "OFFSETS_TOPIC",
    "VALID_PREVIOUS",
    "FileProducerIdStore",
    "IllegalTransitionError",
    "InitProducerIdResult",
    "MarkerChannel",
    "MarkerDriver",
    "MarkerResults",
    "PendingCompletion",
    "ProducerIdManager",
    "TransactionConfig",
    "TransactionCoordinator",
    "TransactionMetadata",
    "TransactionShard",
    "TxnCoordinatorConfig",
    "TxnDescription",
    "TxnError",
    "TxnListResult",
    "TxnListing",
    "TxnMarker",
    "TxnState",
    "TxnTransitMetadata",
    "decode_key",
    "decode_value",
    "encode_txn_record",
    "java_string_hash",
    "partition_for",
]
