"""A single node's internal topic, created on first use as Kafka creates it.

Kafka creates ``__consumer_offsets`` on the first FindCoordinator for a group and ``__transaction_state`` on the
first FindCoordinator for a transactional id (``KafkaApis.handleFindCoordinatorRequest`` ->
``createInternalTopic``): a broker that never serves a group or a transaction never pays for their partitions. A
fresh single node therefore listens without creating its 100 internal partitions; a restarted one loads the
partitions it has at start-up (they hold state clients expect: committed offsets, open transactions).

:class:`LoadOnFirstUse` creates the topic (when absent) and loads every partition at the coordinator epoch of this
start, once; concurrent callers wait for that one load. Until then the coordinator holds no partition and answers
NOT_COORDINATOR, which sends clients back to FindCoordinator, which loads it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from oncelog.coordinator.runtime import LogEntry

    from .internal_log import InternalTopicLog

__all__ = ["LoadOnFirstUse"]

log = logging.getLogger("oncelog.broker.coordinator")

#: loads one partition: (partition, coordinator epoch, the partition's entries in log order)
LoadPartition = Callable[[int, int, Iterator["LogEntry"]], Awaitable[Any]]


class LoadOnFirstUse:
    def __init__(self, topic_log: InternalTopicLog, epoch: int, load: LoadPartition) -> None:
        self.log = topic_log
        self.epoch = epoch
        self._load = load
        self._done: asyncio.Future[None] | None = None

    @property
    def exists(self) -> bool:
        """Whether the internal topic is in the data folder (made by an earlier start or by :meth:`ensure`)."""
        return self.log.topics.get(self.log.topic) is not None

    @property
    def loaded(self) -> bool:
        return self._done is not None and self._done.done() and self._done.exception() is None

    async def ensure(self) -> None:
        """Create the topic if absent and load every partition, once. Raises what the creation or a load raised
        (the next call tries again)."""
        if self._done is None or (self._done.done() and self._done.exception() is not None):
            self._done = asyncio.get_running_loop().create_future()
            try:
                await self._create_and_load()
            except BaseException as e:
                self._done.set_exception(e)
                self._done.exception()  # retrieved: the callers that wait see it, nobody else must
                raise
            self._done.set_result(None)
            return
        await asyncio.shield(self._done)

    async def _create_and_load(self) -> None:
        created = not self.exists
        self.log.ensure()
        for partition in range(self.log.num_partitions):
            self.log.become_leader(partition, self.epoch)
            await self._load(partition, self.epoch, self.log.read(partition))
        log.info("%s %s: %d partition(s) loaded at coordinator epoch %d", self.log.topic,
                 "created on first use" if created else "found", self.log.num_partitions, self.epoch)

