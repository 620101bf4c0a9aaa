"""oncelog.coordinator.transaction: Kafka's transaction coordinator (state table, metadata, log records,
producer id blocks, the decisions, the marker driver, the coordinator service).

The names load on first use (PEP 562): importing one submodule (the marker types a broker's marker writer
needs) does not import the coordinator with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what each name is, for type checkers (at run time: __getattr__)
    from .coordinator import (
        OFFSETS_TOPIC, InitProducerIdResult, TransactionConfig, TransactionCoordinator, TxnCoordinatorConfig,
        TxnDescription, TxnListing, TxnListResult,
    )
    from .markers import MarkerChannel, MarkerDriver, MarkerResults, PendingCompletion, TxnMarker
    from .metadata import IllegalTransitionError, TransactionMetadata, TxnError, TxnTransitMetadata
    from .partitioner import java_string_hash, partition_for
    from .producer_ids import FileProducerIdStore, ProducerIdManager
    from .records import decode_key, decode_value, encode_txn_record
    from .shard import TransactionShard
    from .state import VALID_PREVIOUS, TxnState

#: public name -> the submodule that defines it
_WHERE: dict[str, str] = {
    **dict.fromkeys([
        "OFFSETS_TOPIC", "InitProducerIdResult", "TransactionConfig", "TransactionCoordinator",
        "TxnCoordinatorConfig", "TxnDescription", "TxnListing", "TxnListResult"
    ], "coordinator"),
    **dict.fromkeys([
        "MarkerChannel", "MarkerDriver", "MarkerResults", "PendingCompletion", "TxnMarker"
    ], "markers"),
    **dict.fromkeys([
        "IllegalTransitionError", "TransactionMetadata", "TxnError", "TxnTransitMetadata"
    ], "metadata"),
    **dict.fromkeys(["java_string_hash", "partition_for"], "partitioner"),
    **dict.fromkeys(["FileProducerIdStore", "ProducerIdManager"], "producer_ids"),
    **dict.fromkeys(["decode_key", "decode_value", "encode_txn_record"], "records"),
    **dict.fromkeys(["TransactionShard"], "shard"),
    **dict.fromkeys(["VALID_PREVIOUS", "TxnState"], "state"),
}

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


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{where}"), name)
    globals()[name] = value  # the next access is a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
