"""The consumer's fetched-but-not-returned records: one chunk per partition and fetch, in fetch order.

A chunk keeps what the fetch brought, record batches checked and decompressed but not decoded
(:class:`~.fetcher.FetchedBatches`), and decodes them into Messages a batch at a time as ``consume()``/``poll()``
hand them out: a record becomes an object only just before the application gets it, so records fetched ahead
(the consumer's prefetch) cost memory as bytes, not as objects for the garbage collector to walk, and
``consume_arrow()`` can still decode the batches column-wise. Everything that needs a partition's buffered
records (unassign, pause, position) looks at each chunk's head only.
"""

from __future__ import annotations

import collections
from collections.abc import Container, Set

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.records import CorruptRecordError

from ..errors import KafkaError
from ..message import Message
from .fetcher import FetchedBatches, decode_batch

TopicPartition = tuple[str, int]

__all__ = ["Chunk", "MessageBuffer"]


class Chunk:
    """One partition's records from one fetch: the batches not decoded yet, and the records decoded and not
    handed out yet (``ready`` from index ``at``)."""

    __slots__ = ("at", "batches", "fetch_offset", "nbytes", "partition", "ready", "resume_at", "topic", "tp")

    def __init__(self, fetched: FetchedBatches) -> None:
        self.topic = fetched.topic
        self.partition = fetched.partition
        self.tp = (fetched.topic, fetched.partition)
        self.fetch_offset = fetched.fetch_offset
        self.batches = collections.deque(fetched.batches)
        self.nbytes = sum(len(b.records) for b in fetched.batches)
        self.ready: list[Message] = []
        self.at = 0
        #: where to fetch again to get this chunk's records not handed out yet (pause): the offset after the last
        #: record handed out, or where the fetch started
        self.resume_at = fetched.fetch_offset

    def _decode_next(self) -> bool:
        """Decode the next batch into ``ready``; False when there is none. Raises KafkaError CORRUPT_MESSAGE."""
        if not self.batches:
            return False
        b = self.batches[0]
        out: list[Message] = []
        try:
            decode_batch(b, self.topic, self.partition, self.fetch_offset, out)
        except CorruptRecordError as e:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{self.topic}[{self.partition}] at {b.base_offset}: {e}",
                             retriable=False) from None
        self.batches.popleft()
        self.ready, self.at = out, 0
        return True

    def first_offset(self) -> int | None:
        """The offset of the next record to hand out (decoding its batch if needed); None when none is left."""
        while self.at == len(self.ready):
            if not self._decode_next():
                return None
        return self.ready[self.at]._offset

    def take(self, need: int, out: list[Message]) -> int:
        """Move up to ``need`` records to ``out``; returns how many."""
        got = 0
        while got < need:
            ready, at = self.ready, self.at
            left = len(ready) - at
            if not left:
                if not self.batches:
                    break
                b = self.batches[0]
                if b.records_count <= need - got and b.base_offset >= self.fetch_offset:
                    # the whole batch goes out: decode it straight into ``out``
                    n = len(out)
                    try:
                        decode_batch(b, self.topic, self.partition, self.fetch_offset, out)
                    except CorruptRecordError as e:
                        del out[n:]
                        raise KafkaError(ErrorCode.CORRUPT_MESSAGE,
                                         f"{self.topic}[{self.partition}] at {b.base_offset}: {e}",
                                         retriable=False) from None
                    self.batches.popleft()
                    got += len(out) - n
                    continue
                self._decode_next()
                continue
            k = min(left, need - got)
            out += ready[at:at + k] if k < len(ready) else ready
            self.at = at + k
            got += k
        if got:
            self.resume_at = out[-1]._offset + 1
        return got

    def take_rest(self) -> tuple[list[Message], FetchedBatches | None]:
        """Everything left: the decoded records, and the batches not decoded yet (None when none)."""
        ready = self.ready[self.at:] if self.at else self.ready
        self.ready, self.at = [], 0
        rest = FetchedBatches(self.topic, self.partition, self.fetch_offset, list(self.batches)) \
            if self.batches else None
        self.batches.clear()
        return ready, rest

    def __bool__(self) -> bool:
        """Whether records may be left (a batch not decoded yet may still hold none at or after the position)."""
        return self.at < len(self.ready) or bool(self.batches)


class MessageBuffer:
    """Chunks, each of one partition, in fetch order (a partition's chunks in offset order)."""

    def __init__(self) -> None:
        self._chunks: collections.deque[Chunk] = collections.deque()
        #: record bytes held (decompressed), counted per chunk until it is used up (queued.max.messages.kbytes)
        self.nbytes = 0

    def __bool__(self) -> bool:
        return bool(self._chunks)

    def add(self, fetched: FetchedBatches) -> None:
        chunk = Chunk(fetched)
        self._chunks.append(chunk)
        self.nbytes += chunk.nbytes

    def clear(self) -> None:
        self._chunks.clear()
        self.nbytes = 0

    def _pop(self) -> None:
        self.nbytes -= self._chunks.popleft().nbytes

    def take(self, max_messages: int, assigned: Container[TopicPartition], paused: Container[TopicPartition],
             stored: dict[TopicPartition, int] | None) -> list[Message]:
        """Up to ``max_messages`` messages from the front; those of partitions not assigned or paused are dropped.
        ``stored``: set to the next offset of each partition returned (enable.auto.offset.store)."""
        out: list[Message] = []
        need = max_messages
        chunks = self._chunks
        while chunks and need > 0:
            chunk = chunks[0]
            tp = chunk.tp
            if tp not in assigned or tp in paused:
                self._pop()
                continue
            got = chunk.take(need, out)
            if not chunk:
                self._pop()
            if got:
                need -= got
                if stored is not None:
                    stored[tp] = chunk.resume_at
        return out

    def take_all(self, assigned: Container[TopicPartition], paused: Container[TopicPartition]
                 ) -> list[tuple[TopicPartition, list[Message], FetchedBatches | None]]:
        """Every chunk of the partitions assigned and not paused: its partition and what :meth:`Chunk.take_rest`
        gives; the others are dropped. The buffer is empty afterwards."""
        out = [(c.tp, *c.take_rest()) for c in self._chunks if c.tp in assigned and c.tp not in paused]
        self.clear()
        return out

    def drop(self, tps: Set[TopicPartition]) -> dict[TopicPartition, int]:
        """Forget the records of ``tps``; returns, for each, where to fetch again to get them back."""
        first: dict[TopicPartition, int] = {}
        if not self._chunks or not tps:
            return first
        keep: collections.deque[Chunk] = collections.deque()
        for chunk in self._chunks:
            if chunk.tp in tps:
                first.setdefault(chunk.tp, chunk.resume_at)
                self.nbytes -= chunk.nbytes
            else:
                keep.append(chunk)
        self._chunks = keep
        return first

    def firsts(self) -> dict[TopicPartition, int]:
        """The offset of the first buffered message of each partition that has one."""
        out: dict[TopicPartition, int] = {}
        for chunk in self._chunks:
            if chunk.tp not in out:
                offset = chunk.first_offset()
                if offset is not None:
                    out[chunk.tp] = offset
        return out
