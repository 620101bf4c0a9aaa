"""The broker settings the group coordinator obeys (Kafka's names and defaults)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["GroupConfig"]


@dataclass
class GroupConfig:
    """Broker settings the group coordinator obeys (Kafka's names and defaults)."""
    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    max_size: int = 2_147_483_647  # group.max.size
    offsets_retention_ms: int = 10080 * 60_000  # offsets.retention.minutes
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    # consumer groups (KIP-848)
    consumer_session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    consumer_heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    consumer_max_size: int = 2_147_483_647  # group.consumer.max.size
    #: group.consumer.assignors: the server-side assignors by name, the first the default
    consumer_assignors: list[str] = field(default_factory=lambda: ["uniform", "range"])
    consumer_migration_policy: str = "bidirectional"  # group.consumer.migration.policy
