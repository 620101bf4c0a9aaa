"""The broker settings the group coordinator obeys (Kafka's names and defaults)."""

from __future__ import annotations

from dataclasses import dataclass

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
