"""What a transactional producer needs to know of a consumer's group to commit its offsets in a transaction
(``Producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata())``).

The broker fences a TxnOffsetCommit whose generation or member id is stale (KIP-447), so a zombie copier that
lost its partitions in a rebalance cannot commit offsets for them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ConsumerGroupMetadata"]


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None
