"""What the consumer consumes: its subscription (topic names and ``^regex`` patterns) or manual assignment, the
assigned partitions, the paused ones, and the ones still waiting for their committed offset.

Positions live in the :class:`~.fetcher.Fetcher`; this object only says which partitions are ours. Kafka's
SubscriptionState, minus the positions.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Sequence

__all__ = ["SubscriptionMode", "SubscriptionState", "TopicPartition"]

TopicPartition = tuple[str, int]


class SubscriptionMode(enum.Enum):
    NONE = "none"
    AUTO = "subscribe"  # group-managed assignment
    MANUAL = "assign"


class SubscriptionState:
    def __init__(self) -> None:
        self.mode = SubscriptionMode.NONE
        self.topics: tuple[str, ...] = ()
        self.patterns: tuple[re.Pattern[str], ...] = ()
        self.assigned: dict[TopicPartition, None] = {}  # ordered set
        self.paused: set[TopicPartition] = set()
        #: assigned partitions whose start offset is the group's committed offset, not yet fetched
        self.awaiting_committed: dict[TopicPartition, None] = {}

    # ---------------------------------------------------------------- subscription

    def subscribe(self, topics: Sequence[str]) -> None:
        """Names, or regular expressions when they start with ``^`` (librdkafka's convention)."""
        if isinstance(topics, str):
            raise TypeError("subscribe() takes a list of topics, e.g. subscribe(['orders'])")
        if self.mode is SubscriptionMode.MANUAL:
            raise ValueError("subscribe() after assign(): call unassign() first (a consumer either subscribes "
                             "or assigns partitions itself)")
        names, patterns = [], []
        for t in topics:
            if not isinstance(t, str) or not t:
                raise ValueError(f"topic names must be non-empty strings, got {t!r}")
            if t.startswith("^"):
                try:
                    patterns.append(re.compile(t))
                except re.error as e:
                    raise ValueError(f"subscription pattern {t!r} is not a valid regular expression: {e}") from None
            else:
                names.append(t)
        if not names and not patterns:
            raise ValueError("subscribe() needs at least one topic; use unsubscribe() to stop consuming")
        self.mode = SubscriptionMode.AUTO
        self.topics = tuple(dict.fromkeys(names))
        self.patterns = tuple(patterns)

    def unsubscribe(self) -> None:
        self.mode = SubscriptionMode.NONE
        self.topics, self.patterns = (), ()
        self.clear_assignment()

    @property
    def auto(self) -> bool:
        return self.mode is SubscriptionMode.AUTO

    @property
    def has_patterns(self) -> bool:
        return bool(self.patterns)

    def matching(self, known_topics: Iterable[str], internal: Iterable[str] = ()) -> list[str]:
        """The topics this subscription stands for: the named ones plus known (non-internal) topics matching a
        pattern."""
        out = dict.fromkeys(self.topics)
        if self.patterns:
            skip = set(internal)
            for t in sorted(known_topics):
                if t not in skip and any(p.match(t) for p in self.patterns):
                    out[t] = None
        return sorted(out)

    # ---------------------------------------------------------------- assignment

    def set_manual(self) -> None:
        if self.mode is SubscriptionMode.AUTO:
            raise ValueError("assign() while subscribed: call unsubscribe() first (a consumer either subscribes "
                             "or assigns partitions itself)")
        self.mode = SubscriptionMode.MANUAL

    def assign(self, tps: Iterable[TopicPartition], *, await_committed: bool) -> None:
        for tp in tps:
            self.assigned[tp] = None
            if await_committed:
                self.awaiting_committed[tp] = None

    def unassign(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self.assigned.pop(tp, None)
            self.paused.discard(tp)
            self.awaiting_committed.pop(tp, None)
        if not self.assigned and self.mode is SubscriptionMode.MANUAL:
            self.mode = SubscriptionMode.NONE

    def clear_assignment(self) -> None:
        self.unassign(list(self.assigned))

    def assignment(self) -> list[TopicPartition]:
        return sorted(self.assigned)

    def pause(self, tps: Iterable[TopicPartition]) -> list[TopicPartition]:
        """Pause assigned partitions; returns those that were not assigned (ignored)."""
        unknown = []
        for tp in tps:
            if tp in self.assigned:
                self.paused.add(tp)
            else:
                unknown.append(tp)
        return unknown

    def resume(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self.paused.discard(tp)
