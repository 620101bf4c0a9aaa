"""The consumer protocol's subscription and assignment, as the assignors and the group consumer see them."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Assignment", "Subscription", "TopicPartition"]

TopicPartition = tuple[str, int]


@dataclass
class Subscription:
    """One member's JoinGroup metadata: its topics, its assignor's user data, what it owns and since when.

    ``generation_id`` -1 means "not known" (subscriptions below version 2); ``rack_id`` None means no rack.
    """

    topics: list[str]
    user_data: bytes | None = None
    owned_partitions: list[TopicPartition] = field(default_factory=list)
    generation_id: int = -1
    rack_id: str | None = None


@dataclass
class Assignment:
    """What the leader gives one member in SyncGroup."""

    partitions: list[TopicPartition]
    user_data: bytes | None = None
