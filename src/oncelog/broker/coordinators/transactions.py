"""Start-up and shut-down of the transaction coordinator inside the broker.

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

import logging
from typing import TYPE_CHECKING

from oncelog.coordinator.transaction import (
    FileProducerIdStore,
    MarkerChannel,
    ProducerIdManager,
    TransactionCoordinator,
)
from oncelog.storage.files import write_atomic

from .timers import DeadlineDriver
from .internal_log import InternalTopicLog
from .markers import LocalMarkerChannel

if TYPE_CHECKING:
    from ..server import Broker

__all__ = ["build_transaction_coordinator", "next_coordinator_epoch", "start_transaction_coordinator",
           "start_transaction_timers", "stop_transaction_coordinator", "TRANSACTION_STATE_TOPIC"]

log = logging.getLogger("oncelog.broker.transactions")

TRANSACTION_STATE_TOPIC = "__transaction_state"
EPOCH_FILE = "transaction-coordinator.epoch"
_TIMER_ATTR = "_txn_coordinator_timer"


def next_coordinator_epoch(broker: "Broker") -> int:
    """The epoch of this start of the broker's coordinators: one more than the last start's (kept in the data
    folder). On a single node it plays the part of the internal partitions' leader epoch."""
    path = broker.config.data_dir / EPOCH_FILE
    try:
        epoch = int(path.read_text().strip()) + 1
    except (FileNotFoundError, ValueError):
        epoch = 0
    write_atomic(path, f"{epoch}\n".encode())
    return epoch


def build_transaction_coordinator(broker: "Broker", txn_log: InternalTopicLog, channel: MarkerChannel,
                                  producer_ids: ProducerIdManager) -> TransactionCoordinator:
    """The coordinator over ``txn_log`` with its timer driver (started by :func:`start_transaction_timers`); no
    partition loaded yet."""
    cfg = broker.config
    coordinator = TransactionCoordinator(cfg, broker.clock, txn_log, channel, producer_ids,
                                         num_partitions=txn_log.num_partitions,
                                         write_timeout_ms=cfg.request_timeout_ms)
    timer = DeadlineDriver("txn-timers", broker.clock.wall_ms, coordinator.next_deadline,
                           lambda: _fire_timers(coordinator),
                           max_wait_ms=max(10, min(cfg.transaction_abort_timed_out_transaction_cleanup_interval_ms,
                                                   cfg.transaction_remove_expired_transaction_cleanup_interval_ms)))
    coordinator.on_timer = timer.wake
    setattr(broker, _TIMER_ATTR, timer)
    return coordinator


def start_transaction_timers(broker: "Broker") -> None:
    timer: DeadlineDriver | None = getattr(broker, _TIMER_ATTR, None)
    if timer is not None:
        timer.start()


async def start_transaction_coordinator(broker: "Broker", epoch: int) -> None:
    """A single node: it leads every ``__transaction_state`` partition, at the epoch of this start."""
    cfg = broker.config
    txn_log = InternalTopicLog(broker, TRANSACTION_STATE_TOPIC, cfg.transaction_state_log_num_partitions,
                               {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)})
    txn_log.ensure()
    store = FileProducerIdStore(str(cfg.data_dir / "producer-ids"))
    coordinator = build_transaction_coordinator(
        broker, txn_log, LocalMarkerChannel(broker.context.marker_writer, cfg.node_id),
        ProducerIdManager(store.load, store.persist))
    for partition in range(txn_log.num_partitions):
        txn_log.become_leader(partition, epoch)
        await coordinator.load_partition(partition, epoch, txn_log.read(partition), complete_pending=False)
    broker.txn_coordinator = coordinator
    broker.spawn(_finish_pending(coordinator), "txn-complete-pending")
    start_transaction_timers(broker)


async def _finish_pending(coordinator: TransactionCoordinator) -> None:
    finished = await coordinator.complete_pending_after_load()
    if finished:
        log.info("completed %d transaction(s) left prepared by the previous run: %s", len(finished),
                 ", ".join(finished[:10]))


async def _fire_timers(coordinator: TransactionCoordinator) -> None:
    done = await coordinator.fire_timers()
    if done:
        log.info("aborted timed-out transactions / expired transactional ids: %s", ", ".join(done[:10]))


async def stop_transaction_coordinator(broker: "Broker") -> None:
    timer = getattr(broker, _TIMER_ATTR, None)
    if timer is not None:
        await timer.close()
        setattr(broker, _TIMER_ATTR, None)
    if broker.txn_coordinator is not None:
        await broker.txn_coordinator.close()
        broker.txn_coordinator = None
