"""Wire codecs of the consumer protocol's Subscription and Assignment (JoinGroup/SyncGroup member metadata).

Both are a big-endian int16 version followed by the versioned body of ConsumerProtocolSubscription.json /
ConsumerProtocolAssignment.json (generated codecs in ``protocol/messages/consumer_protocol``). Like Kafka's
``ConsumerProtocol``, data of a version newer than ours is decoded with our newest version (newer versions only
append fields), trailing bytes are ignored, and a negative version is an error.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from oncelog.protocol._runtime import ProtocolDecodeError
from oncelog.protocol.messages.consumer_protocol.consumer_protocol_assignment import (
    ConsumerProtocolAssignment,
)
from oncelog.protocol.messages.consumer_protocol.consumer_protocol_assignment import (
    TopicPartition as _AssignedTopic,
)
from oncelog.protocol.messages.consumer_protocol.consumer_protocol_subscription import (
    ConsumerProtocolSubscription,
)
from oncelog.protocol.messages.consumer_protocol.consumer_protocol_subscription import (
    TopicPartition as _OwnedTopic,
)

from ._model import Assignment, Subscription, TopicPartition

__all__ = ["decode_assignment", "decode_subscription", "encode_assignment", "encode_subscription"]

_VERSION = struct.Struct(">h")
SUBSCRIPTION_MAX_VERSION = ConsumerProtocolSubscription.MAX_VERSION
ASSIGNMENT_MAX_VERSION = ConsumerProtocolAssignment.MAX_VERSION


def _group_by_topic(partitions: Iterable[TopicPartition]) -> list[tuple[str, list[int]]]:
    """(topic, partitions) in the order topics first appear, as Kafka's TopicPartitionCollection does."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return list(by_topic.items())


def _check_encode_version(what: str, version: int, highest: int) -> None:
    if not 0 <= version <= highest:
        raise ValueError(f"cannot encode a consumer protocol {what} at version {version}: versions 0-{highest} exist")


def _read_version(what: str, data: bytes | bytearray | memoryview, highest: int) -> int:
    if len(data) < 2:
        raise ProtocolDecodeError(
            f"consumer protocol {what} of {len(data)} bytes is too short to hold its version; "
            "the member's JoinGroup/SyncGroup metadata is corrupt or not from a Kafka consumer"
        )
    version: int = _VERSION.unpack_from(data, 0)[0]
    if version < 0:
        raise ProtocolDecodeError(f"unsupported consumer protocol {what} version {version} (negative)")
    return min(version, highest)


def encode_subscription(sub: Subscription, version: int = SUBSCRIPTION_MAX_VERSION) -> bytes:
    """Serialize ``sub`` as JoinGroup protocol metadata (fields newer than ``version`` are dropped)."""
    _check_encode_version("subscription", version, SUBSCRIPTION_MAX_VERSION)
    msg = ConsumerProtocolSubscription(
        topics=list(sub.topics),
        user_data=sub.user_data,
        owned_partitions=[_OwnedTopic(t, ps) for t, ps in _group_by_topic(sub.owned_partitions)],
        generation_id=sub.generation_id,
        rack_id=sub.rack_id,
    )
    return _VERSION.pack(version) + msg.encode(version)


def decode_subscription(data: bytes | bytearray | memoryview) -> Subscription:
    """Parse JoinGroup protocol metadata of any version; raises ProtocolDecodeError on corrupt data."""
    version = _read_version("subscription", data, SUBSCRIPTION_MAX_VERSION)
    msg, _ = ConsumerProtocolSubscription.decode_from(data, version, 2)
    return Subscription(
        topics=list(msg.topics),
        user_data=msg.user_data,
        owned_partitions=[(tp.topic, p) for tp in msg.owned_partitions for p in tp.partitions],
        generation_id=msg.generation_id,
        rack_id=msg.rack_id or None,
    )


def encode_assignment(asg: Assignment, version: int = ASSIGNMENT_MAX_VERSION) -> bytes:
    """Serialize ``asg`` as SyncGroup member assignment."""
    _check_encode_version("assignment", version, ASSIGNMENT_MAX_VERSION)
    msg = ConsumerProtocolAssignment(
        assigned_partitions=[_AssignedTopic(t, ps) for t, ps in _group_by_topic(asg.partitions)],
        user_data=asg.user_data,
    )
    return _VERSION.pack(version) + msg.encode(version)


def decode_assignment(data: bytes | bytearray | memoryview) -> Assignment:
    """Parse a SyncGroup member assignment of any version; raises ProtocolDecodeError on corrupt data.

    Empty data is an empty assignment: the coordinator sends that to a member the leader gave nothing.
    """
    if len(data) == 0:
        return Assignment(partitions=[])
    version = _read_version("assignment", data, ASSIGNMENT_MAX_VERSION)
    msg, _ = ConsumerProtocolAssignment.decode_from(data, version, 2)
    return Assignment(
        partitions=[(tp.topic, p) for tp in msg.assigned_partitions for p in tp.partitions],
        user_data=msg.user_data,
    )
