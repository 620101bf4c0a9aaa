"""What the consumer group coordinator reads of the cluster's topics (Kafka's MetadataImage, as the group coordinator
sees it): a topic's id and partition count by name or by id, and every topic name (server-side regular expressions).

The broker supplies the image (its topic registry on a single node, the cluster view in a cluster); tests use
:class:`MemoryTopicImage`. The coordinator reads it inside its operations, so what an operation decides and the
records it writes always come from one look at the topics.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

__all__ = ["MemoryTopicImage", "TopicImage", "TopicInfo"]


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic as a group's subscription metadata records it (ConsumerGroupPartitionMetadataValue.TopicMetadata)."""

    topic_id: uuid.UUID
    name: str
    num_partitions: int


class TopicImage(Protocol):
    def by_name(self, name: str) -> TopicInfo | None:
        """The topic named ``name``, None when there is none (or it is being deleted)."""
        ...

    def by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        """The topic with this id, None when there is none."""
        ...

    def names(self) -> Iterable[str]:
        """Every topic's name (regular expression subscriptions match against these)."""
        ...


class MemoryTopicImage:
    """A topic image held in a dict (tests, and the empty image of a coordinator built without topics)."""

    def __init__(self, topics: Iterable[TopicInfo] = ()) -> None:
        self._by_name: dict[str, TopicInfo] = {}
        self._by_id: dict[uuid.UUID, TopicInfo] = {}
        for t in topics:
            self.put(t)

    def put(self, topic: TopicInfo) -> None:
        old = self._by_name.get(topic.name)
        if old is not None:
            self._by_id.pop(old.topic_id, None)
        self._by_name[topic.name] = topic
        self._by_id[topic.topic_id] = topic

    def add(self, name: str, num_partitions: int) -> TopicInfo:
        """Create (or grow, keeping its id) a topic; returns it."""
        old = self._by_name.get(name)
        topic = TopicInfo(old.topic_id if old is not None else uuid.uuid4(), name, num_partitions)
        self.put(topic)
        return topic

    def remove(self, name: str) -> None:
        old = self._by_name.pop(name, None)
        if old is not None:
            self._by_id.pop(old.topic_id, None)

    def by_name(self, name: str) -> TopicInfo | None:
        return self._by_name.get(name)

    def by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._by_id.get(topic_id)

    def names(self) -> Iterable[str]:
        return list(self._by_name)
