"""``__transaction_state`` records in Kafka's exact format.

key = int16 0 + TransactionLogKey v0 (the transactional id); value = int16 version + TransactionLogValue, or
None (a tombstone: the id expired). oncelog writes value version 1 (flexible; previous/next producer id and the
client transaction version are tagged fields), which Kafka 4 reads; version 0 records (Kafka 3.x) are read too.
Partitions are grouped by topic (sorted, so equal states encode to equal bytes); an Empty state stores null.
The log has no field for the last producer epoch, so a loaded transaction has ``last_producer_epoch = -1`` (as
in Kafka: a KIP-360 retry that spans a coordinator reload is fenced).
"""

from __future__ import annotations

from collections import defaultdict
from functools import lru_cache

from oncelog.protocol._runtime import ProtocolDecodeError
from oncelog.protocol.coordinator_records import (
    PartitionsSchema,
    TransactionLogKey,
    TransactionLogValue,
    decode_record,
    encode_record,
)

from .metadata import NO_PRODUCER_EPOCH, TopicPartition, TxnTransitMetadata
from .state import TxnState

__all__ = [
    "KEY_VERSION",
    "VALUE_VERSION",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_txn_record",
    "encode_value",
]

KEY_VERSION = 0
VALUE_VERSION = 1


@lru_cache(maxsize=1 << 14)  # every state change of a transactional id writes its key again
def encode_key(transactional_id: str) -> bytes:
    return encode_record(TransactionLogKey(transactional_id=transactional_id), KEY_VERSION)


@lru_cache(maxsize=1 << 12)  # a transaction's Ongoing and Prepare* records carry the same partitions
def _group(partitions: frozenset[TopicPartition]) -> tuple[PartitionsSchema, ...]:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic, p in partitions:
        by_topic[topic].append(p)
    return tuple(PartitionsSchema(topic=t, partition_ids=sorted(ps)) for t, ps in sorted(by_topic.items()))


def encode_value(t: TxnTransitMetadata, version: int = VALUE_VERSION) -> bytes:
    if t.state is TxnState.EMPTY and t.topic_partitions:
        raise ValueError(f"an Empty transaction must have no partitions: {t}")
    value = TransactionLogValue(
        producer_id=t.producer_id,
        previous_producer_id=t.prev_producer_id if version >= 1 else -1,
        next_producer_id=t.next_producer_id if version >= 1 else -1,
        producer_epoch=t.producer_epoch,
        transaction_timeout_ms=t.txn_timeout_ms,
        transaction_status=int(t.state),
        transaction_partitions=None if t.state is TxnState.EMPTY else list(_group(t.topic_partitions)),
        transaction_last_update_timestamp_ms=t.txn_last_update_timestamp,
        transaction_start_timestamp_ms=t.txn_start_timestamp,
        client_transaction_version=t.client_transaction_version if version >= 1 else 0,
    )
    return encode_record(value, version)


def encode_txn_record(transactional_id: str, t: TxnTransitMetadata,
                      version: int = VALUE_VERSION) -> tuple[bytes, bytes | None]:
    """The record for a transit; Dead is written as a tombstone."""
    key = encode_key(transactional_id)
    if t.state is TxnState.DEAD:
        return key, None
    return key, encode_value(t, version)


def decode_key(key: bytes | bytearray | memoryview) -> str | None:
    """The transactional id, or None for a key version this log does not hold (skipped, as Kafka does)."""
    if len(key) < 2:
        raise ProtocolDecodeError("transaction log key shorter than its version")
    version = int.from_bytes(bytes(key[:2]), "big", signed=True)
    if version != KEY_VERSION:
        return None
    return decode_record(TransactionLogKey, key)[1].transactional_id


def decode_value(value: bytes | bytearray | memoryview) -> TxnTransitMetadata:
    _, v = decode_record(TransactionLogValue, value)
    state = TxnState.from_id(v.transaction_status)
    tps: frozenset[TopicPartition] = frozenset()
    if state is not TxnState.EMPTY and v.transaction_partitions:
        tps = frozenset((ps.topic, p) for ps in v.transaction_partitions for p in ps.partition_ids)
    return TxnTransitMetadata(
        producer_id=v.producer_id, prev_producer_id=v.previous_producer_id, next_producer_id=v.next_producer_id,
        producer_epoch=v.producer_epoch, last_producer_epoch=NO_PRODUCER_EPOCH,
        txn_timeout_ms=v.transaction_timeout_ms, state=state, topic_partitions=tps,
        txn_start_timestamp=v.transaction_start_timestamp_ms,
        txn_last_update_timestamp=v.transaction_last_update_timestamp_ms,
        client_transaction_version=v.client_transaction_version)
