"""confluent-kafka's ``TopicPartition``: topic, partition, offset, metadata, leader_epoch, error.

Equality, hashing and ordering use (topic, partition) only, as in confluent-kafka, and the hash is that of the
tuple ``(topic, partition)``: inside the client partitions are plain tuples, so an object and its tuple find the
same entry of a dict or set. The client accepts ``TopicPartition`` objects and, for compatibility with older
oncelog code, ``(topic, partition[, offset])`` tuples wherever it takes partitions; it returns objects.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .errors import KafkaError

__all__ = ["OFFSET_BEGINNING", "OFFSET_END", "OFFSET_INVALID", "OFFSET_STORED", "TopicPartition", "split",
           "to_offsets", "tp_list"]

OFFSET_BEGINNING = -2
OFFSET_END = -1
OFFSET_STORED = -1000  # the group's committed offset (confluent-kafka's value)
OFFSET_INVALID = -1001  # no offset: committed offset if there is a group, else auto.offset.reset


class TopicPartition:
    __slots__ = ("error", "leader_epoch", "metadata", "offset", "partition", "topic")

    def __init__(self, topic: str, partition: int = -1, offset: int = OFFSET_INVALID, metadata: str | None = None,
                 leader_epoch: int | None = None, error: KafkaError | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.metadata = metadata
        self.leader_epoch = leader_epoch
        self.error = error

    def __hash__(self) -> int:
        return hash((self.topic, self.partition))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TopicPartition):
            return self.topic == other.topic and self.partition == other.partition
        if isinstance(other, tuple) and len(other) == 2:
            return (self.topic, self.partition) == other
        return NotImplemented

    def __lt__(self, other: TopicPartition) -> bool:
        return (self.topic, self.partition) < (other.topic, other.partition)

    def __repr__(self) -> str:
        return (f"TopicPartition{{topic={self.topic},partition={self.partition},offset={self.offset},"
                f"leader_epoch={self.leader_epoch},error={self.error!r}}}")

    __str__ = __repr__


def split(item: Any) -> tuple[tuple[str, int], int | None]:
    """``TopicPartition`` or ``(topic, partition[, offset])`` -> ((topic, partition), offset or None)."""
    if isinstance(item, TopicPartition):
        return (item.topic, item.partition), (None if item.offset == OFFSET_INVALID else item.offset)
    if not isinstance(item, (tuple, list)) or len(item) not in (2, 3):
        raise TypeError(f"expected a TopicPartition or (topic, partition[, offset]), got {item!r}")
    offset = item[2] if len(item) == 3 else None
    return (str(item[0]), int(item[1])), (None if offset is None else int(offset))


def to_offsets(offsets: Iterable[Any] | Mapping[Any, int]) -> dict[tuple[str, int], int]:
    """[TopicPartition] / [(topic, partition, offset)] / {(topic, partition): offset} -> {tp: offset >= 0}."""
    if isinstance(offsets, Mapping):
        return {split(k)[0]: int(o) for k, o in offsets.items()}
    out = {}
    for item in offsets:
        tp, off = split(item)
        if off is None or off < 0:
            raise ValueError(f"an offset >= 0 is needed for {tp[0]}[{tp[1]}], got {off!r}")
        out[tp] = off
    return out


def tp_list(items: Iterable[tuple[str, int]], offsets: Mapping[tuple[str, int], int] | None = None
            ) -> list[TopicPartition]:
    """Sorted TopicPartition objects for internal (topic, partition) tuples, with offsets if given."""
    if offsets is None:
        return [TopicPartition(t, p) for t, p in sorted(items)]
    return [TopicPartition(t, p, offsets.get((t, p), OFFSET_INVALID)) for t, p in sorted(items)]
