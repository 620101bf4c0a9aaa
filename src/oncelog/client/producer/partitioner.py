"""Partition choice: murmur2 of the key (identical to Java's default partitioner and librdkafka's
``murmur2_random``), sticky partitioning for null keys."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from oncelog.protocol.murmur2 import partition_for_key

__all__ = ["Partitioner"]


class Partitioner:
    """Null keys stick to one partition until the batch they fill is closed (full or sent), then move to another
    available partition at random (KIP-480): records of one batch go together instead of one per partition.

    ``batch_open(topic, partition)`` tells whether the accumulator still has an open batch there.
    """

    def __init__(self, batch_open: Callable[[str, int], bool], rng: random.Random | None = None) -> None:
        self._batch_open = batch_open
        self._rng = rng or random.Random()
        self._sticky: dict[str, int] = {}
        self.sticky = self._sticky  # topic -> its sticky partition (read-only for callers: a shortcut)

    def partition(self, topic: str, key: bytes | None, partitions: Sequence[int],
                  available: Sequence[int] = ()) -> int:
        """``partitions``: every partition of the topic; ``available``: those with a leader (empty = all)."""
        if not partitions:
            raise ValueError(f"topic {topic!r} has no partitions")
        if key is not None:
            return partition_for_key(key, len(partitions))
        current = self._sticky.get(topic)
        if current is not None and self._batch_open(topic, current):
            return current
        return self.move_on(topic, partitions, available)

    def move_on(self, topic: str, partitions: Sequence[int], available: Sequence[int] = ()) -> int:
        """A new sticky partition for ``topic`` (another one, at random): the batch of the current one is full."""
        current = self._sticky.get(topic)
        choices = list(available or partitions)
        if current is not None and len(choices) > 1 and current in choices:
            choices.remove(current)
        chosen = self._rng.choice(choices)
        self._sticky[topic] = chosen
        return chosen

    def sticky_partition(self, topic: str) -> int | None:
        return self._sticky.get(topic)
