"""The transaction coordinator: Kafka's InitProducerId / AddPartitionsToTxn / AddOffsetsToTxn / EndTxn /
DescribeTransactions / ListTransactions semantics over a :class:`CoordinatorRuntime`.

Every state change is a record appended to ``__transaction_state`` (through the injected ``CoordinatorLog``) and
only then replayed into memory. EndTxn: Ongoing -> PrepareCommit/PrepareAbort (durable) -> markers written by the
injected ``MarkerWriter`` until every partition has its marker durably (retried with backoff; a partition that no
longer exists is skipped) -> CompleteCommit/CompleteAbort -> answer the client. Kafka answers right
after the Prepare record; oncelog answers after completion so the producer's next AddPartitions does not meet
CONCURRENT_TRANSACTIONS and a read_committed consumer sees the transaction's outcome as soon as EndTxn returns.
The Complete* record is the one record applied before it is durable (``await_durable=False``): the answer
promises only what the durable markers already guarantee, and a Complete* lost in a crash is redone at load
(PrepareCommit/Abort found, markers written again); every later record of the partition, being fsynced after
it, cannot outlive it. The completion is a background task started when the Prepare record is replayed
(the operation's ``on_applied``), so a client that gives up, or a retry served before the original caller
resumes, neither stops it nor finds it missing.

Transactions V1 semantics (no epoch bump per EndTxn, KIP-890 part 2 is not implemented).

KIP-939 (two-phase commit), allowed only with ``transaction.two.phase.commit.enable``: InitProducerId with
``enable_2pc`` gives the transactional id no timeout (Integer.MAX_VALUE, never aborted by the timer);
``keep_prepared_txn`` on an Ongoing transaction keeps it (partitions and all) but bumps the epoch, so the old
instance is fenced and the new one commits or aborts it; ``init_producer_id_ex`` also returns the kept
transaction's producer id/epoch (InitProducerId v6 response fields). A plain InitProducerId still aborts it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from oncelog.clock import Clock
from oncelog.protocol.errors import ErrorCode

from ..runtime import CoordinatorError, CoordinatorLog, CoordinatorResult, CoordinatorRuntime, LogEntry
from .metadata import (
    INT_MAX,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    IllegalTransitionError,
    TopicPartition,
    TransactionMetadata,
    TxnError,
    TxnTransitMetadata,
    is_epoch_exhausted,
)
from .partitioner import partition_for
from .producer_ids import ProducerIdManager
from .records import encode_txn_record
from .shard import TransactionShard
from .state import TxnState

if TYPE_CHECKING:
    from asyncio import Task

__all__ = [
    "OFFSETS_TOPIC",
    "MarkerWriter",
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


class TransactionConfig(Protocol):
    """What the coordinator reads from the broker config (``BrokerConfig`` has these attributes)."""

    transaction_max_timeout_ms: int
    transactional_id_expiration_ms: int
    transaction_two_phase_commit_enable: bool
    offsets_topic_num_partitions: int


@dataclass
class TxnCoordinatorConfig:
    """Kafka's defaults; tests and tools can use this instead of a full broker config."""

    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000
    transaction_two_phase_commit_enable: bool = False
    offsets_topic_num_partitions: int = 50


