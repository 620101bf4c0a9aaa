"""What the admin operations return: topic, partition, config, offset, transaction, producer and group
descriptions (frozen dataclasses), and the constants their arguments use (resource types, offset specs,
transaction states)."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

__all__ = [
    "RESOURCE_BROKER",
    "RESOURCE_TOPIC",
    "TXN_STATES",
    "ConfigEntry",
    "GroupDescription",
    "GroupListing",
    "GroupMember",
    "HangingTransaction",
    "ListedOffset",
    "PartitionDescription",
    "ProducerState",
    "Spec",
    "TopicDescription",
    "TopicListing",
    "TopicPartition",
    "TransactionDescription",
    "TransactionListing",
    "decode_consumer_assignment",
]

#: DescribeConfigs/IncrementalAlterConfigs resource types (Kafka's ConfigResource.Type)
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4

#: ``"earliest"``, ``"latest"``, ``"max_timestamp"`` or a timestamp in ms (first offset at or after it; or a
#: confluent-kafka ``OffsetSpec``, :class:`~oncelog.client.admin.admin_client.OffsetSpec`)
Spec = str | int
#: (topic, partition)
TopicPartition = tuple[str, int]

#: Transaction states as Kafka's admin APIs name them (ListTransactions state filters, DescribeTransactions).
TXN_STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead",
              "PrepareEpochFence")


@dataclass(frozen=True, slots=True)
class TopicListing:
    name: str
    topic_id: str
    partitions: int
    is_internal: bool


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    log_start_offset: int
    high_watermark: int
    last_stable_offset: int
    leader_epoch: int = -1  # -1: the broker's Metadata did not give it


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    topic_id: str
    is_internal: bool
    partitions: list[PartitionDescription] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: str
    is_default: bool
    read_only: bool
    is_sensitive: bool

    @property
    def is_read_only(self) -> bool:
        """confluent-kafka's name of ``read_only``."""
        return self.read_only


@dataclass(frozen=True, slots=True)
class ListedOffset:
    offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str
    coordinator_id: int


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    transactional_id: str
    coordinator_id: int
    state: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    #: wall-clock ms the current transaction started, None when there is none
    transaction_start_time_ms: int | None
    topic_partitions: list[TopicPartition] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ProducerState:
    """A producer with state on a partition (DescribeProducers)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    #: epoch of the coordinator that wrote this producer's last marker here, None if none was written yet
    coordinator_epoch: int | None
    #: first offset of the producer's open transaction on the partition, None if it has none
    current_txn_start_offset: int | None


@dataclass(frozen=True, slots=True)
class HangingTransaction:
    """An open transaction on a partition that the coordinator will not end (see ``find_hanging_transactions``)."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int | None
    start_offset: int
    last_timestamp: int
    duration_ms: int
    transactional_id: str | None
    reason: str


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
    coordinator_id: int


@dataclass(frozen=True, slots=True)
class GroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    #: partitions assigned to the member (decoded ConsumerProtocolAssignment; empty for other protocols)
    assignment: list[TopicPartition] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    coordinator_id: int
    state: str
    protocol_type: str
    #: the assignor chosen for the generation (e.g. ``range``), empty when the group has none
    protocol: str
    members: list[GroupMember] = field(default_factory=list)


def decode_consumer_assignment(data: bytes) -> list[TopicPartition]:
    """The partitions of a ConsumerProtocolAssignment (any version: int16 version, then
    [topic: int16-length string, [int32 partition]]; later fields are ignored). Empty/garbled bytes give []."""
    if not data or len(data) < 6:
        return []
    try:
        pos = 2
        (n_topics,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out: list[TopicPartition] = []
        for _ in range(max(n_topics, 0)):
            (ln,) = struct.unpack_from(">h", data, pos)
            pos += 2
            topic = bytes(data[pos:pos + ln]).decode()
            pos += ln
            (n_parts,) = struct.unpack_from(">i", data, pos)
            pos += 4
            for _ in range(max(n_parts, 0)):
                (p,) = struct.unpack_from(">i", data, pos)
                pos += 4
                out.append((topic, p))
        return sorted(out)
    except (struct.error, UnicodeDecodeError):
        return []
