"""Consumer group partition assignors and the consumer protocol's Subscription/Assignment codecs.

Pure functions of the members' subscriptions and the topics' partition counts, shared by the client (the group
leader runs them) and the broker (which only relays the bytes). Results match Kafka's assignors of the same
names for the same input (see each module for where ties may resolve differently)::

    a = get_assignor("cooperative-sticky")
    sub = Subscription(["t"], a.subscription_user_data(["t"], owned, generation), owned, generation)
    assignments = a.assign({"t": 6}, {member_id: decode_subscription(metadata), ...})
"""

from __future__ import annotations

from ._model import Assignment, Subscription, TopicPartition
from .base import Assignor
from .codec import decode_assignment, decode_subscription, encode_assignment, encode_subscription
from .range import RangeAssignor
from .roundrobin import RoundRobinAssignor
from .sticky import CooperativeStickyAssignor, StickyAssignor

__all__ = [
    "ASSIGNOR_NAMES",
    "Assignment",
    "Assignor",
    "CooperativeStickyAssignor",
    "RangeAssignor",
    "RoundRobinAssignor",
    "StickyAssignor",
    "Subscription",
    "TopicPartition",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
    "get_assignor",
]

_ASSIGNORS: dict[str, type[Assignor]] = {
    "range": RangeAssignor,
    "roundrobin": RoundRobinAssignor,
    "sticky": StickyAssignor,
    "cooperative-sticky": CooperativeStickyAssignor,
}
ASSIGNOR_NAMES: tuple[str, ...] = tuple(_ASSIGNORS)


def get_assignor(name: str) -> Assignor:
    """A fresh assignor by its protocol name (partition.assignment.strategy value)."""
    cls = _ASSIGNORS.get(name)
    if cls is None:
        raise ValueError(
            f"unknown partition assignor {name!r}: choose one of {', '.join(ASSIGNOR_NAMES)} "
            "(partition.assignment.strategy)"
        )
    return cls()
