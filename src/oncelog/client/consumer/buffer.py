"""The consumer's fetched-but-not-returned records, kept as the fetch gave them: one list per partition and fetch.

``consume()`` hands out whole lists (or a list's head) instead of moving records one by one, and everything that
needs a partition's buffered records (unassign, pause, position) looks at each list's first record only.
"""

from __future__ import annotations

import collections
from collections.abc import Container, Iterable, Set
from typing import Any

from ..message import Message
from .fetcher import BatchFilter, decode_fetched

TopicPartition = tuple[str, int]

__all__ = ["MessageBuffer", "decode_chunk"]


def decode_chunk(topic: str, partition: int, records: Any, fetch_offset: int, batch_filter: BatchFilter,
                 check_crcs: bool) -> tuple[list[Any], int]:
    """:func:`decode_fetched` for the buffer: a partition's messages as one list (none when it has none)."""
    msgs, nxt = decode_fetched(topic, partition, records, fetch_offset, batch_filter, check_crcs)
    return ([msgs] if msgs else []), nxt


class MessageBuffer:
    """Lists of messages, each non-empty, of one partition, in offset order; a partition's lists in fetch order."""

    def __init__(self) -> None:
        self._chunks: collections.deque[list[Message]] = collections.deque()
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def extend(self, chunks: Iterable[list[Message]]) -> None:
        for chunk in chunks:
            self._chunks.append(chunk)
            self._count += len(chunk)

    def clear(self) -> None:
        self._chunks.clear()
        self._count = 0

    def take(self, max_messages: int, assigned: Container[TopicPartition], paused: Container[TopicPartition],
             stored: dict[TopicPartition, int] | None) -> list[Message]:
        """Up to ``max_messages`` messages from the front; those of partitions not assigned or paused are dropped.
        ``stored``: set to the next offset of each partition returned (enable.auto.offset.store)."""
        out: list[Message] = []
        need = max_messages
        chunks = self._chunks
        while chunks and need > 0:
            chunk = chunks[0]
            if len(chunk) <= need:
                chunks.popleft()
                part = chunk
            else:
                part = chunk[:need]
                chunks[0] = chunk[need:]
            self._count -= len(part)
            first = part[0]
            tp = (first._topic, first._partition)
            if tp in assigned and tp not in paused:
                out += part
                need -= len(part)
                if stored is not None:
                    stored[tp] = part[-1]._offset + 1
        return out

    def drop(self, tps: Set[TopicPartition]) -> dict[TopicPartition, int]:
        """Forget the messages of ``tps``; returns the first offset dropped of each."""
        first: dict[TopicPartition, int] = {}
        if not self._count or not tps:
            return first
        keep: collections.deque[list[Message]] = collections.deque()
        for chunk in self._chunks:
            m = chunk[0]
            tp = (m._topic, m._partition)
            if tp in tps:
                first.setdefault(tp, m._offset)
                self._count -= len(chunk)
            else:
                keep.append(chunk)
        self._chunks = keep
        return first

    def firsts(self) -> dict[TopicPartition, int]:
        """The offset of the first buffered message of each partition that has one."""
        out: dict[TopicPartition, int] = {}
        for chunk in self._chunks:
            m = chunk[0]
            out.setdefault((m._topic, m._partition), m._offset)
        return out
