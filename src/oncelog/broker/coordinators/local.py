"""A single node's group and transaction coordinators, wired into the broker's context.

A data folder that holds an internal topic (an earlier run served groups or transactions) gets both coordinators
built and loaded before the broker listens. A fresh one gets them built when a request first needs one
(``BrokerContext.load_coordinators``, called by the handlers' coordinator lookups): their code (~65 ms of imports:
the group and transaction state machines, their records and codecs) stays off the start path of a broker that may
never serve a group or a transaction, as their internal topics are created on first use (``single_node.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:
    from oncelog.clock import Clock

    from ..settings.config import BrokerConfig
    from ..context import BrokerContext
    from ..topics import TopicRegistry
    from .groups import GroupCoordinatorHandle
    from .markers import LocalMarkerWriter
    from .transactions import TransactionCoordinatorHandle

__all__ = ["SingleNodeCoordinators"]

#: runs a background job for the broker's lifetime (``Broker.spawn``: cancelled at stop)
Spawn = Callable[[Coroutine[Any, Any, Any], str], "asyncio.Task[Any]"]
#: the internal topics of a single node's coordinators (``groups.OFFSETS_TOPIC``,
#: ``transactions.TRANSACTION_STATE_TOPIC``: named here so that looking does not import them)
INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state")


class SingleNodeCoordinators:
    """A single node's transaction and group coordinators, wired into ``context``: built and loaded by
    :meth:`start` when the data folder holds an internal topic, else built by the first request that needs one."""

    def __init__(self, cfg: BrokerConfig, clock: Clock, topics: TopicRegistry, marker_writer: LocalMarkerWriter,
                 context: BrokerContext, spawn: Spawn) -> None:
        self.cfg, self.clock, self.topics, self.writer = cfg, clock, topics, marker_writer
        self.context = context
        self.spawn = spawn
        self.handles: list[Union[TransactionCoordinatorHandle, GroupCoordinatorHandle]] = []

    async def start(self) -> None:
        if not any(self.topics.get(t) is not None for t in INTERNAL_TOPICS):
            self.context.coordinators_on_first_use = self.build
            return
        from .groups import start_single_node_groups
        from .transactions import next_coordinator_epoch, start_single_node_transactions

        ctx = self.context
        epoch = next_coordinator_epoch(self.cfg.data_dir)
        txn = await start_single_node_transactions(self.cfg, self.clock, self.topics, self.writer, epoch,
                                                   self.spawn)
        self.handles.append(txn)
        ctx.txn_coordinator = txn.coordinator
        groups = await start_single_node_groups(self.cfg, self.clock, self.topics, epoch,
                                                lambda: ctx.txn_coordinator, ctx.security_store)
        self.handles.append(groups)
        self._wire(txn, groups)

    def build(self) -> None:
        """Both coordinators of a fresh data folder (nothing to load: their topics are created on first use), their
        timers armed. Runs on the broker's event loop."""
        from .groups import build_single_node_groups
        from .transactions import build_single_node_transactions, next_coordinator_epoch

        ctx = self.context
        epoch = next_coordinator_epoch(self.cfg.data_dir)
        txn = build_single_node_transactions(self.cfg, self.clock, self.topics, self.writer, epoch)
        groups = build_single_node_groups(self.cfg, self.clock, self.topics, epoch, lambda: ctx.txn_coordinator,
                                          ctx.security_store)
        self.handles += [txn, groups]
        txn.start()
        groups.start()
        self._wire(txn, groups)

    def _wire(self, txn: TransactionCoordinatorHandle, groups: GroupCoordinatorHandle) -> None:
        from ..context import GROUP, TRANSACTION

        assert groups.first_use is not None and txn.first_use is not None
        self.context.txn_coordinator = txn.coordinator
        self.context.group_coordinator = groups.coordinator
        self.context.internal_topics = {GROUP: groups.first_use, TRANSACTION: txn.first_use}

    async def close(self) -> None:
        self.context.coordinators_on_first_use = None
        self.context.group_coordinator = self.context.txn_coordinator = None
        while self.handles:  # groups first: they may wait on the transaction coordinator
            await self.handles.pop().close()
