"""A partition as the broker serves it: its log, high watermark, and the waiters on both.

The high watermark of this single-node broker is the durable end of the log when produce is durable per append
(``log.flush.interval.messages=1``, the default) and the log end otherwise: the log keeps it
(``HighWatermarkRule``), the partition wakes the readers waiting for it. This broker leads every partition at
leader epoch 0, recorded in the log's leader-epoch cache when it takes the partition (Kafka's makeLeader) and
stamped on every batch it appends.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import deque
from typing import TYPE_CHECKING, Callable

from oncelog.storage.interface import HighWatermarkRule

if TYPE_CHECKING:
    from oncelog.protocol.records import BatchHeader
    from oncelog.storage import AppendResult
    from oncelog.storage.interface import BrokerLog

__all__ = ["Partition"]

#: bytes of a COMMIT/ABORT control batch (61-byte header + one 17-byte record), for the group-commit heuristics
CONTROL_BATCH_SIZE = 78
#: the leader epoch of every partition of this single node
LEADER_EPOCH = 0


class Partition:
    def __init__(
        self,
        topic: str,
        index: int,
        topic_id: uuid.UUID,
        log: "BrokerLog",
        *,
        durable_per_append: bool,
        mark_dirty: Callable[["Partition", int, bool], None],
    ) -> None:
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.log = log
        self.durable_per_append = durable_per_append
        self._mark_dirty = mark_dirty
        self.leader_epoch = LEADER_EPOCH
        log.high_watermark_rule = HighWatermarkRule.DURABLE if durable_per_append else HighWatermarkRule.LOG_END
        log.assign_leader_epoch(self.leader_epoch, log.log_end_offset)
        self._notified_hw = log.high_watermark
        self.deleted = False
        self._durable_waiters: deque[tuple[int, asyncio.Future[None]]] = deque()
        self._hw_future: asyncio.Future[None] | None = None

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.index})"

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def last_stable_offset(self) -> int:
        """First offset of the earliest transaction not yet decided below the high watermark, else the HW."""
        return self.log.last_stable_offset(self.high_watermark)

    def append(self, payload: bytearray, headers: list["BatchHeader"], log_append_time_ms: int | None,
               origin: str = "client", lazy: bool = False) -> "AppendResult":
        """Append validated batches; producer-state errors (storage.ProducerStateError) propagate unchanged.
        ``lazy``: nobody waits for this append's durability now, so it starts no fsync round of its own (see
        ``GroupCommitFlusher.mark_dirty``); the high watermark still advances only once it is durable."""
        result = self.log.append(payload, headers, log_append_time_ms=log_append_time_ms, origin=origin,
                                 leader_epoch=self.leader_epoch)
        self._appended(len(payload), lazy)
        return result

    def append_marker(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                      timestamp_ms: int) -> "AppendResult":
        """Write a COMMIT/ABORT control batch ending ``producer_id``'s transaction on this partition."""
        result = self.log.append_marker(producer_id, producer_epoch, commit, coordinator_epoch, timestamp_ms,
                                        leader_epoch=self.leader_epoch)
        self._appended(CONTROL_BATCH_SIZE)
        return result

    def _appended(self, nbytes: int, lazy: bool = False) -> None:
        if self.durable_per_append:
            self._mark_dirty(self, nbytes, lazy)
        else:  # nobody waits for the disk: the broker's periodic flush (log.flush.interval.ms) covers it
            self._notify_if_advanced()  # the log moved the high watermark to its end

    def wait_durable(self, last_offset: int) -> asyncio.Future[None]:
        """A future done once every offset <= last_offset is on disk (immediately if it already is)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.log.durable_offset > last_offset or not self.durable_per_append:
            fut.set_result(None)
        else:
            self._durable_waiters.append((last_offset, fut))
        return fut

    def on_durable(self, durable_offset: int) -> None:
        waiters = self._durable_waiters
        while waiters and waiters[0][0] < durable_offset:
            _, fut = waiters.popleft()
            if not fut.done():
                fut.set_result(None)
        if self.durable_per_append:
            self._notify_if_advanced()  # the log's flush moved the high watermark to the durable end

    def _notify_if_advanced(self) -> None:
        hw = self.log.high_watermark
        if hw > self._notified_hw:
            self._notified_hw = hw
            self.notify_readers()

    def notify_readers(self) -> None:
        fut = self._hw_future
        if fut is not None:
            self._hw_future = None
            if not fut.done():
                fut.set_result(None)

    def data_available(self) -> asyncio.Future[None]:
        """A future done at the next advance of the high watermark (long-poll fetches wait on it)."""
        if self._hw_future is None or self._hw_future.done():
            self._hw_future = asyncio.get_running_loop().create_future()
        return self._hw_future

    def reset_after_truncation(self) -> None:
        """After DeleteRecords/retention the log start moved (the log keeps the high watermark at or above it)."""
        self._notified_hw = max(self._notified_hw, self.log.high_watermark)

    def fail_waiters(self, exc: BaseException) -> None:
        while self._durable_waiters:
            _, fut = self._durable_waiters.popleft()
            if not fut.done():
                fut.set_exception(exc)
        self.notify_readers()
