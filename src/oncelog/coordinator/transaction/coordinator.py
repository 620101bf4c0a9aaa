"""The transaction coordinator: Kafka's InitProducerId / AddPartitionsToTxn / AddOffsetsToTxn / EndTxn /
DescribeTransactions / ListTransactions semantics over a :class:`CoordinatorRuntime`.

This is the service the broker's handlers call. It checks requests, routes each transactional id to its
``__transaction_state`` partition, runs the decision (``operations.py``: records + typed outcome) on that
partition's queue, and turns outcomes into answers. Every state change is a record appended to
``__transaction_state`` and only then replayed into memory.

EndTxn: Ongoing -> PrepareCommit/PrepareAbort (durable) -> markers delivered by the :class:`MarkerDriver`
(``markers.py``) until every partition has its marker durably -> CompleteCommit/CompleteAbort -> answer the client.
Kafka answers right after the Prepare record; oncelog answers after completion so the producer's next
AddPartitions does not meet CONCURRENT_TRANSACTIONS and a read_committed consumer sees the transaction's outcome as
soon as EndTxn returns. The Complete* record is the one record applied before it is durable (``await_durable=False``):
the answer promises only what the durable markers already guarantee, and a Complete* lost in a crash is redone at load
(PrepareCommit/Abort found, markers written again); every later record of the partition, being fsynced after it,
cannot outlive it. The completion starts when the Prepare record is replayed (the operation's ``on_applied``), so a
client that gives up, or a retry served before the original caller resumes, neither stops it nor finds it missing.

Transactions V1 and V2, chosen per request as Kafka does: EndTxn v5+ is transactions V2 (KIP-890 part 2: the end
bumps the epoch, the answer carries the producer id and epoch to go on with, see ``operations.end_txn_v2``), older
versions V1 (the epoch stays). A partition added by a broker for a V2 write (AddPartitionsToTxn v4+ without
verify_only: the implicit registration of Produce v12 and TxnOffsetCommit v5) records client transaction version 2.
Fences (a timeout, a fencing InitProducerId) use the coordinator's own level, ``transaction.version``.

KIP-939 (two-phase commit), allowed only with ``transaction.two.phase.commit.enable``: InitProducerId with
``enable_2pc`` gives the transactional id no timeout (Integer.MAX_VALUE, never aborted by the timer);
``keep_prepared_txn`` on an Ongoing transaction keeps it (partitions and all) but bumps the epoch, so the old
instance is fenced and the new one commits or aborts it; ``init_producer_id_ex`` also returns the kept
transaction's producer id/epoch (InitProducerId v6 response fields). A plain InitProducerId still aborts it.

Timeouts and expiry are timers keyed by deadline (``TransactionShard.timeouts`` / ``expirations``, wall-clock ms),
scheduled by the replay of every record: :meth:`TransactionCoordinator.next_deadline` is the earliest; the broker
arms one timer there (``on_timer`` hears of sooner ones) and calls :meth:`TransactionCoordinator.fire_timers`, which
aborts the transactions whose timeout is due and expires the idle ids whose expiration is due. Nothing scans every id.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from oncelog.clock import Clock
from oncelog.protocol.errors import ErrorCode

from ..runtime import CoordinatorError, CoordinatorLog, CoordinatorResult, CoordinatorRuntime, LogEntry
from ..timers import DeadlineTimers
from . import operations as ops
from .markers import MarkerChannel, MarkerDriver, PendingCompletion
from .metadata import INT_MAX, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TopicPartition, TxnError, TxnTransitMetadata
from .operations import FencedOngoing, KeptPrepared, TxnDescription, TxnListing, TxnListResult
from .partitioner import partition_for
from .producer_ids import ProducerIdManager
from .shard import TransactionShard
from .state import TxnState

__all__ = [
    "OFFSETS_TOPIC",
    "EndTxnResult",
    "InitProducerIdResult",
    "TransactionConfig",
    "TransactionCoordinator",
    "TxnCoordinatorConfig",
    "TxnDescription",
    "TxnListResult",
    "TxnListing",
]

log = logging.getLogger("oncelog.coordinator.transaction")

OFFSETS_TOPIC = "__consumer_offsets"
T = TypeVar("T")

#: a due timeout/expiration that could not be acted on (a write of that id in flight, or a failed write): try again
TIMER_RETRY_MS = 1_000


class TransactionConfig(Protocol):
    """What the coordinator reads from the broker config (``BrokerConfig`` has these attributes)."""

    transaction_max_timeout_ms: int
    transactional_id_expiration_ms: int
    transaction_two_phase_commit_enable: bool
    offsets_topic_num_partitions: int
    transaction_version: int  # the finalized level of Kafka's ``transaction.version`` feature


@dataclass
class TxnCoordinatorConfig:
    """Kafka's defaults; tests and tools can use this instead of a full broker config."""

    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000
    transaction_two_phase_commit_enable: bool = False
    offsets_topic_num_partitions: int = 50
    transaction_version: int = 2


