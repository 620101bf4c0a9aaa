"""The consumer's fetches: at most one in flight, filling the buffer ahead of the application (librdkafka's
prefetch).

Each poll starts a fetch before it decodes what it hands out (:meth:`Prefetcher.prefetch`), and a fetch that
brought records sends the next one in the same step that handled the response, until the records buffered reach
``queued.max.messages.kbytes``: the broker reads and sends while the consumer decodes and the application works.
A poll finding the buffer empty waits for what the fetch in flight brings (up to its timeout: the fetch outlives a
poll that stops waiting). What a fetch raises is kept for the next poll, after the records fetched before it.

The assignment may change while a fetch is in flight: the fetcher drops what it brings for partitions revoked,
sought, reset or paused meanwhile, so rebalances never wait for a fetch.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from .buffer import MessageBuffer
from .fetcher import FetchedBatches, Fetcher

__all__ = ["Prefetcher"]


class Prefetcher:
    def __init__(self, fetcher: Fetcher, buffer: MessageBuffer, max_buffered_bytes: int, fetch_max_wait_ms: int,
                 may_fetch: Callable[[], bool]) -> None:
        """``may_fetch()``: whether the consumer wants records now (not closed, no rebalance under way)."""
        self.fetcher = fetcher
        self.buffer = buffer
        self.max_buffered_bytes = max_buffered_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self._may_fetch = may_fetch
        self.task: asyncio.Task[None] | None = None  # fetches, one at a time, while they bring records
        self._error: BaseException | None = None  # what they raised, for the next poll to raise
        self._arrived = asyncio.Event()  # set when a fetch delivers records, or the task ends
        self._deliveries = 0

    def _deliver(self, fetched: FetchedBatches) -> None:
        self.buffer.add(fetched)
        self._deliveries += 1
        self._arrived.set()

    def _may_fetch_ahead(self) -> bool:
        return self.buffer.nbytes < self.max_buffered_bytes and self._error is None and self.fetcher.fetchable() \
            and self._may_fetch()

    async def _run(self, max_wait_ms: int) -> None:
        """Fetch; while fetches bring records and :meth:`_may_fetch_ahead`, fetch again at once."""
        try:
            while True:
                before = self._deliveries
                await self.fetcher.fetch(max_wait_ms, self._deliver)
                if self._deliveries == before or not self._may_fetch_ahead():
                    return
                max_wait_ms = self.fetch_max_wait_ms
        except Exception as e:  # raised by the next poll (the one waiting for it, or a later one)
            self._error = e
        finally:
            self.task = None
            self._arrived.set()

    def _start(self, max_wait_ms: int) -> None:
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._run(max_wait_ms))

    def kick(self) -> None:
        """:meth:`prefetch` without waiting for the request to be written (from a poll on another thread)."""
        if self.task is None and self._may_fetch_ahead():
            self._start(self.fetch_max_wait_ms)

    async def prefetch(self) -> None:
        """Start fetching unless a fetch is in flight or the buffer is full; a fetch it starts has written its
        request when this returns."""
        if self.task is None and self._may_fetch_ahead():
            self._start(self.fetch_max_wait_ms)
            await asyncio.sleep(0)  # the fetch's first step writes its request

    def raise_error(self) -> None:
        """Raise what the last fetch raised, once."""
        err, self._error = self._error, None
        if err is not None:
            raise err

    async def wait(self, timeout_ms: int) -> None:
        """Wait up to ``timeout_ms`` for records (or the end of the fetch in flight), starting a fetch if none is
        in flight (its long poll no longer than ``timeout_ms``). Never cancels the fetch."""
        self._arrived.clear()
        self._start(min(timeout_ms, self.fetch_max_wait_ms))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._arrived.wait(), timeout_ms / 1000)

    async def close(self) -> None:
        """Cancel the fetch in flight (its records are not wanted any more)."""
        task = self.task
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
