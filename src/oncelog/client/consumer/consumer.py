"""``AsyncConsumer`` (asyncio) and ``Consumer`` (sync facade): manual assignment, poll/consume.

Growth point for the groups work: ``subscribe()`` and committed offsets belong in ``membership.py`` /
``subscription.py`` feeding :meth:`Fetcher.assign`; this module only holds the buffer and the public surface.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterable, Mapping
from typing import Any

from .._sync import LoopThread
from ..cluster import Cluster
from ..config import ConsumerConfig, parse_consumer_config
from ..message import Message
from .fetcher import Fetcher, TopicPartition

__all__ = ["OFFSET_BEGINNING", "OFFSET_END", "OFFSET_INVALID", "Assignment", "AsyncConsumer", "Consumer"]

OFFSET_BEGINNING = -2
OFFSET_END = -1
OFFSET_INVALID = -1001  # use auto.offset.reset (confluent-kafka's value)

#: (topic, partition) or (topic, partition, offset); offset OFFSET_BEGINNING / OFFSET_END / OFFSET_INVALID / >= 0
Assignment = tuple[str, int] | tuple[str, int, int | None]


class AsyncConsumer:
    def __init__(self, conf: Mapping[str, Any] | ConsumerConfig) -> None:
        self.config = conf if isinstance(conf, ConsumerConfig) else parse_consumer_config(conf)
        c = self.config
        self.cluster = Cluster(c.bootstrap_servers, client_id=c.client_id, request_timeout=c.request_timeout_ms / 1000,
                               connect_timeout=c.connect_timeout_ms / 1000,
                               metadata_max_age=c.metadata_max_age_ms / 1000)
        self.fetcher = Fetcher(self.cluster, c)
        self._buffer: collections.deque[Message] = collections.deque()
        self._started = False

    async def start(self) -> None:
        if not self._started:
            await self.cluster.bootstrap()
            self._started = True

    async def __aenter__(self) -> AsyncConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def assign(self, partitions: Iterable[Assignment]) -> None:
        """Replace the assignment. Offsets: >= 0 exact, OFFSET_BEGINNING, OFFSET_END, else auto.offset.reset."""
        self.fetcher.unassign_all()
        self._buffer.clear()
        for item in partitions:
            topic, partition = item[0], item[1]
            offset = item[2] if len(item) > 2 else None
            self.fetcher.assign((topic, partition), None if offset == OFFSET_INVALID else offset)

    def assignment(self) -> list[TopicPartition]:
        return sorted(set(self.fetcher.positions) | set(self.fetcher.resets))

    def seek(self, topic: str, partition: int, offset: int) -> None:
        self._buffer = collections.deque(m for m in self._buffer if (m.topic, m.partition) != (topic, partition))
        self.fetcher.assign((topic, partition), offset)

    def position(self, topic: str, partition: int) -> int | None:
        """Offset of the next message poll() returns for this partition (None until resolved)."""
        for m in self._buffer:
            if (m.topic, m.partition) == (topic, partition):
                return m.offset
        return self.fetcher.positions.get((topic, partition))

    async def _fill(self, deadline: float) -> None:
        await self.start()
        while not self._buffer:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0:
                return
            self._buffer.extend(await self.fetcher.fetch(min(left_ms, self.config.fetch_max_wait_ms)))

    async def poll(self, timeout: float = 1.0) -> Message | None:
        """The next message, or None if none arrives within ``timeout`` seconds."""
        await self._fill(time.monotonic() + timeout)
        return self._buffer.popleft() if self._buffer else None

    async def consume(self, num_messages: int = 1, timeout: float = 1.0) -> list[Message]:
        """Up to ``num_messages``: returns as soon as some are available (or empty after ``timeout``)."""
        await self._fill(time.monotonic() + timeout)
        out: list[Message] = []
        while self._buffer and len(out) < num_messages:
            out.append(self._buffer.popleft())
        return out

    async def close(self) -> None:
        await self.cluster.close()
        self._started = False


class Consumer:
    """Blocking facade over :class:`AsyncConsumer`, run on a background event loop thread."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        self._async = AsyncConsumer(conf)
        self._runner = LoopThread("oncelog-consumer")
        self._timeout = self._async.config.request_timeout_ms / 1000 + 5
        try:
            self._runner.run(self._async.start(), self._timeout)
        except BaseException:
            self._runner.stop()
            raise

    @property
    def config(self) -> ConsumerConfig:
        return self._async.config

    def partitions_for(self, topic: str) -> list[int]:
        """Partitions of ``topic`` from fresh metadata ([] if the topic does not exist)."""
        async def do() -> list[int]:
            await self._async.cluster.refresh([topic])
            return self._async.cluster.partitions_for(topic)
        result: list[int] = self._runner.run(do(), self._timeout)
        return result

    def assign(self, partitions: Iterable[Assignment]) -> None:
        items = list(partitions)

        async def do() -> None:
            self._async.assign(items)
        self._runner.run(do(), self._timeout)

    def assignment(self) -> list[TopicPartition]:
        return self._async.assignment()

    def seek(self, topic: str, partition: int, offset: int) -> None:
        async def do() -> None:
            self._async.seek(topic, partition, offset)
        self._runner.run(do(), self._timeout)

    def position(self, topic: str, partition: int) -> int | None:
        return self._async.position(topic, partition)

    def poll(self, timeout: float = 1.0) -> Message | None:
        result: Message | None = self._runner.run(self._async.poll(timeout), timeout + self._timeout)
        return result

    def consume(self, num_messages: int = 1, timeout: float = 1.0) -> list[Message]:
        result: list[Message] = self._runner.run(self._async.consume(num_messages, timeout),
                                                 timeout + self._timeout)
        return result

    def close(self) -> None:
        try:
            self._runner.run(self._async.close(), 10)
        finally:
            self._runner.stop()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
