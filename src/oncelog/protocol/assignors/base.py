"""What every assignor shares: the interface, and the partitions each member may get."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence

from ._model import Assignment, Subscription, TopicPartition

__all__ = ["Assignor", "partitions_of", "sorted_members"]


class Assignor(ABC):
    """A pure partition assignor, run by the group leader on every member's Subscription.

    ``assign`` returns an Assignment for every member of ``subscriptions`` (possibly empty). Topics a member
    subscribes to but that are missing from ``partitions_per_topic`` (no metadata) are skipped, as Kafka does.
    """

    name: str = ""
    rebalance_protocols: tuple[str, ...] = ("eager",)

    def subscription_user_data(
        self, topics: Sequence[str], owned_partitions: Sequence[TopicPartition], generation_id: int
    ) -> bytes | None:
        """The user data this member puts in its Subscription (None: the assignor needs none)."""
        return None

    @abstractmethod
    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]: ...

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


def sorted_members(subscriptions: Mapping[str, Subscription]) -> list[str]:
    """Members in Kafka's order (by member id; we do not see group instance ids here)."""
    return sorted(subscriptions)


def partitions_of(topic: str, partitions_per_topic: Mapping[str, int]) -> list[TopicPartition]:
    return [(topic, p) for p in range(partitions_per_topic.get(topic, 0))]
