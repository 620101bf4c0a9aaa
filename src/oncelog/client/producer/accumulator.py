"""Per-partition batching into :class:`RecordBatchBuilder` (Kafka's RecordAccumulator).

Idempotence: the sender gives a batch its producer id, epoch and base sequence when it first drains it
(:meth:`ProducerBatch.set_producer`); a retry sends the same bytes, so the sequence is kept.

A batch may also come pre-encoded (``Producer.produce_batch``: built from columns by
:mod:`oncelog.protocol.record_batch_columnar`, without producer fields): it is queued closed, after the
partition's open batch (which is closed too, so the records keep their order), stamped by the sender like any
other batch, and reported once, with a :class:`BatchMessage`.

An open batch holds its records as they were queued, in columns (keys, values, timestamps, callbacks; the few
header lists by record index; the keys only up to the last record that has one): no object per record for the
garbage collector to walk while records wait. Its exact uncompressed size is counted as each record is appended
(:func:`_record_size`); the records are encoded in one loop (:meth:`RecordBatchBuilder.extend`) when the sender
builds the batch, into the bytes appending them one by one would give.

Thread-safe: the sync facade appends from the caller's thread while the sender drains on the event loop thread.
A batch is *ready* when it is full (``batch.size``), older than ``linger.ms``, or a flush is in progress.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from itertools import count, repeat
from dataclasses import dataclass, field

from oncelog.protocol.records import BATCH_HEADER_SIZE, RecordBatchBuilder
from oncelog.protocol.varint import varint_size

from ..errors import KafkaError
from ..message import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Header, Message, ReportMessage
from .idempotence import stamp_batch

__all__ = ["BatchMessage", "DeliveryCallback", "ProducerBatch", "RecordAccumulator", "TopicPartition"]

TopicPartition = tuple[str, int]
DeliveryCallback = Callable[[KafkaError | None, Message], None]


class BatchMessage(Message):
    """The delivery report of a pre-encoded batch (``produce_batch``): ``offset()`` is its first record's offset
    (None if not known), ``count`` its number of records; ``key()`` and ``value()`` are None, ``timestamp()`` is
    the first record's (or the log append time)."""

    __slots__ = ("_tstype", "count")

    def __init__(self, topic: str, partition: int, offset: int, timestamp: int, count: int) -> None:
        Message.__init__(self, topic, partition, offset, None, None, (), timestamp)
        self._tstype = TIMESTAMP_CREATE_TIME
        self.count = count


#: a queued record, as :attr:`ProducerBatch.records` lists them: (key, value, headers, timestamp, callback)
_Pending = tuple[bytes | None, bytes | None, Sequence[Header], int, DeliveryCallback | None]


