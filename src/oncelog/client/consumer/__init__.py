"""Consumer: group-managed subscriptions (join/sync/heartbeat, assignors, cooperative rebalancing) or manual
assignment, Fetch per leader, committed offsets, auto.offset.reset via ListOffsets."""

from .consumer import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    OFFSET_STORED,
    AsyncConsumer,
    Consumer,
)
from .fetcher import BatchFilter, Fetcher, ReadCommittedFilter, make_batch_filter
from .membership import GroupMembership, MemberState, Step
from .offsets import CommitFailedError

__all__ = [
    "OFFSET_BEGINNING",
    "OFFSET_END",
    "OFFSET_INVALID",
    "OFFSET_STORED",
    "AsyncConsumer",
    "BatchFilter",
    "CommitFailedError",
    "Consumer",
    "Fetcher",
    "GroupMembership",
    "MemberState",
    "ReadCommittedFilter",
    "Step",
    "make_batch_filter",
]
