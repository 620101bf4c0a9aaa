"""Codecs of the records Kafka's coordinators write to their internal topics.

``__consumer_offsets``: key = ``int16 version`` + OffsetCommitKey (version 0/1) or GroupMetadataKey (version 2), or
one of the consumer group (KIP-848) keys, whose version is their record type (3-8, 16: :data:`CONSUMER_GROUP_RECORDS`);
value = ``int16 version`` + the value of that key (null value = tombstone).
``__transaction_state``: key = ``int16 version`` + TransactionLogKey (version 0); value = ``int16 version`` +
TransactionLogValue.

The classes are generated (``oncelog.protocol.messages.coordinator``); the leading version is written and read
here.
"""

from __future__ import annotations

import struct
from typing import Any, TypeVar

from ._runtime import Message, ProtocolDecodeError
from .messages.coordinator import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    TransactionLogKey,
    TransactionLogValue,
)
from .messages.coordinator.group_metadata_value import MemberMetadata
from .messages.coordinator.transaction_log_value import PartitionsSchema

__all__ = [
    "CONSUMER_GROUP_RECORDS",
    "ConsumerGroupKey",
    "decode_consumer_group_key",
    "decode_consumer_group_value",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberMetadata",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "TransactionLogKey",
    "TransactionLogValue",
    "PartitionsSchema",
    "encode_record",
    "decode_record",
    "decode_offsets_key",
    "decode_offsets_value",
    "decode_transaction_key",
    "decode_transaction_value",
]

_S_h = struct.Struct(">h")
M = TypeVar("M", bound=Message)


def encode_record(message: Message, version: int | None = None) -> bytes:
    """``int16 version`` + the encoded key or value (``version`` defaults to the newest)."""
    if version is None:
        version = type(message).MAX_VERSION
    return _S_h.pack(version) + message.encode(version)


def _version(buf: Any) -> int:
    try:
        (version,) = _S_h.unpack_from(buf, 0)
    except struct.error:
        raise ProtocolDecodeError("coordinator record shorter than its version prefix") from None
    return int(version)


def decode_record(cls: type[M], buf: Any) -> tuple[int, M]:
    """Decode ``int16 version`` + body of ``cls``; return (version, message)."""
    version = _version(buf)
    if not cls.MIN_VERSION <= version <= cls.MAX_VERSION:
        raise ProtocolDecodeError(f"{cls.NAME}: unsupported version {version}")
    return version, cls.decode_from(buf, version, 2)[0]


def decode_offsets_key(buf: Any) -> OffsetCommitKey | GroupMetadataKey:
    """A ``__consumer_offsets`` key: versions 0-1 are offset commits, 2 is group metadata."""
    version = _version(buf)
    if version in (0, 1):
        return OffsetCommitKey.decode_from(buf, version, 2)[0]
    if version == 2:
        return GroupMetadataKey.decode_from(buf, version, 2)[0]
    raise ProtocolDecodeError(f"unknown __consumer_offsets key version {version}")


def decode_offsets_value(key: OffsetCommitKey | GroupMetadataKey, buf: Any) -> OffsetCommitValue | GroupMetadataValue:
    if isinstance(key, OffsetCommitKey):
        return decode_record(OffsetCommitValue, buf)[1]
    return decode_record(GroupMetadataValue, buf)[1]


def decode_transaction_key(buf: Any) -> TransactionLogKey:
    return decode_record(TransactionLogKey, buf)[1]


def decode_transaction_value(buf: Any) -> TransactionLogValue:
    return decode_record(TransactionLogValue, buf)[1]


#: The consumer group records of ``__consumer_offsets`` (Kafka's GroupCoordinatorRecordSerde): key version (the
#: record type) -> (key class, value class)
CONSUMER_GROUP_RECORDS: dict[int, tuple[type[Message], type[Message]]] = {
    3: (ConsumerGroupMetadataKey, ConsumerGroupMetadataValue),
    4: (ConsumerGroupPartitionMetadataKey, ConsumerGroupPartitionMetadataValue),
    5: (ConsumerGroupMemberMetadataKey, ConsumerGroupMemberMetadataValue),
    6: (ConsumerGroupTargetAssignmentMetadataKey, ConsumerGroupTargetAssignmentMetadataValue),
    7: (ConsumerGroupTargetAssignmentMemberKey, ConsumerGroupTargetAssignmentMemberValue),
    8: (ConsumerGroupCurrentMemberAssignmentKey, ConsumerGroupCurrentMemberAssignmentValue),
    16: (ConsumerGroupRegularExpressionKey, ConsumerGroupRegularExpressionValue),
}

ConsumerGroupKey = (ConsumerGroupMetadataKey | ConsumerGroupPartitionMetadataKey | ConsumerGroupMemberMetadataKey
                    | ConsumerGroupTargetAssignmentMetadataKey | ConsumerGroupTargetAssignmentMemberKey
                    | ConsumerGroupCurrentMemberAssignmentKey | ConsumerGroupRegularExpressionKey)


def decode_consumer_group_key(buf: Any) -> Any:
    """A consumer group key of ``__consumer_offsets``, or None when the key is another type (offsets, classic
    groups, or records of group types oncelog does not serve, such as share groups)."""
    version = _version(buf)
    entry = CONSUMER_GROUP_RECORDS.get(version)
    if entry is None:
        return None
    return entry[0].decode_from(buf, version, 2)[0]


def decode_consumer_group_value(key: Any, buf: Any) -> Any:
    """The value of a consumer group key (its newest version this codec knows; a newer one fails to decode)."""
    for key_cls, value_cls in CONSUMER_GROUP_RECORDS.values():
        if isinstance(key, key_cls):
            return decode_record(value_cls, buf)[1]
    raise ProtocolDecodeError(f"not a consumer group key: {type(key).__name__}")
