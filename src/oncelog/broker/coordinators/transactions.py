"""The transaction coordinator inside a broker: built from what it uses, started and closed through a handle.

The coordinator's log is ``__transaction_state`` (compacted, ``transaction.state.log.num.partitions`` partitions);
its markers are written by ``LocalMarkerChannel`` (this node leads every partition). Every partition is loaded at
start-up through the same replay path as live operation, at the broker's coordinator epoch, then transactions found
in PrepareCommit/PrepareAbort are finished in the background. The coordinator epoch grows by one at every start (:func:`next_coordinator_epoch`), so
markers from an older incarnation are fenced. A write not durable within ``request.timeout.ms`` answers
COORDINATOR_NOT_AVAILABLE (Kafka's TransactionStateManager does the same).

Transaction timeouts and transactional-id expiry are timers keyed by deadline in the coordinator; one event-loop
timer (``DeadlineDriver``) is armed at the earliest of them and re-armed when a sooner one is scheduled, so a
transaction is aborted when its timeout passes, not at the next periodic scan. The two cleanup intervals
(``transaction.abort.timed.out.transaction.cleanup.interval.ms``, ``transaction.remove.expired.transaction.cleanup.
interval.ms``) now only bound one wait of that timer: the deadlines are wall-clock times, so a step of the wall clock
is noticed within the shorter interval.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oncelog.clock import Clock
from oncelog.coordinator.runtime import LogEntry
from oncelog.coordinator.transaction import (
    FileProducerIdStore,
    MarkerChannel,
    ProducerIdManager,
    TransactionCoordinator,
)
from oncelog.storage.files import write_atomic

from .internal_log import InternalTopicLog
from .markers import LocalMarkerChannel, LocalMarkerWriter
from .single_node import LoadOnFirstUse
from .timers import DeadlineDriver

if TYPE_CHECKING:
    from ..settings.config import BrokerConfig
    from ..topics import TopicRegistry

__all__ = ["TRANSACTION_STATE_TOPIC", "Spawn", "TransactionCoordinatorHandle", "build_single_node_transactions",
           "build_transaction_coordinator", "next_coordinator_epoch", "start_single_node_transactions"]

#: runs a background job for the broker's lifetime (``Broker.spawn``: cancelled at stop)
Spawn = Callable[[Coroutine[Any, Any, Any], str], "asyncio.Task[Any]"]

log = logging.getLogger("oncelog.broker.transactions")

TRANSACTION_STATE_TOPIC = "__transaction_state"
EPOCH_FILE = "transaction-coordinator.epoch"


class TransactionCoordinatorHandle:
    """The transaction coordinator and its timer: :meth:`start` arms the timer (for what loading scheduled),
    :meth:`close` stops both."""

    def __init__(self, coordinator: TransactionCoordinator, timer: DeadlineDriver) -> None:
        self.coordinator = coordinator
        self.timer = timer
        self.first_use: LoadOnFirstUse | None = None  # a single node: loads __transaction_state on first use

    def start(self) -> None:
        self.timer.start()

    async def close(self) -> None:
        await self.timer.close()
        await self.coordinator.close()


def next_coordinator_epoch(data_dir: Path) -> int:
    """The epoch of this start of the broker's coordinators: one more than the last start's (kept in the data
    folder). On a single node it plays the part of the internal partitions' leader epoch."""
    path = data_dir / EPOCH_FILE
    try:
        epoch = int(path.read_text().strip()) + 1
    except (FileNotFoundError, ValueError):
        epoch = 0
    write_atomic(path, f"{epoch}\n".encode())
    return epoch


def build_transaction_coordinator(cfg: BrokerConfig, clock: Clock, txn_log: InternalTopicLog, channel: MarkerChannel,
                                  producer_ids: ProducerIdManager) -> TransactionCoordinatorHandle:
    """The coordinator over ``txn_log`` with its timer driver (armed by :meth:`TransactionCoordinatorHandle.start`);
    no partition loaded yet."""
    coordinator = TransactionCoordinator(cfg, clock, txn_log, channel, producer_ids,
                                         num_partitions=txn_log.num_partitions,
                                         write_timeout_ms=cfg.request_timeout_ms)
    timer = DeadlineDriver("txn-timers", clock.wall_ms, coordinator.next_deadline,
                           lambda: _fire_timers(coordinator),
                           max_wait_ms=max(10, min(cfg.transaction_abort_timed_out_transaction_cleanup_interval_ms,
                                                   cfg.transaction_remove_expired_transaction_cleanup_interval_ms)))
    coordinator.on_timer = timer.wake
    return TransactionCoordinatorHandle(coordinator, timer)


def build_single_node_transactions(cfg: BrokerConfig, clock: Clock, topics: TopicRegistry,
                                   marker_writer: LocalMarkerWriter, epoch: int) -> TransactionCoordinatorHandle:
    """A single node's transaction coordinator (it leads every ``__transaction_state`` partition, at the epoch of
    this start), not started, nothing loaded: ``handle.first_use`` loads the partitions (creating the topic when
    absent)."""
    txn_log = InternalTopicLog(topics, clock, TRANSACTION_STATE_TOPIC, cfg.transaction_state_log_num_partitions,
                               {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)})
    existing = topics.get(TRANSACTION_STATE_TOPIC)
    if existing is not None:
        txn_log.num_partitions = len(existing.partitions)
    store = FileProducerIdStore(str(cfg.data_dir / "producer-ids"))
    handle = build_transaction_coordinator(cfg, clock, txn_log, LocalMarkerChannel(marker_writer, cfg.node_id),
                                           ProducerIdManager(store.load, store.persist))
    coordinator = handle.coordinator

    async def load(partition: int, epoch: int, entries: Iterator[LogEntry]) -> None:
        await coordinator.load_partition(partition, epoch, entries, complete_pending=False)

    handle.first_use = LoadOnFirstUse(txn_log, epoch, load)
    return handle


async def start_single_node_transactions(cfg: BrokerConfig, clock: Clock, topics: TopicRegistry,
                                         marker_writer: LocalMarkerWriter, epoch: int,
                                         spawn: Spawn) -> TransactionCoordinatorHandle:
    """A single node: it leads every ``__transaction_state`` partition, at the epoch of this start. The partitions
    are loaded now when the topic exists (the transactions the previous run left prepared are then finished by a
    job given to ``spawn``), else on first use (``handle.first_use``, as Kafka creates the topic on the first
    FindCoordinator for a transactional id). Returns the started handle."""
    handle = build_single_node_transactions(cfg, clock, topics, marker_writer, epoch)
    assert handle.first_use is not None
    if handle.first_use.exists:
        await handle.first_use.ensure()
        spawn(_finish_pending(handle.coordinator), "txn-complete-pending")
    handle.start()
    return handle


async def _finish_pending(coordinator: TransactionCoordinator) -> None:
    finished = await coordinator.complete_pending_after_load()
    if finished:
        log.info("completed %d transaction(s) left prepared by the previous run: %s", len(finished),
                 ", ".join(finished[:10]))


async def _fire_timers(coordinator: TransactionCoordinator) -> None:
    done = await coordinator.fire_timers()
    if done:
        log.info("aborted timed-out transactions / expired transactional ids: %s", ", ".join(done[:10]))
