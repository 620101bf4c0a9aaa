"""Kafka's RangeAssignor: per topic, consecutive ranges of partitions; the first members get one extra."""

from __future__ import annotations

from collections.abc import Mapping

from ._model import Assignment, Subscription, TopicPartition
from .base import Assignor, sorted_members

__all__ = ["RangeAssignor"]


class RangeAssignor(Assignor):
    name = "range"
    rebalance_protocols = ("eager",)

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        members = sorted_members(subscriptions)
        out: dict[str, list[TopicPartition]] = {m: [] for m in members}
        topics = sorted({t for s in subscriptions.values() for t in s.topics})
        for topic in topics:
            n = partitions_per_topic.get(topic)
            if n is None:
                continue  # no metadata for this topic: Kafka skips it
            consumers = [m for m in members if topic in subscriptions[m].topics]
            per_consumer, extra = divmod(n, len(consumers))
            for i, member in enumerate(consumers):
                start = per_consumer * i + min(i, extra)
                length = per_consumer + (1 if i < extra else 0)
                out[member].extend((topic, p) for p in range(start, start + length))
        return {m: Assignment(partitions=ps) for m, ps in out.items()}
