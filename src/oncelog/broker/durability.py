"""Group commit: one fsync covers every append that was waiting at that moment.

Appends happen on the event loop and only write to the page cache. A produce with acks=all then waits here for
its partition to become durable up to its last offset. A single flusher task repeatedly takes every dirty
partition, fsyncs them all in a worker thread (the event loop keeps accepting appends meanwhile), publishes the
new durable offsets and wakes the waiters; whatever was appended during that fsync is covered by the next round.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from .partition import Partition

__all__ = ["GroupCommitFlusher"]

log = logging.getLogger("oncelog.broker.durability")


class GroupCommitFlusher:
    def __init__(self, on_durable: Callable[["Partition", int], None]) -> None:
        self._dirty: set[Partition] = set()
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._on_durable = on_durable
        self._closing = False
        self.rounds = 0  # fsync rounds, for metrics and tests

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="group-commit-flusher")

    def mark_dirty(self, partition: "Partition") -> None:
        self._dirty.add(partition)
        self._wakeup.set()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._dirty:
                if self._closing:
                    return
                await self._wakeup.wait()
                self._wakeup.clear()
                continue
            batch = list(self._dirty)
            self._dirty.clear()
            results = await loop.run_in_executor(None, _flush_all, batch)
            self.rounds += 1
            for partition, durable in results:
                if durable >= 0:
                    self._on_durable(partition, durable)

    async def close(self) -> None:
        self._closing = True
        self._wakeup.set()
        if self._task is not None:
            await self._task


def _flush_all(partitions: list["Partition"]) -> list[tuple["Partition", int]]:
    out: list[tuple[Partition, int]] = []
    for p in partitions:
        try:
            out.append((p, p.log.flush()))
        except Exception:  # a deleted topic's log is closed under us; a disk error is logged loudly
            if not p.deleted:
                log.exception("fsync of %s-%d failed; produce requests waiting on it will time out",
                              p.topic, p.index)
            out.append((p, -1))
    return out