@dataclass(slots=True)
class ProducerBatch:
    tp: TopicPartition
    compression: int
    created: float
    keys: list[bytes | None] = field(default_factory=list)  # up to the last record with a key (see key_column)
    values: list[bytes | None] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    callbacks: list[DeliveryCallback | None] = field(default_factory=list)
    headers: dict[int, Sequence[Header]] = field(default_factory=dict)  # record index -> its headers (if any)
    closed: bool = False
    attempts: int = 0
    retry_at: float = 0.0
    size_estimate: int = BATCH_HEADER_SIZE  # the batch's exact size, uncompressed, with the records so far
    send_order: int = -1  # when it was first sent (the sender's counter); -1: never sent
    restamp: bool = False  # an earlier batch was rejected: take a new sequence when it is sent again
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1  # -1: not yet assigned (or not idempotent)
    transactional: bool = False
    _built: bytes | None = None
    _encoded: bytes | None = None  # the records encoded, without producer fields (built once: a closed batch)
    prebuilt: bytes | None = None  # a pre-encoded batch (no producer id, epoch, sequence yet)
    prebuilt_count: int = 0
    prebuilt_timestamp: int = -1  # its first record's timestamp
    prebuilt_callback: DeliveryCallback | None = None

    @property
    def size(self) -> int:
        if self.prebuilt is not None:
            return len(self.prebuilt)
        return self.size_estimate

    @property
    def record_count(self) -> int:
        return len(self.values) if self.prebuilt is None else self.prebuilt_count

    def key_column(self) -> list[bytes | None]:
        """One key per record: :attr:`keys` ends at the last record that has one (a keyless record appends nothing
        to it, the producer's common case), the records after it have none."""
        keys = self.keys
        missing = len(self.values) - len(keys)
        return keys + [None] * missing if missing else keys

    @property
    def records(self) -> list[_Pending]:
        """The queued records, one tuple each (a pre-encoded batch: none)."""
        hs = self.headers
        return [(k, v, hs.get(i, ()) if hs else (), ts, cb) for i, (k, v, ts, cb) in
                enumerate(zip(self.key_column(), self.values, self.timestamps, self.callbacks, strict=True))]

    def set_producer(self, producer_id: int, epoch: int, base_sequence: int, transactional: bool) -> None:
        self.producer_id, self.producer_epoch, self.base_sequence = producer_id, epoch, base_sequence
        self.transactional = transactional
        self._built = None

    def build(self) -> bytes:
        if self._built is None:
            if self.prebuilt is not None:
                raw = self.prebuilt
            else:
                if self._encoded is None:
                    builder = RecordBatchBuilder(self.compression)
                    builder.extend(self.key_column(), self.values, self.timestamps, self.headers)
                    self._encoded = builder.build()
                raw = self._encoded
            if self.producer_id >= 0:
                raw = stamp_batch(raw, self.producer_id, self.producer_epoch, self.base_sequence,
                                  self.transactional)
            self._built = raw
        return self._built

    def complete(self, base_offset: int, log_append_time: int, error: KafkaError | None) -> list[
            tuple[DeliveryCallback, KafkaError | None, Message]]:
        """Fill offsets (or the error) into the batch's messages; return the callbacks to run."""
        out: list[tuple[DeliveryCallback, KafkaError | None, Message]] = []
        topic, partition = self.tp
        if self.prebuilt is not None:
            cb = self.prebuilt_callback
            if cb is not None:
                bm = BatchMessage(topic, partition, -1, self.prebuilt_timestamp, self.prebuilt_count)
                if error is None:
                    bm._offset = base_offset if base_offset >= 0 else -1
                    if log_append_time >= 0:
                        bm._timestamp = log_append_time
                        bm._tstype = TIMESTAMP_LOG_APPEND_TIME
                else:
                    bm._error = error
                out.append((cb, error, bm))
            return out
        if error is None and log_append_time < 0 and not self.headers:  # the common case: a plain Message each
            m = Message
            offsets = count(base_offset) if base_offset >= 0 else repeat(-1)  # acks=0: no offsets
            return [(cb, None, m(topic, partition, offset, key, value, (), ts, None))
                    for offset, key, value, ts, cb in zip(offsets, self.key_column(), self.values, self.timestamps,
                                                          self.callbacks) if cb is not None]
        for i, (key, value, headers, ts, cb) in enumerate(self.records):
            if cb is None:
                continue
            offset = base_offset + i if base_offset >= 0 and error is None else -1
            if error is None and log_append_time >= 0:
                msg: Message = ReportMessage(topic, partition, offset, key, value, headers, log_append_time, None,
                                             TIMESTAMP_LOG_APPEND_TIME)
            else:
                msg = Message(topic, partition, offset, key, value, headers, ts, error)
            out.append((cb, error, msg))
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
        kl = -1 if key is None else len(key)
        vl = -1 if value is None else len(value)
        if headers:
            hs: Sequence[Header] = headers if isinstance(headers, list) else list(headers)
            estimate = _estimate(key, value, hs)
            header_size = _headers_size(hs)
        else:
            hs = ()  # shared, immutable (as Message keeps it)
            estimate = _RECORD_OVERHEAD + (kl if kl > 0 else 0) + (vl if vl > 0 else 0)  # _estimate's
            header_size = 1
        limit = self.batch_size
        with self._lock:
            q = self._batches.get(tp)
            if q is None:
                q = self._batches[tp] = deque()
            batch = q[-1] if q and not q[-1].closed else None
            new = False
            if batch is not None and batch.size_estimate + estimate > limit:
                batch.closed = True
                batch = None
            if batch is None:
                batch = ProducerBatch(tp, self.compression, self._monotonic())
                q.append(batch)
                new = True
            tss = batch.timestamps
            n = len(tss)
            size = batch.size_estimate = batch.size_estimate + _record_size(
                timestamp_ms - tss[0] if n else 0, n, kl, vl, header_size)
            if key is not None:
                keys = batch.keys
                if len(keys) < n:
                    keys.extend(repeat(None, n - len(keys)))
                keys.append(key)
            batch.values.append(value)
            tss.append(timestamp_ms)
            batch.callbacks.append(on_complete)
            if hs:
                batch.headers[n] = hs
            self.pending_records += 1
            if size >= limit:
                batch.closed = True
            return batch.closed, new

    def open_batch(self, tp: TopicPartition) -> ProducerBatch | None:
        """``tp``'s open batch (the one the next record appended to ``tp`` goes to while it fits), if any."""
        q = self._batches.get(tp)
        try:
            return q[-1] if q and not q[-1].closed else None
        except IndexError:  # the sender thread drained the queue between the two checks (no lock on this path)
            return None

    def append_value(self, batch: ProducerBatch, timestamp_ms: int, value: bytes,
                     on_complete: DeliveryCallback | None) -> bool | None:
        """:meth:`append` of a keyless record without headers into ``batch`` (an :meth:`open_batch`), only if it
        is still open and the record fits: returns whether the batch is now full, or None (nothing done) for the
        caller to use :meth:`append`. The producer's common case, made cheap (:func:`_record_size` inlined)."""
        vl = len(value)
        lock = self._lock
        limit = self.batch_size
        lock.acquire()  # not ``with``: half its cost on the producer's hottest path
        try:
            if batch.closed or batch.size_estimate + _RECORD_OVERHEAD + vl > limit:  # as append() decides
                return None
            tss = batch.timestamps
            n = len(tss)
            d = timestamp_ms - tss[0]
            body = 3 + vl + (1 if -64 <= d < 64 else 2 if -8192 <= d < 8192 else varint_size(d)) \
                + (1 if n < 64 else 2 if n < 8192 else varint_size(n)) \
                + (1 if vl < 64 else 2 if vl < 8192 else varint_size(vl))
            size = batch.size_estimate = batch.size_estimate + body \
                + (1 if body < 64 else 2 if body < 8192 else varint_size(body))
            batch.values.append(value)  # no key: nothing for the key column
            tss.append(timestamp_ms)
            batch.callbacks.append(on_complete)
            self.pending_records += 1
            if size >= limit:
                batch.closed = True
                return True
            return False
        finally:
            lock.release()

    def append_prebuilt(self, tp: TopicPartition, batches: Sequence[tuple[bytes, int, int]],
                        on_complete: DeliveryCallback | None) -> None:
        """Queue pre-encoded batches ``(raw, record count, first record's timestamp)``, in order, after everything
        appended to ``tp`` so far (its open batch is closed: it goes first). The sender gives each its producer
        id, epoch and sequences, as to any batch."""
        with self._lock:
            q = self._batches.get(tp)
            if q is None:
                q = self._batches[tp] = deque()
            if q and not q[-1].closed:
                q[-1].closed = True
            now = self._monotonic()
            for raw, count, first_timestamp in batches:
                q.append(ProducerBatch(tp, 0, now, closed=True, prebuilt=raw, prebuilt_count=count,
                                       prebuilt_timestamp=first_timestamp, prebuilt_callback=on_complete))
                self.pending_records += count

    def batch_open(self, topic: str, partition: int) -> bool:
        q = self._batches.get((topic, partition))
        try:
            return bool(q) and not q[-1].closed  # type: ignore[index]
        except IndexError:  # the sender thread drained the queue between the two checks (no lock on this path)
            return False

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
        """Put a batch back for a retry at ``retry_at``, ahead of every batch sent after it and of the unsent ones
        (Kafka's insertInSequenceOrder): retries go out in their original order."""
        batch.retry_at = retry_at
        with self._lock:
            q = self._batches.setdefault(batch.tp, deque())
            order = batch.send_order
            i = 0
            if order >= 0:
                while i < len(q) and 0 <= q[i].send_order < order:
                    i += 1
            q.insert(i, batch)

    def head_is_retry(self, tp: TopicPartition) -> bool:
        """Whether the next batch of ``tp`` was sent before (a retry waits until nothing of ``tp`` is in flight)."""
        q = self._batches.get(tp)
        return bool(q) and q[0].send_order >= 0  # type: ignore[index]

    def retry_queued_before(self, tp: TopicPartition, order: int) -> bool:
        """Whether a batch of ``tp`` sent before ``order`` waits for its retry."""
        q = self._batches.get(tp)
        return bool(q) and 0 <= q[0].send_order < order  # type: ignore[index]

    def done(self, batch: ProducerBatch) -> None:
        with self._lock:
            self.pending_records -= batch.record_count

    def expire(self, now: float, delivery_timeout: float) -> list[ProducerBatch]:
        """Take the queued batches created ``delivery_timeout`` or more before ``now``, from the head of each
        partition's queue (Kafka's RecordAccumulator.expiredBatches): for when nothing can be sent to fail them."""
        out = []
        with self._lock:
            for q in self._batches.values():
                while q and now - q[0].created >= delivery_timeout:
                    b = q.popleft()
                    b.closed = True
                    out.append(b)
        return out

    def abort_all(self) -> list[ProducerBatch]:
        with self._lock:
            out = [b for q in self._batches.values() for b in q]
            self._batches.clear()
            for b in out:  # closed to appends, as drained ones (the producer's shortcut may still hold one)
                b.closed = True
            return out