@dataclass
class InitProducerIdResult:
    error_code: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    ongoing_txn_producer_id: int = NO_PRODUCER_ID  # KIP-939: the kept (prepared) transaction, if any
    ongoing_txn_producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass
class EndTxnResult:
    """EndTxn's answer; for transactions V2 (v5+) with the producer id and epoch the producer goes on with."""
    error_code: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


def _fenced(code: ErrorCode, version: int, min_version: int) -> ErrorCode:
    """Clients older than KIP-588 know INVALID_PRODUCER_EPOCH, not PRODUCER_FENCED (KafkaApis does this)."""
    if code is ErrorCode.PRODUCER_FENCED and version < min_version:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code


class TransactionCoordinator:
    def __init__(self, config: TransactionConfig, clock: Clock, log: CoordinatorLog, markers: MarkerChannel,
                 producer_ids: ProducerIdManager, num_partitions: int = 50,
                 sleep: Callable[[float], Awaitable[None]] | None = None, retry_backoff_ms: int = 100,
                 retry_backoff_max_ms: int = 5_000, write_timeout_ms: int | None = None) -> None:
        self.config = config
        self.clock = clock
        self.producer_ids = producer_ids
        self.num_partitions = num_partitions
        self.pid_index: dict[int, str] = {}
        #: told of a timer deadline (wall ms) sooner than every other one scheduled (the broker re-arms)
        self.on_timer: Callable[[int], None] | None = None
        self.runtime: CoordinatorRuntime[TransactionShard] = CoordinatorRuntime(
            log, lambda p: TransactionShard(p, self.pid_index, config.transactional_id_expiration_ms,
                                            on_timer=self._timer_scheduled),
            sleep=sleep, write_timeout_ms=write_timeout_ms)
        self.markers = MarkerDriver(markers, self.runtime, self._write_completion, retry_backoff_ms,
                                    retry_backoff_max_ms)

    # ------------------------------------------------------------------ ownership / loading
    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    def owns(self, partition: int) -> bool:
        return self.runtime.shard(partition) is not None

    async def load_partition(self, partition: int, epoch: int, entries: Iterable[LogEntry],
                             complete_pending: bool = True) -> None:
        """Become the coordinator of a ``__transaction_state`` partition at ``epoch`` (start-up, or leadership of
        the partition): replay it; unless told not to, then finish what the log left half done (see
        :meth:`complete_pending_after_load`)."""
        shard = await self.runtime.load(partition, epoch, entries)
        if shard is not None and complete_pending:
            await self._complete_pending(partition)

    def unload_partition(self, partition: int, epoch: int | None = None) -> None:
        """Stop coordinating a partition (another broker leads it now, at ``epoch``)."""
        shard = self.runtime.shard(partition)
        if not self.runtime.unload(partition, epoch):
            return
        if shard is not None:
            for md in shard.txns.values():
                if self.pid_index.get(md.producer_id) == md.transactional_id:
                    del self.pid_index[md.producer_id]
        self.markers.forget(partition)

    async def complete_pending_after_load(self) -> list[str]:
        """Re-send markers and write Complete* for every PrepareCommit/PrepareAbort; abort a PrepareEpochFence.
        Returns the transactional ids being completed (their completion runs in the background)."""
        out: list[str] = []
        for partition in sorted(self.runtime.shards()):
            out += await self._complete_pending(partition)
        return out

    async def _complete_pending(self, partition: int) -> list[str]:
        shard = self.runtime.shard(partition)
        if shard is None:
            return []
        out: list[str] = []
        for txn_id, md in sorted(shard.txns.items()):
            if md.pending_state is not None:
                continue
            if md.state.is_prepare:
                self._ensure_completion(partition, txn_id, md.snapshot())
                out.append(txn_id)
            elif md.state is TxnState.PREPARE_EPOCH_FENCE:
                try:
                    t = await self._run(partition, self._abort_op(partition, txn_id, md.producer_id,
                                                                  ops.abort_fenced))
                except (CoordinatorError, TxnError) as e:
                    log.warning("could not abort fenced transaction %s after load: %s", txn_id, e)
                    continue
                if t is not None:  # its PrepareAbort record started the completion (on_applied)
                    out.append(txn_id)
        return out

    async def wait_idle(self) -> None:
        """Wait for every background completion (tests, orderly shutdown)."""
        await self.runtime.wait_idle()

    async def close(self) -> None:
        await self.runtime.close()

    # ------------------------------------------------------------------ helpers
    async def _run(self, partition: int, op: Callable[[TransactionShard], CoordinatorResult[T]]) -> T:
        return await self.runtime.run(partition, op)

    def _now(self) -> int:
        return self.clock.wall_ms()

    def _not_held(self, partition: int) -> ErrorCode:
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self.runtime.is_loading(partition) \
            else ErrorCode.NOT_COORDINATOR

    # ------------------------------------------------------------------ InitProducerId
    async def init_producer_id(self, transactional_id: str | None, txn_timeout_ms: int,
                               expected_producer_id: int = NO_PRODUCER_ID,
                               expected_epoch: int = NO_PRODUCER_EPOCH, version: int = 5,
                               enable_2pc: bool = False,
                               keep_prepared_txn: bool = False) -> tuple[ErrorCode, int, int]:
        """-> (error, producer_id, producer_epoch). ``version`` is the InitProducerId request version."""
        r = await self.init_producer_id_ex(transactional_id, txn_timeout_ms, expected_producer_id, expected_epoch,
                                           version, enable_2pc, keep_prepared_txn)
        return r.error_code, r.producer_id, r.producer_epoch

    async def init_producer_id_ex(self, transactional_id: str | None, txn_timeout_ms: int,
                                  expected_producer_id: int = NO_PRODUCER_ID,
                                  expected_epoch: int = NO_PRODUCER_EPOCH, version: int = 5,
                                  enable_2pc: bool = False, keep_prepared_txn: bool = False) -> InitProducerIdResult:
        """InitProducerId with the v6 (KIP-939) response fields: the kept transaction's producer id/epoch."""
        def err(code: ErrorCode) -> InitProducerIdResult:
            return InitProducerIdResult(_fenced(code, version, 4))

        try:
            await self.producer_ids.ensure_available()
        except Exception as e:  # noqa: BLE001 - the cluster's producer id counter cannot be reached
            log.warning("could not fetch a block of producer ids: %s", e)
            return err(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if transactional_id is None:
            if enable_2pc or keep_prepared_txn:
                return err(ErrorCode.INVALID_REQUEST)
            try:
                return InitProducerIdResult(ErrorCode.NONE, self.producer_ids.generate(), 0)
            except Exception as e:  # noqa: BLE001 - persisting the next block failed
                log.warning("could not allocate a producer id: %s", e)
                return err(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if transactional_id == "":
            return err(ErrorCode.INVALID_REQUEST)
        if (expected_producer_id == NO_PRODUCER_ID) != (expected_epoch == NO_PRODUCER_EPOCH):
            return err(ErrorCode.INVALID_REQUEST)
        expected = None if expected_producer_id == NO_PRODUCER_ID else (expected_producer_id, expected_epoch)
        if (enable_2pc or keep_prepared_txn) and not self.config.transaction_two_phase_commit_enable:
            # KIP-939 is allowed only when the broker enables transaction.two.phase.commit.enable
            return err(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if enable_2pc:
            txn_timeout_ms = INT_MAX  # a 2PC transaction never times out
        elif not 0 < txn_timeout_ms <= self.config.transaction_max_timeout_ms:
            return err(ErrorCode.INVALID_TRANSACTION_TIMEOUT)

        partition = self.partition_for(transactional_id)
        txn_id = transactional_id

        def op(shard: TransactionShard) -> CoordinatorResult[ops.InitOutcome]:
            result = ops.init_producer_id(shard, txn_id, txn_timeout_ms, expected, keep_prepared_txn, self._now(),
                                          self.producer_ids.generate, self.config.transaction_version)
            if isinstance(result.response, FencedOngoing):
                self._when_prepared(result, partition, txn_id, result.response.transit)
            return result

        try:
            outcome = await self._run(partition, op)
        except (CoordinatorError, TxnError) as e:
            return err(e.code)
        t = outcome.transit
        if isinstance(outcome, KeptPrepared):
            return InitProducerIdResult(ErrorCode.NONE, t.producer_id, t.producer_epoch, outcome.kept.producer_id,
                                        outcome.kept.producer_epoch)
        if isinstance(outcome, FencedOngoing):
            # An ongoing transaction was fenced: the abort is durable; finish it (markers + CompleteAbort), then
            # tell the producer to retry, which bumps the epoch once more (or rotates the producer id).
            code = await self.markers.wait(self._ensure_completion(partition, txn_id, t))
            return err(ErrorCode.CONCURRENT_TRANSACTIONS if code is ErrorCode.NONE else code)
        return InitProducerIdResult(ErrorCode.NONE, t.producer_id, t.producer_epoch)

    # ------------------------------------------------------------------ AddPartitionsToTxn / AddOffsetsToTxn
    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: list[TopicPartition], verify_only: bool = False,
                             version: int = 5, client_transaction_version: int = 0) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn (``version`` maps PRODUCER_FENCED for old clients). ``client_transaction_version`` 2:
        a broker registers the partitions of a transactions V2 write (Kafka: AddPartitionsToTxn v4+ that is not
        verify_only)."""
        tps = [(str(t), int(p)) for t, p in partitions]

        def all_(code: ErrorCode) -> dict[TopicPartition, ErrorCode]:
            return {tp: _fenced(code, version, 2) for tp in tps}

        if not transactional_id:
            return all_(ErrorCode.INVALID_REQUEST)
        partition = self.partition_for(transactional_id)
        if verify_only:
            shard = self.runtime.shard(partition)
            if shard is None:
                return all_(self._not_held(partition))
            return {tp: _fenced(code, version, 2) for tp, code in
                    ops.verify_add_partitions(shard, transactional_id, producer_id, producer_epoch, tps).items()}
        wanted = set(tps)
        try:
            code = await self._run(partition, lambda s: ops.add_partitions(
                s, transactional_id, producer_id, producer_epoch, wanted, self._now(), client_transaction_version))
        except (CoordinatorError, TxnError) as e:
            code = e.code
        return all_(code)

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str,
                          version: int = 3) -> ErrorCode:
        tp = (OFFSETS_TOPIC, partition_for(group_id, self.config.offsets_topic_num_partitions))
        result = await self.add_partitions(transactional_id, producer_id, producer_epoch, [tp], version=version)
        return result[tp]

    def verify_partition(self, producer_id: int, producer_epoch: int, topic: str, partition: int,
                         transactional_id: str | None = None) -> ErrorCode:
        """For the broker's Produce path: may this transactional batch be appended to (topic, partition)?

        NONE only if the producer's transaction is Ongoing with that partition added and the epoch matches.
        """
        txn_id = transactional_id if transactional_id else self.pid_index.get(producer_id)
        if txn_id is None:
            return ErrorCode.INVALID_TXN_STATE
        shard = self.runtime.shard(self.partition_for(txn_id))
        if shard is None:
            return ErrorCode.NOT_COORDINATOR
        return ops.verify_partition(shard, txn_id, producer_id, producer_epoch, (topic, partition))

    # ------------------------------------------------------------------ EndTxn
    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                      version: int = 4) -> ErrorCode:
        return (await self.end_txn_ex(transactional_id, producer_id, producer_epoch, commit, version)).error_code

    async def end_txn_ex(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                         version: int = 4) -> EndTxnResult:
        """EndTxn at request ``version``: v5+ is transactions V2 (the answer names the producer's next id and
        epoch), older versions V1."""
        if not transactional_id:
            return EndTxnResult(ErrorCode.INVALID_REQUEST)
        partition = self.partition_for(transactional_id)
        txn_id = transactional_id
        v2 = version >= 5

        def op(shard: TransactionShard) -> CoordinatorResult[ops.Completing | ops.Ended | ErrorCode]:
            result: CoordinatorResult[ops.Completing | ops.Ended | ErrorCode]
            if v2:
                result = ops.end_txn_v2(shard, txn_id, producer_id, producer_epoch, commit, self._now(),
                                        self.producer_ids.generate)
            else:
                result = ops.end_txn(shard, txn_id, producer_id, producer_epoch, commit, self._now())  # type: ignore[assignment]
            if isinstance(result.response, ops.Completing):
                self._when_prepared(result, partition, txn_id, result.response.transit)
            return result

        try:
            if v2:
                await self.producer_ids.ensure_available()  # an exhausted epoch needs a new producer id
            outcome = await self._run(partition, op)
        except (CoordinatorError, TxnError) as e:
            return EndTxnResult(_fenced(e.code, version, 2))
        except Exception as e:  # noqa: BLE001 - the cluster's producer id counter cannot be reached
            log.warning("EndTxn of %s: could not fetch a block of producer ids: %s", txn_id, e)
            return EndTxnResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if isinstance(outcome, ErrorCode):
            return EndTxnResult(_fenced(outcome, version, 2))
        if isinstance(outcome, ops.Ended):
            return EndTxnResult(ErrorCode.NONE, outcome.producer_id, outcome.producer_epoch)
        # The completion was started when the Prepare record was replayed (on_applied), even if this caller (or the
        # original one, for a retry) went away meanwhile; this finds it by its key.
        code = await self.markers.wait(self._ensure_completion(partition, txn_id, outcome.transit))
        t = outcome.transit
        if code is not ErrorCode.NONE or not v2:
            return EndTxnResult(code)
        if t.next_producer_id != NO_PRODUCER_ID:  # the epoch overflowed: the Complete* record moved to a new id
            return EndTxnResult(code, t.next_producer_id, 0)
        return EndTxnResult(code, t.producer_id, t.producer_epoch)

    # ------------------------------------------------------------------ completion (markers + Complete*)
    def _when_prepared(self, result: CoordinatorResult[T], partition: int, txn_id: str,
                       transit: TxnTransitMetadata) -> None:
        """An operation that writes a Prepare* record (``transit``) gets its ``on_applied``: start the completion as
        soon as the record is replayed, so it runs even when the caller is gone and a retry of EndTxn finds it
        running."""
        if result.records:
            result.on_applied = lambda: self._start_completion(partition, txn_id, transit)

    def _start_completion(self, partition: int, txn_id: str, t: TxnTransitMetadata) -> None:
        self._ensure_completion(partition, txn_id, t)

    def _abort_op(self, partition: int, txn_id: str, pid: int,
                  decide: Callable[[TransactionShard, str, int, int, int, Callable[[], int]],
                                   CoordinatorResult[TxnTransitMetadata | None]]
                  ) -> Callable[[TransactionShard], CoordinatorResult[TxnTransitMetadata | None]]:
        """A coordinator-initiated abort (timed out, or a PrepareEpochFence found at load) whose PrepareAbort
        record starts the completion."""
        def op(shard: TransactionShard) -> CoordinatorResult[TxnTransitMetadata | None]:
            result = decide(shard, txn_id, pid, self._now(), self.config.transaction_version,
                            self.producer_ids.generate)
            if result.response is not None:
                self._when_prepared(result, partition, txn_id, result.response)
            return result
        return op

    def _ensure_completion(self, partition: int, txn_id: str, t: TxnTransitMetadata) -> asyncio.Future[ErrorCode]:
        """The completion of the prepared transaction ``t``: the running one, or a new one if ``t`` is still the
        transaction's state. A caller that resumes after the completion finished (it starts when the Prepare record
        is replayed, and can be done before the EndTxn caller runs again) gets NONE: starting another would send
        ``t``'s markers a second time, and with the same producer epoch (transactions V1) a late COMMIT/ABORT
        marker would end the producer's *next* transaction on those partitions; its Complete* write then found the
        transaction complete and answered INVALID_TXN_STATE, which librdkafka takes as fatal."""
        running = self.markers.running(partition, txn_id)
        if running is not None:
            return running
        shard = self.runtime.shard(partition)
        md = shard.txns.get(txn_id) if shard is not None else None
        if shard is not None and (md is None or md.state is not t.state or md.producer_id != t.producer_id
                                  or md.producer_epoch != t.producer_epoch
                                  or md.txn_start_timestamp != t.txn_start_timestamp):
            done: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
            done.set_result(ErrorCode.NONE)  # completed already: its Prepare record decided it
            return done
        epoch = self.runtime.epoch(partition)
        pc = PendingCompletion(partition, -1 if epoch is None else epoch, txn_id, t.producer_id, t.producer_epoch,
                               t.state is TxnState.PREPARE_COMMIT, tuple(sorted(t.topic_partitions)))
        return self.markers.ensure(pc)

    async def _write_completion(self, pc: PendingCompletion) -> ErrorCode:
        return await self._run(pc.partition, lambda s: ops.complete(
            s, pc.transactional_id, pc.producer_id, pc.producer_epoch, pc.commit, self._now()))

    # ------------------------------------------------------------------ background: timeouts and expiry
    def _timer_scheduled(self, deadline: int) -> None:
        if self.on_timer is not None:
            self.on_timer(deadline)

    def next_deadline(self) -> int | None:
        """The earliest timeout or expiration (wall ms) of the loaded partitions; None when none is scheduled."""
        deadlines = [d for d in (s.next_deadline() for s in self.runtime.shards().values()) if d is not None]
        return min(deadlines, default=None)

    async def fire_timers(self) -> list[str]:
        """Abort the transactions whose timeout is due, expire the idle ids whose expiration is due."""
        return await self.abort_timed_out_transactions() + await self.expire_transactional_ids()

    def _due(self, timers_of: Callable[[TransactionShard], DeadlineTimers[str]], now: int
             ) -> list[tuple[int, TransactionShard, list[str]]]:
        out = []
        for partition, shard in sorted(self.runtime.shards().items()):
            deadline = timers_of(shard).next_deadline()
            if deadline is not None and deadline <= now:
                out.append((partition, shard, timers_of(shard).pop_due(now)))
        return out

    def _retry_later(self, partition: int, shard: TransactionShard,
                     timers_of: Callable[[TransactionShard], DeadlineTimers[str]], txn_id: str, now: int) -> None:
        """A due id was not acted on and no replay rescheduled it (a write of it in flight, a failed write): look
        again in TIMER_RETRY_MS if its state still calls for it."""
        timers = timers_of(shard)
        if self.runtime.shard(partition) is not shard or txn_id in timers:
            return
        shard.schedule(txn_id, shard.txns.get(txn_id))
        deadline = timers.deadline(txn_id)
        if deadline is not None and deadline <= now:
            timers.schedule(txn_id, now + TIMER_RETRY_MS)

    async def abort_timed_out_transactions(self) -> list[str]:
        """Ongoing transactions whose timeout timer is due: fence the epoch (the producer is fenced) and abort them.
        Returns the ids whose PrepareAbort is durable; markers and CompleteAbort follow in the background."""
        now = self._now()
        candidates: list[tuple[int, str, int]] = []
        due: list[tuple[int, TransactionShard, str]] = []
        for partition, shard, txn_ids in self._due(_timeouts, now):
            candidates += [(partition, txn_id, pid) for txn_id, pid in ops.timed_out(shard, now, txn_ids)]
            due += [(partition, shard, txn_id) for txn_id in txn_ids]
        aborted: list[str] = []
        for partition, txn_id, pid in candidates:
            try:
                await self.producer_ids.ensure_available()  # a fence at an exhausted epoch takes a new producer id
                t = await self._run(partition, self._abort_op(partition, txn_id, pid, ops.abort_timed_out))
            except Exception as e:  # noqa: BLE001 - a failed write, no producer id block: tried again later
                log.warning("rollback of timed-out transaction %s failed: %s", txn_id, e)
                continue
            if t is None:
                continue
            # its PrepareAbort record started the completion (on_applied)
            log.info("aborting transaction %s (producer %d): it timed out after %d ms", txn_id, pid,
                     t.txn_timeout_ms)
            aborted.append(txn_id)
        for partition, shard, txn_id in due:
            self._retry_later(partition, shard, _timeouts, txn_id, now)
        return aborted

    async def expire_transactional_ids(self) -> list[str]:
        """Idle Empty/Complete* ids whose expiration timer is due (transactional.id.expiration.ms after their last
        update): tombstone, then forget them."""
        now = self._now()
        horizon = now - self.config.transactional_id_expiration_ms
        candidates: list[tuple[int, str]] = []
        due: list[tuple[int, TransactionShard, str]] = []
        for partition, shard, txn_ids in self._due(_expirations, now):
            candidates += [(partition, txn_id) for txn_id in ops.expirable(shard, horizon, txn_ids)]
            due += [(partition, shard, txn_id) for txn_id in txn_ids]
        expired: list[str] = []
        for partition, txn_id in candidates:
            def op(shard: TransactionShard, txn_id: str = txn_id) -> CoordinatorResult[bool]:
                return ops.expire(shard, txn_id, horizon)
            try:
                if await self._run(partition, op):
                    expired.append(txn_id)
            except (CoordinatorError, TxnError) as e:
                log.warning("expiring transactional id %s failed: %s", txn_id, e)
        for partition, shard, txn_id in due:
            self._retry_later(partition, shard, _expirations, txn_id, now)
        return expired

    # ------------------------------------------------------------------ Describe / List
    def describe(self, transactional_ids: list[str]) -> list[TxnDescription]:
        out: list[TxnDescription] = []
        for txn_id in transactional_ids:
            if not txn_id:
                out.append(TxnDescription(txn_id, ErrorCode.INVALID_REQUEST))
                continue
            partition = self.partition_for(txn_id)
            shard = self.runtime.shard(partition)
            out.append(TxnDescription(txn_id, self._not_held(partition)) if shard is None
                       else ops.describe(shard, txn_id))
        return out

    def list(self, state_filters: Iterable[str] = (), producer_id_filters: Iterable[int] = (),
             duration_filter_ms: int = -1) -> TxnListResult:
        if any(self.runtime.is_loading(p) for p in range(self.num_partitions)):
            return TxnListResult(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, [], [])
        shards = [shard for _, shard in sorted(self.runtime.shards().items())]
        return ops.list_transactions(shards, state_filters, producer_id_filters, duration_filter_ms, self._now())


def _timeouts(shard: TransactionShard) -> DeadlineTimers[str]:
    return shard.timeouts


def _expirations(shard: TransactionShard) -> DeadlineTimers[str]:
    return shard.expirations