class MarkerWriter(Protocol):
    async def write_markers(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                            partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """Append a COMMIT/ABORT control batch to each partition; return once the written ones are durable,
        with an error code per partition (UNKNOWN_TOPIC_OR_PARTITION = the partition does not exist)."""
        ...


@dataclass
class InitProducerIdResult:
    error_code: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    ongoing_txn_producer_id: int = NO_PRODUCER_ID  # KIP-939: the kept (prepared) transaction, if any
    ongoing_txn_producer_epoch: int = NO_PRODUCER_EPOCH


_InitAnswer = tuple[str, TxnTransitMetadata, "TxnTransitMetadata | None"]


@dataclass
class TxnDescription:
    transactional_id: str
    error_code: ErrorCode
    state: str = ""
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    transaction_timeout_ms: int = 0
    transaction_start_time_ms: int = -1
    topics: dict[str, list[int]] = field(default_factory=dict)


@dataclass
class TxnListing:
    transactional_id: str
    producer_id: int
    state: str


@dataclass
class TxnListResult:
    error_code: ErrorCode
    unknown_state_filters: list[str]
    transactions: list[TxnListing]


# marker errors: skip the partition (it is gone, or it has already moved past this producer epoch)
_MARKER_SKIP = {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID}
_MARKER_STALE = {ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED}
# marker errors: this coordinator no longer owns the transaction; stop (a newer coordinator finishes it)
_MARKER_ABANDON = {ErrorCode.TRANSACTION_COORDINATOR_FENCED, ErrorCode.NOT_COORDINATOR}


def _fenced(code: ErrorCode, version: int, min_version: int) -> ErrorCode:
    """Clients older than KIP-588 know INVALID_PRODUCER_EPOCH, not PRODUCER_FENCED (KafkaApis does this)."""
    if code is ErrorCode.PRODUCER_FENCED and version < min_version:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code


class TransactionCoordinator:
    def __init__(self, config: TransactionConfig, clock: Clock, log: CoordinatorLog, marker_writer: MarkerWriter,
                 producer_ids: ProducerIdManager, num_partitions: int = 50,
                 sleep: Callable[[float], Awaitable[None]] | None = None, retry_backoff_ms: int = 100,
                 retry_backoff_max_ms: int = 5_000, write_timeout_ms: int | None = None) -> None:
        self.config = config
        self.clock = clock
        self.marker_writer = marker_writer
        self.producer_ids = producer_ids
        self.num_partitions = num_partitions
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self.pid_index: dict[int, str] = {}
        self.runtime: CoordinatorRuntime[TransactionShard] = CoordinatorRuntime(
            log, lambda p: TransactionShard(p, self.pid_index), sleep=sleep, write_timeout_ms=write_timeout_ms)
        self._completions: dict[tuple[int, str], Task[ErrorCode]] = {}

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
        for key in [k for k in self._completions if k[0] == partition]:
            self._completions.pop(key, None)

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
                self._ensure_completion(partition, txn_id, md.producer_id, md.producer_epoch,
                                        md.state is TxnState.PREPARE_COMMIT, md.topic_partitions)
                out.append(txn_id)
            elif md.state is TxnState.PREPARE_EPOCH_FENCE:
                try:
                    t = await self.runtime.run(partition, self._abort_op(partition, txn_id, md.producer_id,
                                                                             fence=False))
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

    def _record(self, txn_id: str, t: TxnTransitMetadata, shard: TransactionShard | None = None
                ) -> list[tuple[bytes, bytes | None]]:
        key, value = encode_txn_record(txn_id, t)
        if shard is not None:
            shard.expect(key, value, txn_id, t)  # its replay need not decode what we just encoded
        return [(key, value)]

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
        try:
            kind, t, before = await self._run(
                partition, self._init_op(partition, transactional_id, txn_timeout_ms, expected, keep_prepared_txn))
        except (CoordinatorError, TxnError) as e:
            return err(e.code)
        if kind == "init":
            return InitProducerIdResult(ErrorCode.NONE, t.producer_id, t.producer_epoch)
        if kind == "kept":
            assert before is not None
            return InitProducerIdResult(ErrorCode.NONE, t.producer_id, t.producer_epoch, before.producer_id,
                                        before.producer_epoch)
        # An ongoing transaction was fenced: the abort is durable; finish it (markers + CompleteAbort), then tell
        # the producer to retry, which bumps the epoch once more (or rotates the producer id).
        code = await self._await_completion(
            self._ensure_completion(partition, transactional_id, t.producer_id, t.producer_epoch, False,
                                    t.topic_partitions))
        return err(ErrorCode.CONCURRENT_TRANSACTIONS if code is ErrorCode.NONE else code)

    def _init_op(self, partition: int, txn_id: str, timeout_ms: int, expected: tuple[int, int] | None,
                 keep_prepared: bool) -> Callable[[TransactionShard], CoordinatorResult[_InitAnswer]]:
        def op(shard: TransactionShard) -> CoordinatorResult[_InitAnswer]:
            now = self._now()
            md = shard.txns.get(txn_id)
            created = False
            if md is None:
                md = shard.creating.get(txn_id)
                if md is None:
                    md = TransactionMetadata(transactional_id=txn_id, producer_id=self.producer_ids.generate(),
                                             txn_timeout_ms=timeout_ms, txn_last_update_timestamp=now)
                    shard.creating[txn_id] = md
                created = True
            meta = md

            def on_failure() -> None:
                meta.abort_pending()
                if created:
                    shard.creating.pop(txn_id, None)

            before = meta.snapshot()
            try:
                kind, t = self._prepare_init(meta, timeout_ms, expected, now, keep_prepared)
            except BaseException:
                if created:
                    shard.creating.pop(txn_id, None)
                raise
            return CoordinatorResult(self._record(txn_id, t, shard), (kind, t, before), on_failure,
                                     self._completion_hook(partition, txn_id, t) if kind == "fence" else None)
        return op

    def _prepare_init(self, md: TransactionMetadata, timeout_ms: int, expected: tuple[int, int] | None,
                      now: int, keep_prepared: bool = False) -> tuple[str, TxnTransitMetadata]:
        if md.pending_transition_in_progress:
            raise TxnError(ErrorCode.CONCURRENT_TRANSACTIONS)
        if expected is not None:
            exp_pid, exp_epoch = expected
            valid = (md.producer_epoch == NO_PRODUCER_EPOCH or exp_pid == md.producer_id
                     or (exp_pid == md.previous_producer_id and is_epoch_exhausted(exp_epoch)))
            if not valid:
                raise TxnError(ErrorCode.PRODUCER_FENCED)
        s = md.state
        if s.is_prepare:
            raise TxnError(ErrorCode.CONCURRENT_TRANSACTIONS)
        if s in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            if md.is_producer_epoch_exhausted() and (expected is None or expected[1] == md.producer_epoch):
                new_pid = self.producer_ids.generate()
                return "init", md.prepare_producer_id_rotation(new_pid, timeout_ms, now, expected is not None)
            return "init", md.prepare_increment_producer_epoch(
                timeout_ms, None if expected is None else expected[1], now)
        if s is TxnState.ONGOING and keep_prepared:
            return "kept", md.prepare_keep_prepared_txn(now)
        if s is TxnState.ONGOING:
            # The bumped epoch is never returned: the producer gets CONCURRENT_TRANSACTIONS and retries, which
            # bumps again (or rotates the producer id when fencing exhausted the epochs).
            return "fence", md.prepare_fence_and_abort(now)
        if s is TxnState.PREPARE_EPOCH_FENCE:  # only if a log held one: abort with its (fenced) epoch
            return "fence", md.prepare_abort_or_commit(TxnState.PREPARE_ABORT, now)
        raise IllegalTransitionError(f"{md.transactional_id} is {s.display_name}: should never be seen")

    # ------------------------------------------------------------------ AddPartitionsToTxn / AddOffsetsToTxn
    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: list[TopicPartition], verify_only: bool = False,
                             version: int = 5) -> dict[TopicPartition, ErrorCode]:
        tps = [(str(t), int(p)) for t, p in partitions]

        def all_(code: ErrorCode) -> dict[TopicPartition, ErrorCode]:
            return {tp: _fenced(code, version, 2) for tp in tps}

        if not transactional_id:
            return all_(ErrorCode.INVALID_REQUEST)
        partition = self.partition_for(transactional_id)
        if verify_only:
            return self._verify(partition, transactional_id, producer_id, producer_epoch, tps, version)
        try:
            code = await self._run(partition, self._add_op(transactional_id, producer_id, producer_epoch, set(tps)))
        except (CoordinatorError, TxnError) as e:
            code = e.code
        return all_(code)

    def _add_op(self, txn_id: str, pid: int, epoch: int, tps: set[TopicPartition]
                ) -> Callable[[TransactionShard], CoordinatorResult[ErrorCode]]:
        def op(shard: TransactionShard) -> CoordinatorResult[ErrorCode]:
            md = shard.txns.get(txn_id)
            if md is None or md.producer_id != pid:
                return CoordinatorResult([], ErrorCode.INVALID_PRODUCER_ID_MAPPING)
            if md.producer_epoch != epoch:
                return CoordinatorResult([], ErrorCode.PRODUCER_FENCED)
            if md.pending_transition_in_progress or md.state.is_prepare \
                    or md.state is TxnState.PREPARE_EPOCH_FENCE:
                return CoordinatorResult([], ErrorCode.CONCURRENT_TRANSACTIONS)
            if md.state is TxnState.ONGOING and tps <= md.topic_partitions:
                return CoordinatorResult([], ErrorCode.NONE)  # already added: no write
            t = md.prepare_add_partitions(tps, self._now())
            return CoordinatorResult(self._record(txn_id, t, shard), ErrorCode.NONE, md.abort_pending)
        return op

    def _verify(self, partition: int, txn_id: str, pid: int, epoch: int, tps: list[TopicPartition],
                version: int) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn v4+ verifyOnly (KIP-890 part 1): no write, per-partition answers."""
        shard = self.runtime.shard(partition)
        if shard is None:
            code = (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self.runtime.is_loading(partition)
                    else ErrorCode.NOT_COORDINATOR)
            return {tp: code for tp in tps}
        md = shard.txns.get(txn_id)
        code = ErrorCode.NONE
        if md is None or md.producer_id != pid:
            code = ErrorCode.INVALID_PRODUCER_ID_MAPPING
        elif md.producer_epoch != epoch:
            code = _fenced(ErrorCode.PRODUCER_FENCED, version, 2)
        elif md.pending_transition_in_progress and md.pending_state is not TxnState.ONGOING \
                or md.state.is_prepare or md.state is TxnState.PREPARE_EPOCH_FENCE:
            code = ErrorCode.CONCURRENT_TRANSACTIONS
        if code is not ErrorCode.NONE:
            return {tp: code for tp in tps}
        assert md is not None
        return {tp: ErrorCode.NONE if tp in md.topic_partitions else ErrorCode.INVALID_TXN_STATE for tp in tps}

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
        md = shard.txns.get(txn_id)
        if md is None or md.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING if md is not None else ErrorCode.INVALID_TXN_STATE
        if producer_epoch != md.producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if md.state is not TxnState.ONGOING or md.pending_state not in (None, TxnState.ONGOING) \
                or (topic, partition) not in md.topic_partitions:
            return ErrorCode.INVALID_TXN_STATE
        return ErrorCode.NONE

    # ------------------------------------------------------------------ EndTxn
    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                      version: int = 4) -> ErrorCode:
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST
        partition = self.partition_for(transactional_id)
        try:
            kind, t = await self._run(
                partition, self._end_op(partition, transactional_id, producer_id, producer_epoch, commit))
        except (CoordinatorError, TxnError) as e:
            return _fenced(e.code, version, 2)
        if kind in ("prepared", "completing"):
            # The completion was started when the Prepare record was replayed (on_applied), even if this caller
            # (or the original one, for a retry: "completing") went away meanwhile; this finds it by its key.
            assert t is not None
            task = self._ensure_completion(partition, transactional_id, t.producer_id, t.producer_epoch, commit,
                                           t.topic_partitions)
            return await self._await_completion(task)
        return _fenced(ErrorCode[kind], version, 2)

    def _end_op(self, partition: int, txn_id: str, pid: int, epoch: int, commit: bool
                ) -> Callable[[TransactionShard], CoordinatorResult[tuple[str, TxnTransitMetadata | None]]]:
        def answer(code: ErrorCode) -> CoordinatorResult[tuple[str, TxnTransitMetadata | None]]:
            return CoordinatorResult([], (code.name, None))

        def op(shard: TransactionShard) -> CoordinatorResult[tuple[str, TxnTransitMetadata | None]]:
            md = shard.txns.get(txn_id)
            if md is None or md.producer_id != pid:
                return answer(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
            if epoch != md.producer_epoch:
                return answer(ErrorCode.PRODUCER_FENCED)
            if md.pending_transition_in_progress:
                return answer(ErrorCode.CONCURRENT_TRANSACTIONS)
            s = md.state
            if s is TxnState.ONGOING:
                target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
                t = md.prepare_abort_or_commit(target, self._now())
                return CoordinatorResult(self._record(txn_id, t, shard), ("prepared", t), md.abort_pending,
                                         self._completion_hook(partition, txn_id, t))
            if s is TxnState.COMPLETE_COMMIT:
                return answer(ErrorCode.NONE if commit else ErrorCode.INVALID_TXN_STATE)
            if s is TxnState.COMPLETE_ABORT:
                return answer(ErrorCode.NONE if not commit else ErrorCode.INVALID_TXN_STATE)
            if s is TxnState.PREPARE_COMMIT or s is TxnState.PREPARE_ABORT:
                if commit != (s is TxnState.PREPARE_COMMIT):
                    return answer(ErrorCode.INVALID_TXN_STATE)
                return CoordinatorResult([], ("completing", md.snapshot()))
            if s is TxnState.EMPTY:
                return answer(ErrorCode.INVALID_TXN_STATE)
            if s is TxnState.PREPARE_EPOCH_FENCE:
                return answer(ErrorCode.CONCURRENT_TRANSACTIONS)
            raise IllegalTransitionError(f"{txn_id} is {s.display_name}: should never be seen")
        return op

    def _abort_op(self, partition: int, txn_id: str, pid: int, fence: bool, timed_out_before: int | None = None
                  ) -> Callable[[TransactionShard], CoordinatorResult[TxnTransitMetadata | None]]:
        """Coordinator-initiated abort: fence (bump) the epoch of an Ongoing transaction, or abort a loaded
        PrepareEpochFence. Answers None when the transaction moved on meanwhile."""
        def op(shard: TransactionShard) -> CoordinatorResult[TxnTransitMetadata | None]:
            md = shard.txns.get(txn_id)
            if md is None or md.producer_id != pid or md.pending_transition_in_progress:
                return CoordinatorResult([], None)
            now = self._now()
            if fence:
                if md.state is not TxnState.ONGOING:
                    return CoordinatorResult([], None)
                if timed_out_before is not None and not md.txn_start_timestamp + md.txn_timeout_ms < now:
                    return CoordinatorResult([], None)
                t = md.prepare_fence_and_abort(now)
            else:
                if md.state is not TxnState.PREPARE_EPOCH_FENCE:
                    return CoordinatorResult([], None)
                t = md.prepare_abort_or_commit(TxnState.PREPARE_ABORT, now)
            return CoordinatorResult(self._record(txn_id, t, shard), t, md.abort_pending,
                                     self._completion_hook(partition, txn_id, t))
        return op

    # ------------------------------------------------------------------ completion (markers + Complete*)
    def _completion_hook(self, partition: int, txn_id: str, t: TxnTransitMetadata) -> Callable[[], None]:
        """``on_applied`` of an operation that wrote a Prepare* record: start the completion as soon as the record
        is replayed, so it runs even when the caller is gone and a retry of EndTxn finds it running."""
        def start() -> None:
            self._ensure_completion(partition, txn_id, t.producer_id, t.producer_epoch,
                                    t.state is TxnState.PREPARE_COMMIT, t.topic_partitions)
        return start

    def _ensure_completion(self, partition: int, txn_id: str, pid: int, epoch: int, commit: bool,
                           partitions: Iterable[TopicPartition]) -> Task[ErrorCode]:
        key = (partition, txn_id)
        existing = self._completions.get(key)
        if existing is not None:
            return existing
        tps = sorted(partitions)
        # Every caller gets here only once the Prepare* record is durable, so the markers may be written now,
        # before the completion task first runs (one event-loop hop fewer); it then waits for their durability.
        first: tuple[dict[TopicPartition, int], Awaitable[Any] | None] | None = None
        start = getattr(self.marker_writer, "start_markers", None)
        coordinator_epoch = self.runtime.epoch(partition)
        if start is not None and coordinator_epoch is not None and self.owns(partition):
            try:
                first = start(pid, epoch, commit, coordinator_epoch, list(tps))
            except Exception as e:  # noqa: BLE001 - the task retries like any other marker failure
                log.warning("writing %s markers for %s failed: %s", "COMMIT" if commit else "ABORT", txn_id, e)
        task = self.runtime.spawn(self._complete(partition, txn_id, pid, epoch, commit, tps, first),
                                  name=f"txn-complete-{txn_id}")

        def done(_: Task[ErrorCode]) -> None:
            if self._completions.get(key) is task:
                del self._completions[key]

        task.add_done_callback(done)
        self._completions[key] = task
        return task

    async def _await_completion(self, task: Task[ErrorCode]) -> ErrorCode:
        try:
            return await self.runtime.shield(task)
        except CoordinatorError as e:
            return e.code

    def _backoff(self, attempt: int) -> float:
        return float(min(self.retry_backoff_ms * (2 ** min(attempt, 16)), self.retry_backoff_max_ms)) / 1000.0

    async def _complete(self, partition: int, txn_id: str, pid: int, epoch: int, commit: bool,
                        partitions: list[TopicPartition],
                        first: tuple[dict[TopicPartition, int], Awaitable[Any] | None] | None = None
                        ) -> ErrorCode:
        """Markers until every partition has its marker durably (``first``: the first attempt, already
        written by the caller), then the Complete* record."""
        remaining = list(partitions)
        attempt = 0
        while remaining:
            if first is None and not self.owns(partition):
                return ErrorCode.NOT_COORDINATOR
            try:
                if first is not None:
                    errors, durable = first
                    first = None
                    if durable is not None:
                        await durable
                else:
                    coordinator_epoch = self.runtime.epoch(partition)
                    if coordinator_epoch is None:
                        return ErrorCode.NOT_COORDINATOR
                    errors = await self.marker_writer.write_markers(pid, epoch, commit, coordinator_epoch,
                                                                    list(remaining))
            except Exception as e:  # noqa: BLE001 - retried like any other marker failure
                log.warning("writing %s markers for %s failed: %s", "COMMIT" if commit else "ABORT", txn_id, e)
                errors = {}
            retry: list[TopicPartition] = []
            for tp in remaining:
                raw = errors.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR)
                try:
                    code = ErrorCode(int(raw))
                except ValueError:
                    code = ErrorCode.UNKNOWN_SERVER_ERROR
                if code is ErrorCode.NONE:
                    continue
                if code in _MARKER_SKIP:
                    log.info("%s: partition %s-%d no longer exists; no marker needed", txn_id, *tp)
                elif code in _MARKER_STALE:
                    log.warning("%s: %s-%d has moved past producer %d epoch %d (%s); skipping its marker",
                                txn_id, tp[0], tp[1], pid, epoch, code.name)
                elif code in _MARKER_ABANDON:
                    log.warning("%s: marker refused with %s; this coordinator is fenced", txn_id, code.name)
                    return ErrorCode.NOT_COORDINATOR
                else:
                    retry.append(tp)
            if retry:
                await self.runtime.sleep(self._backoff(attempt))
                attempt += 1
            remaining = retry
        attempt = 0
        while True:
            try:
                code = await self._run(partition, self._complete_op(txn_id, pid, epoch, commit))
                return code
            except CoordinatorError as e:
                if e.code is ErrorCode.NOT_COORDINATOR or not self.owns(partition):
                    return ErrorCode.NOT_COORDINATOR
                log.warning("%s: writing Complete%s failed (%s); retrying", txn_id,
                            "Commit" if commit else "Abort", e.code.name)
                await self.runtime.sleep(self._backoff(attempt))
                attempt += 1

    def _complete_op(self, txn_id: str, pid: int, epoch: int, commit: bool
                     ) -> Callable[[TransactionShard], CoordinatorResult[ErrorCode]]:
        expected = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT

        def op(shard: TransactionShard) -> CoordinatorResult[ErrorCode]:
            md = shard.txns.get(txn_id)
            if md is None or md.producer_id != pid:
                return CoordinatorResult([], ErrorCode.INVALID_PRODUCER_ID_MAPPING)
            if md.producer_epoch != epoch:
                return CoordinatorResult([], ErrorCode.PRODUCER_FENCED)
            if md.pending_transition_in_progress:
                return CoordinatorResult([], ErrorCode.CONCURRENT_TRANSACTIONS)
            if md.state is not expected:
                return CoordinatorResult([], ErrorCode.INVALID_TXN_STATE)
            t = md.prepare_complete(self._now())
            # Not waited for: the markers are durable, which is what the answer promises; if this record is lost
            # in a crash, loading finds PrepareCommit/Abort and completes it again (markers are idempotent).
            return CoordinatorResult(self._record(txn_id, t, shard), ErrorCode.NONE, md.abort_pending,
                                     await_durable=False)
        return op

    # ------------------------------------------------------------------ background: timeouts and expiry
    async def abort_timed_out_transactions(self) -> list[str]:
        """Ongoing transactions past their timeout: fence the epoch (the producer is fenced) and abort them.
        Returns the ids whose PrepareAbort is durable; markers and CompleteAbort follow in the background."""
        now = self._now()
        candidates: list[tuple[int, str, int]] = []
        for partition, shard in sorted(self.runtime.shards().items()):
            for txn_id, md in shard.txns.items():
                if md.state is TxnState.ONGOING and not md.pending_transition_in_progress \
                        and not md.is_distributed_two_phase_commit_txn() \
                        and md.txn_start_timestamp + md.txn_timeout_ms < now:
                    candidates.append((partition, txn_id, md.producer_id))
        aborted: list[str] = []
        for partition, txn_id, pid in candidates:
            try:
                t = await self._run(partition, self._abort_op(partition, txn_id, pid, fence=True,
                                                                 timed_out_before=now))
            except (CoordinatorError, TxnError) as e:
                log.warning("rollback of timed-out transaction %s failed: %s", txn_id, e)
                continue
            if t is None:
                continue
            # its PrepareAbort record started the completion (on_applied)
            log.info("aborting transaction %s (producer %d): it timed out after %d ms", txn_id, pid,
                     t.txn_timeout_ms)
            aborted.append(txn_id)
        return aborted

    async def expire_transactional_ids(self) -> list[str]:
        """Idle Empty/Complete* ids older than transactional.id.expiration.ms: tombstone, then forget them."""
        now = self._now()
        horizon = now - self.config.transactional_id_expiration_ms
        candidates = [(partition, txn_id)
                      for partition, shard in sorted(self.runtime.shards().items())
                      for txn_id, md in shard.txns.items()
                      if md.state.expiration_allowed and not md.pending_transition_in_progress
                      and md.txn_last_update_timestamp <= horizon]
        expired: list[str] = []
        for partition, txn_id in candidates:
            def op(shard: TransactionShard, txn_id: str = txn_id) -> CoordinatorResult[bool]:
                md = shard.txns.get(txn_id)
                if md is None or not md.state.expiration_allowed or md.pending_transition_in_progress \
                        or md.txn_last_update_timestamp > horizon:
                    return CoordinatorResult([], False)
                t = md.prepare_dead()
                return CoordinatorResult(self._record(txn_id, t, shard), True, md.abort_pending)
            try:
                if await self._run(partition, op):
                    expired.append(txn_id)
            except (CoordinatorError, TxnError) as e:
                log.warning("expiring transactional id %s failed: %s", txn_id, e)
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
            if shard is None:
                out.append(TxnDescription(txn_id, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
                                          if self.runtime.is_loading(partition) else ErrorCode.NOT_COORDINATOR))
                continue
            md = shard.txns.get(txn_id)
            if md is None or md.state is TxnState.DEAD:
                out.append(TxnDescription(txn_id, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND))
                continue
            topics: dict[str, list[int]] = {}
            for topic, p in sorted(md.topic_partitions):
                topics.setdefault(topic, []).append(p)
            out.append(TxnDescription(txn_id, ErrorCode.NONE, md.state.display_name, md.producer_id,
                                      md.producer_epoch, md.txn_timeout_ms, md.txn_start_timestamp, topics))
        return out

    def list(self, state_filters: Iterable[str] = (), producer_id_filters: Iterable[int] = (),
             duration_filter_ms: int = -1) -> TxnListResult:
        if any(self.runtime.is_loading(p) for p in range(self.num_partitions)):
            return TxnListResult(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, [], [])
        names = list(state_filters)
        states: set[TxnState] = set()
        unknown: list[str] = []
        for name in names:
            st = TxnState.from_name(name)
            if st is None:
                unknown.append(name)
            else:
                states.add(st)
        pids = set(producer_id_filters)
        result = TxnListResult(ErrorCode.NONE, unknown, [])
        if names and not states:
            return result
        now = self._now()
        for _, shard in sorted(self.runtime.shards().items()):
            for txn_id, md in sorted(shard.txns.items()):
                if md.state is TxnState.DEAD:
                    continue
                if pids and md.producer_id not in pids:
                    continue
                if states and md.state not in states:
                    continue
                if duration_filter_ms >= 0 and now - md.txn_start_timestamp <= duration_filter_ms:
                    continue
                result.transactions.append(TxnListing(txn_id, md.producer_id, md.state.display_name))
        return result