#: an upper bound of a record's encoded size beyond its key and value (lengths, deltas, attributes, no headers)
_RECORD_OVERHEAD = 21


def _estimate(key: bytes | None, value: bytes | None, headers: Sequence[Header]) -> int:
    n = _RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
    if not headers:
        return n
    for k, v in headers:
        n += len(k) + (len(v) if v else 0) + 10
    return n


def _record_size(ts_delta: int, offset_delta: int, key_len: int, value_len: int, header_size: int) -> int:
    """Encoded size of one record (length prefix included): lengths -1 for a null key or value, ``header_size``
    the encoded header list's (1: none). Varints below 64 (zigzag) take one byte, below 8192 two."""
    body = 1 + header_size
    body += 1 if -64 <= ts_delta < 64 else 2 if -8192 <= ts_delta < 8192 else varint_size(ts_delta)
    body += 1 if offset_delta < 64 else 2 if offset_delta < 8192 else varint_size(offset_delta)
    if key_len < 0:
        body += 1
    else:
        body += key_len + (1 if key_len < 64 else 2 if key_len < 8192 else varint_size(key_len))
    if value_len < 0:
        body += 1
    else:
        body += value_len + (1 if value_len < 64 else 2 if value_len < 8192 else varint_size(value_len))
    return body + (1 if body < 64 else 2 if body < 8192 else varint_size(body))


def _headers_size(headers: Sequence[Header]) -> int:
    """Encoded size of a record's header list (the count, then each key and value with their lengths)."""
    n = varint_size(len(headers))
    for k, v in headers:
        kl = len(k.encode("utf-8"))
        n += varint_size(kl) + kl + (1 if v is None else varint_size(len(v)) + len(v))
    return n
