"""Producer: batching per partition, murmur2 key partitioning, sticky partitioning for null keys, idempotence
and transactions (including KIP-939 two-phase commit: :class:`PreparedTxnState`)."""

from .accumulator import BatchMessage, ProducerBatch, RecordAccumulator
from .partitioner import Partitioner
from .producer import AsyncProducer, Producer
from .txn_state import PreparedTxnState, TxnState

__all__ = ["AsyncProducer", "BatchMessage", "Partitioner", "PreparedTxnState", "Producer", "ProducerBatch",
           "RecordAccumulator", "TxnState"]
