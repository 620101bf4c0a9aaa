"""What the layers above see of a partition's log: typing Protocols that PartitionLog satisfies (``log.py``
checks it), and the result of an append.

:class:`ReplicaLog` is the narrow part a replica of a partition needs, leader or follower (Kafka's ``UnifiedLog``
as ``Partition`` and the replica fetcher use it): append as leader (offsets assigned, the leader epoch stamped)
or as follower (offsets kept, Kafka's ``appendAsFollower``), truncate to an offset or fully (KIP-101/KIP-279,
Kafka's ``truncateTo`` / ``truncateFullyAndStartAt``), the leader-epoch cache (``assign_leader_epoch``,
``latest_epoch``, ``end_offset_for_epoch``: the answer to OffsetForLeaderEpoch), and the high watermark read and
set from outside. :class:`BrokerLog` adds what the broker's request handlers read and maintain.

The high watermark follows a :class:`HighWatermarkRule`. A single node keeps today's rule (the durable end of the
log when acks=all waits for fsync, the log end otherwise) without doing anything; a replicated partition sets the
rule to ``EXTERNAL`` and moves the high watermark itself (the minimum over the ISR on the leader, the leader's
value bounded by the local log end on a follower).
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from oncelog.protocol.records import BatchHeader

    from .config import LogConfig
    from .local_log import ReadResult
    from .producer_state import ActiveProducer, ProducerStateManager, TxnMetadata
    from .txn_index import AbortedTxn

__all__ = ["AppendResult", "BrokerLog", "HighWatermarkRule", "ReplicaLog"]


@dataclass(slots=True)
class AppendResult:
    """Where an append landed: its offsets, the log append time (-1 for CreateTime) and its largest timestamp."""

    first_offset: int
    last_offset: int
    log_append_time_ms: int  # -1 for CreateTime
    max_timestamp: int
    offset_of_max_timestamp: int


class HighWatermarkRule(enum.Enum):
    """Who moves a log's high watermark."""

    #: ``flush`` moves it to the durable end (single node, ``log.flush.interval.messages=1``: the default)
    DURABLE = "durable"
    #: every leader append moves it to the log end (single node with a background flush)
    LOG_END = "log_end"
    #: only ``update_high_watermark`` / ``maybe_increment_high_watermark`` (a replicated partition)
    EXTERNAL = "external"


class ReplicaLog(Protocol):
    """The log of one partition as a replica uses it."""

    @property
    def name(self) -> str: ...
    @property
    def log_start_offset(self) -> int: ...
    @property
    def log_end_offset(self) -> int: ...
    @property
    def durable_offset(self) -> int: ...
    @property
    def closed(self) -> bool: ...

    # ---- appends
    def append(self, payload: bytearray, headers: list[BatchHeader], *, log_append_time_ms: int | None = None,
               origin: str = ..., markers: dict[int, tuple[bool, int]] | None = None,
               leader_epoch: int | None = None) -> AppendResult:
        """As leader: assign offsets (and stamp ``leader_epoch``), validate producer state, write."""
        ...

    def append_marker(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                      timestamp_ms: int, *, log_append_time_ms: int | None = None,
                      leader_epoch: int | None = None) -> AppendResult: ...

    def append_as_follower(self, payload: bytearray, headers: list[BatchHeader]) -> AppendResult:
        """As follower: batches whose offsets the leader assigned, written as they are."""
        ...

    def flush(self) -> int: ...

    # ---- truncation (KIP-101 / KIP-279)
    def truncate_to(self, offset: int) -> bool: ...
    def truncate_fully_and_start_at(self, offset: int) -> None: ...

    # ---- leader epochs
    @property
    def latest_epoch(self) -> int | None: ...
    def assign_leader_epoch(self, epoch: int, start_offset: int) -> None: ...
    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]: ...

    # ---- high watermark
    @property
    def high_watermark(self) -> int: ...
    high_watermark_rule: HighWatermarkRule
    def update_high_watermark(self, offset: int) -> int: ...
    def maybe_increment_high_watermark(self, offset: int) -> bool: ...

    # ---- reads
    def read(self, offset: int, max_bytes: int, max_offset: int, *, min_one_batch: bool = True) -> ReadResult: ...
    def iter_batches(self, from_offset: int = 0, *,
                     chunk_bytes: int = ...) -> Iterator[tuple[BatchHeader, bytes]]: ...


class BrokerLog(ReplicaLog, Protocol):
    """Everything the broker's partitions and request handlers use of a log."""

    @property
    def config(self) -> LogConfig: ...
    @property
    def size_in_bytes(self) -> int: ...

    def first_unstable_offset(self) -> int | None: ...
    def last_stable_offset(self, high_watermark: int) -> int: ...
    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]: ...
    def offset_for_timestamp(self, ts_ms: int) -> tuple[int, int] | None: ...
    def max_timestamp_and_offset(self) -> tuple[int, int]: ...
    def delete_records_before(self, offset: int) -> int: ...
    def producer_states(self) -> list[ActiveProducer]: ...
    def ongoing_transactions(self) -> list[TxnMetadata]: ...
    def has_ongoing_transaction(self, producer_id: int, producer_epoch: int) -> bool: ...
    @property
    def producer_state_manager(self) -> ProducerStateManager: ...
    def expire_producers(self, now_ms: int, producer_id_expiration_ms: int) -> list[int]: ...
    def apply_retention(self, now_ms: int) -> int: ...
    def update_config(self, config: LogConfig) -> None: ...
