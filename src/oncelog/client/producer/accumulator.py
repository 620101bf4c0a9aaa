"""Per-partition batching into :class:`RecordBatchBuilder` (Kafka's RecordAccumulator).

Idempotence: the sender gives a batch its producer id, epoch and base sequence when it first drains it
(:meth:`ProducerBatch.set_producer`); a retry sends the same bytes, so the sequence is kept.

Thread-safe: the sync facade appends from the caller's thread while the sender drains on the event loop thread.
A batch is *ready* when it is full (``batch.size``), older than ``linger.ms``, or a flush is in progress.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from oncelog.protocol.records import RecordBatchBuilder

from ..errors import KafkaError
from ..message import Header, Message
from .idempotence import stamp_batch

__all__ = ["DeliveryCallback", "ProducerBatch", "RecordAccumulator", "TopicPartition"]

TopicPartition = tuple[str, int]
DeliveryCallback = Callable[[KafkaError | None, Message], None]


@dataclass(slots=True)
class _Pending:
    message: Message
    on_complete: DeliveryCallback | None


@dataclass(slots=True)
class ProducerBatch:
    tp: TopicPartition
    builder: RecordBatchBuilder
    created: float
    records: list[_Pending] = field(default_factory=list)
    closed: bool = False
    attempts: int = 0
    retry_at: float = 0.0
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1  # -1: not yet assigned (or not idempotent)
    transactional: bool = False
    _built: bytes | None = None

    @property
    def size(self) -> int:
        return self.builder.size_in_bytes

    @property
    def record_count(self) -> int:
        return len(self.records)

    def set_producer(self, producer_id: int, epoch: int, base_sequence: int, transactional: bool) -> None:
        self.producer_id, self.producer_epoch, self.base_sequence = producer_id, epoch, base_sequence
        self.transactional = transactional
        self._built = None

    def build(self) -> bytes:
        if self._built is None:
            raw = self.builder.build()
            if self.producer_id >= 0:
                raw = stamp_batch(raw, self.producer_id, self.producer_epoch, self.base_sequence,
                                  self.transactional)
            self._built = raw
        return self._built

    def complete(self, base_offset: int, log_append_time: int, error: KafkaError | None) -> list[
            tuple[DeliveryCallback, KafkaError | None, Message]]:
        """Fill offsets (or the error) into the batch's messages; return the callbacks to run."""
        out: list[tuple[DeliveryCallback, KafkaError | None, Message]] = []
        for i, rec in enumerate(self.records):
            m = rec.message
            if error is None:
                m.offset = base_offset + i if base_offset >= 0 else -1
                if log_append_time >= 0:
                    m.timestamp = log_append_time
            else:
                m.error = error
            if rec.on_complete is not None:
                out.append((rec.on_complete, error, m))
        return out


class RecordAccumulator:
    def __init__(self, batch_size: int, linger_ms: int, compression: int, *,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.batch_size = batch_size
        self.linger = linger_ms / 1000
        self.compression = compression
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._batches: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._flushing = 0
        self.pending_records = 0  # appended but not yet completed (in queues or in flight)

    def append(self, tp: TopicPartition, timestamp_ms: int, key: bytes | None, value: bytes | None,
               headers: Sequence[Header], on_complete: DeliveryCallback | None) -> tuple[bool, bool]:
        """Add one record; returns (batch now full, new batch created) so the caller knows to wake the sender."""
        msg = Message(tp[0], tp[1], -1, key, value, list(headers), timestamp_ms)
        with self._lock:
            q = self._batches.get(tp)
            if q is None:
                q = self._batches[tp] = deque()
            batch = q[-1] if q and not q[-1].closed else None
            new = False
            if batch is not None and batch.records and batch.size + _estimate(key, value, headers) > self.batch_size:
                batch.closed = True
                batch = None
            if batch is None:
                batch = ProducerBatch(tp, RecordBatchBuilder(self.compression), self._monotonic())
                q.append(batch)
                new = True
            batch.builder.append(timestamp_ms, key, value, headers)
            batch.records.append(_Pending(msg, on_complete))
            self.pending_records += 1
            if batch.size >= self.batch_size:
                batch.closed = True
            return batch.closed, new

    def batch_open(self, topic: str, partition: int) -> bool:
        q = self._batches.get((topic, partition))
        return bool(q) and not q[-1].closed  # type: ignore[index]

    def begin_flush(self) -> None:
        with self._lock:
            self._flushing += 1

    def end_flush(self) -> None:
        with self._lock:
            self._flushing -= 1

    def ready(self, muted: set[TopicPartition]) -> tuple[list[TopicPartition], float | None]:
        """Partitions whose first batch may be sent now, and the delay until the next one could be (None: idle)."""
        now = self._monotonic()
        out: list[TopicPartition] = []
        next_delay: float | None = None
        with self._lock:
            for tp, q in self._batches.items():
                if not q or tp in muted:
                    continue
                b = q[0]
                if b.retry_at > now:
                    wait = b.retry_at - now
                elif b.closed or len(q) > 1 or self._flushing or now - b.created >= self.linger:
                    out.append(tp)
                    continue
                else:
                    wait = b.created + self.linger - now
                next_delay = wait if next_delay is None else min(next_delay, wait)
        return out, next_delay

    def drain(self, tps: Sequence[TopicPartition]) -> list[ProducerBatch]:
        """Take the first batch of each partition (closing it to appends)."""
        out = []
        with self._lock:
            for tp in tps:
                q = self._batches.get(tp)
                if q:
                    b = q.popleft()
                    b.closed = True
                    out.append(b)
        return out

    def reenqueue(self, batch: ProducerBatch, retry_at: float) -> None:
        """Put a batch back at the front of its partition for a retry at ``retry_at`` (order is kept)."""
        batch.retry_at = retry_at
        with self._lock:
            self._batches.setdefault(batch.tp, deque()).appendleft(batch)

    def done(self, batch: ProducerBatch) -> None:
        with self._lock:
            self.pending_records -= len(batch.records)

    def abort_all(self) -> list[ProducerBatch]:
        with self._lock:
            out = [b for q in self._batches.values() for b in q]
            self._batches.clear()
            return out


def _estimate(key: bytes | None, value: bytes | None, headers: Sequence[Header]) -> int:
    n = 21 + (len(key) if key else 0) + (len(value) if value else 0)
    for k, v in headers:
        n += len(k) + (len(v) if v else 0) + 10
    return n
