"""Kafka's RoundRobinAssignor: all subscribed partitions sorted, dealt in turn to the members sorted by id,
skipping members not subscribed to the partition's topic."""

from __future__ import annotations

from collections.abc import Mapping

from ._model import Assignment, Subscription, TopicPartition
from .base import Assignor, partitions_of, sorted_members

__all__ = ["RoundRobinAssignor"]


class RoundRobinAssignor(Assignor):
    name = "roundrobin"
    rebalance_protocols = ("eager",)

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        members = sorted_members(subscriptions)
        out: dict[str, list[TopicPartition]] = {m: [] for m in members}
        if not members:
            return {}
        topic_sets = {m: set(subscriptions[m].topics) for m in members}
        topics = sorted(set().union(*topic_sets.values()))
        cursor = 0  # the circular iterator over the sorted members
        for topic in topics:
            for tp in partitions_of(topic, partitions_per_topic):
                while topic not in topic_sets[members[cursor]]:
                    cursor = (cursor + 1) % len(members)
                out[members[cursor]].append(tp)
                cursor = (cursor + 1) % len(members)
        return {m: Assignment(partitions=ps) for m, ps in out.items()}
