"""The consumer's fetched-but-not-returned records: one chunk per partition and fetch, in fetch order.

A chunk keeps what the fetch brought, record batches checked and decompressed but not decoded
(:class:`~.fetcher.FetchedBatches`), and decodes exactly the records ``consume()``/``poll()`` hand out, from where
the last call stopped (a batch may be handed out in parts): a record becomes an object only just before the
application gets it, so records fetched ahead (the consumer's prefetch) cost memory as bytes, not as objects for
the garbage collector to walk, and ``consume_arrow()`` can still decode the batches column-wise. Everything that needs a partition's buffered
records (unassign, pause, position) looks at each chunk's head only.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Container, Set

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.records import CorruptRecordError

from ..errors import KafkaError
from ..message import Message
from .fetcher import FetchedBatch, FetchedBatches, decode_batch

TopicPartition = tuple[str, int]

__all__ = ["Chunk", "MessageBuffer"]


class Chunk:
    """One partition's records from one fetch: batches, the first of them maybe handed out in part already (its
    next record starts at byte ``pos`` of its section, the ``index``-th)."""

    __slots__ = ("batches", "fetch_offset", "index", "nbytes", "partition", "pos", "resume_at", "topic", "tp")

    def __init__(self, fetched: FetchedBatches) -> None:
        self.topic = fetched.topic
        self.partition = fetched.partition
        self.tp = (fetched.topic, fetched.partition)
        self.fetch_offset = fetched.fetch_offset
        self.batches = collections.deque(fetched.batches)
        self.nbytes = sum(len(b.records) for b in fetched.batches)
        self.pos = self.index = 0
        #: where to fetch again to get the records not handed out yet (pause): the offset after the last record
        #: handed out, or where the fetch started
        self.resume_at = fetched.fetch_offset

    def _error(self, b: FetchedBatch, e: CorruptRecordError) -> KafkaError:
        return KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{self.topic}[{self.partition}] at {b.base_offset}: {e}",
                          retriable=False)

    def first_offset(self) -> int | None:
        """The offset of the next record to hand out (decoded to see, not handed out); None when none is left."""
        pos, index = self.pos, self.index
        for b in self.batches:
            while index < b.records_count:
                seen: list[Message] = []
                try:
                    pos, index = decode_batch(b, self.topic, self.partition, self.fetch_offset, seen, pos, index, 1)
                except CorruptRecordError as e:
                    raise self._error(b, e) from None
                if seen:
                    return seen[0]._offset
            pos = index = 0
        return None

    def take(self, need: int, out: list[Message]) -> int:
        """Decode up to ``need`` records into ``out``; returns how many."""
        n0 = len(out)
        batches = self.batches
        while batches and len(out) - n0 < need:
            b = batches[0]
            n = len(out)
            try:
                self.pos, self.index = decode_batch(b, self.topic, self.partition, self.fetch_offset, out, self.pos,
                                                    self.index, need - (len(out) - n0))
            except CorruptRecordError as e:
                del out[n:]  # handed out from here on once the application has moved past the batch (seek)
                raise self._error(b, e) from None
            if self.index >= b.records_count:
                batches.popleft()
                self.pos = self.index = 0
        got = len(out) - n0
        if got:
            self.resume_at = out[-1]._offset + 1
        return got

    def take_rest(self) -> FetchedBatches:
        """What is left, as batches (from :attr:`resume_at` on: the records before it were handed out)."""
        rest = FetchedBatches(self.topic, self.partition, self.resume_at, list(self.batches))
        self.batches.clear()
        return rest


class MessageBuffer:
    """Chunks, each of one partition, in fetch order (a partition's chunks in offset order).

    Thread-safe for one writer of new chunks (:meth:`add`, the event loop's fetches: it takes no lock, the chunks
    wait in ``_arrived`` until a reader moves them in) and readers on any thread (everything else, under one
    lock): the sync consumer's poll() takes records on the caller's thread while the event loop fetches."""

    def __init__(self) -> None:
        self._chunks: collections.deque[Chunk] = collections.deque()
        self._arrived: collections.deque[Chunk] = collections.deque()
        self._lock = threading.Lock()
        self._added = 0  # bytes of the chunks added (by add())
        self._released = 0  # bytes of the chunks used up or dropped (under the lock)

    @property
    def nbytes(self) -> int:
        """Record bytes held (decompressed), a chunk's counted until it is used up (queued.max.messages.kbytes)."""
        return self._added - self._released

    def __bool__(self) -> bool:
        return bool(self._chunks) or bool(self._arrived)

    def add(self, fetched: FetchedBatches) -> None:
        chunk = Chunk(fetched)
        self._added += chunk.nbytes
        self._arrived.append(chunk)

    def _settle(self) -> collections.deque[Chunk]:
        """(Under the lock) the chunks, with those added since moved in."""
        arrived, chunks = self._arrived, self._chunks
        while arrived:
            chunks.append(arrived.popleft())
        return chunks

    def clear(self) -> None:
        with self._lock:
            chunks = self._settle()
            self._released += sum(c.nbytes for c in chunks)
            chunks.clear()

    def take(self, out: list[Message], max_messages: int, assigned: Container[TopicPartition],
             paused: Container[TopicPartition], stored: dict[TopicPartition, int] | None) -> None:
        """Move up to ``max_messages`` messages from the front to ``out``; those of partitions not assigned or
        paused are dropped. ``stored``: set to the next offset of each partition returned
        (enable.auto.offset.store)."""
        need = max_messages
        with self._lock:
            chunks = self._settle()
            while chunks and need > 0:
                chunk = chunks[0]
                tp = chunk.tp
                if tp not in assigned or tp in paused:
                    self._released += chunks.popleft().nbytes
                    continue
                got = chunk.take(need, out)
                if not chunk.batches:
                    self._released += chunks.popleft().nbytes
                if got:
                    need -= got
                    if stored is not None:
                        stored[tp] = chunk.resume_at

    def take_all(self, assigned: Container[TopicPartition], paused: Container[TopicPartition]
                 ) -> list[FetchedBatches]:
        """What every chunk of the partitions assigned and not paused has left (:meth:`Chunk.take_rest`); the
        others are dropped. The buffer is empty afterwards."""
        with self._lock:
            chunks = self._settle()
            out = [c.take_rest() for c in chunks if c.tp in assigned and c.tp not in paused]
            self._released += sum(c.nbytes for c in chunks)
            chunks.clear()
        return out

    def drop(self, tps: Set[TopicPartition]) -> dict[TopicPartition, int]:
        """Forget the records of ``tps``; returns, for each, where to fetch again to get them back."""
        first: dict[TopicPartition, int] = {}
        if not tps:
            return first
        with self._lock:
            keep: collections.deque[Chunk] = collections.deque()
            for chunk in self._settle():
                if chunk.tp in tps:
                    first.setdefault(chunk.tp, chunk.resume_at)
                    self._released += chunk.nbytes
                else:
                    keep.append(chunk)
            self._chunks = keep
        return first

    def firsts(self) -> dict[TopicPartition, int]:
        """The offset of the first buffered message of each partition that has one."""
        out: dict[TopicPartition, int] = {}
        with self._lock:
            for chunk in self._settle():
                if chunk.tp not in out:
                    offset = chunk.first_offset()
                    if offset is not None:
                        out[chunk.tp] = offset
        return out
