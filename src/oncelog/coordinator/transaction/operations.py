"""The transaction coordinator's decisions: pure operations on a ``__transaction_state`` shard.

Kafka's TransactionCoordinator (handleInitProducerId, handleAddPartitionsToTransaction, handleEndTransaction, the
timeout and expiry scans) and TransactionStateManager (describe, list) decide; this module does the same as plain
functions of the shard and the current time. Each write operation validates, prepares a transition on the
transaction's metadata (two-phase: the pending transit blocks a concurrent change) and returns a
:class:`~oncelog.coordinator.runtime.CoordinatorResult`: the record to append, a typed outcome, and the hook that
drops the pending transit if the append fails. The runtime appends, replays the record (which completes the
transit) and only then hands the outcome back. Nothing here does I/O or waits: the coordinator service
(``coordinator.py``) runs these on the runtime and starts a prepared transaction's completion (``markers.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from oncelog.protocol.errors import ErrorCode

from ..runtime import CoordinatorResult
from .metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    SHORT_MAX,
    IllegalTransitionError,
    TopicPartition,
    TransactionMetadata,
    TxnError,
    TxnTransitMetadata,
    is_epoch_exhausted,
)
from .records import encode_txn_record
from .shard import TransactionShard
from .state import TxnState

__all__ = [
    "Completing",
    "Ended",
    "FencedOngoing",
    "Initialized",
    "InitOutcome",
    "KeptPrepared",
    "TxnDescription",
    "TxnListResult",
    "TxnListing",
    "abort_fenced",
    "abort_timed_out",
    "add_partitions",
    "complete",
    "describe",
    "end_txn",
    "end_txn_v2",
    "expire",
    "init_producer_id",
    "list_transactions",
    "verify_add_partitions",
    "verify_partition",
]

Records = list[tuple[bytes, "bytes | None"]]


# ---------------------------------------------------------------------------------------------- outcomes
@dataclass(frozen=True, slots=True)
class Initialized:
    """InitProducerId gave the producer a new epoch (or a new producer id): ``transit`` holds it."""
    transit: TxnTransitMetadata


@dataclass(frozen=True, slots=True)
class KeptPrepared:
    """KIP-939 ``keep_prepared_txn``: the ongoing transaction is kept under a bumped epoch; ``kept`` is the
    transaction as it was (its producer id/epoch go back in the InitProducerId v6 response)."""
    transit: TxnTransitMetadata
    kept: TxnTransitMetadata


@dataclass(frozen=True, slots=True)
class FencedOngoing:
    """InitProducerId met an ongoing transaction: it is fenced and aborted (``transit``, a PrepareAbort); the
    producer is told CONCURRENT_TRANSACTIONS once the abort is complete, and retries."""
    transit: TxnTransitMetadata


InitOutcome = Initialized | KeptPrepared | FencedOngoing


@dataclass(frozen=True, slots=True)
class Completing:
    """EndTxn: the transaction is prepared (now, or by an earlier EndTxn this one retries); its completion
    (markers, then Complete*) decides the answer."""
    transit: TxnTransitMetadata


@dataclass(frozen=True, slots=True)
class Ended:
    """EndTxn (transactions V2) retried after its transaction completed: NONE, with the producer id and epoch the
    producer goes on with (the bumped epoch, or the new producer id at epoch 0)."""
    producer_id: int
    producer_epoch: int


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


# ---------------------------------------------------------------------------------------------- helpers
def _record(shard: TransactionShard, txn_id: str, t: TxnTransitMetadata) -> Records:
    key, value = encode_txn_record(txn_id, t)
    shard.expect(key, value, txn_id, t)  # its replay need not decode what was just encoded
    return [(key, value)]


def _not_owned(md: TransactionMetadata | None, pid: int, epoch: int) -> ErrorCode:
    """Why a producer request fails the checks every one starts with (Kafka's handleAddPartitions /
    handleEndTransaction): an unknown producer id, an old epoch, or a transition in progress."""
    if md is None or md.producer_id != pid:
        return ErrorCode.INVALID_PRODUCER_ID_MAPPING
    if md.producer_epoch != epoch:
        return ErrorCode.PRODUCER_FENCED
    if md.pending_transition_in_progress:
        return ErrorCode.CONCURRENT_TRANSACTIONS
    return ErrorCode.NONE


# ---------------------------------------------------------------------------------------------- InitProducerId
def init_producer_id(shard: TransactionShard, txn_id: str, timeout_ms: int, expected: tuple[int, int] | None,
                     keep_prepared: bool, now: int, new_producer_id: Callable[[], int], tv: int = 0
                     ) -> CoordinatorResult[InitOutcome]:
    """A new epoch for ``txn_id`` (created with a fresh producer id on first use), fencing older instances;
    ``expected``: the (producer id, epoch) a KIP-360 client says it has; ``tv``: the coordinator's transaction
    version (an ongoing transaction is fenced and aborted with it). Raises TxnError to refuse."""
    md = shard.txns.get(txn_id)
    created = False
    if md is None:
        md = shard.creating.get(txn_id)
        if md is None:
            md = TransactionMetadata(transactional_id=txn_id, producer_id=new_producer_id(),
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
        outcome = _prepare_init(meta, timeout_ms, expected, now, keep_prepared, new_producer_id, before, tv)
    except BaseException:
        if created:
            shard.creating.pop(txn_id, None)
        raise
    return CoordinatorResult(_record(shard, txn_id, outcome.transit), outcome, on_failure)


def _prepare_init(md: TransactionMetadata, timeout_ms: int, expected: tuple[int, int] | None, now: int,
                  keep_prepared: bool, new_producer_id: Callable[[], int], before: TxnTransitMetadata, tv: int
                  ) -> InitOutcome:
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
            return Initialized(md.prepare_producer_id_rotation(new_producer_id(), timeout_ms, now,
                                                               expected is not None))
        return Initialized(md.prepare_increment_producer_epoch(timeout_ms, None if expected is None else expected[1],
                                                               now))
    if s is TxnState.ONGOING and keep_prepared:
        return KeptPrepared(md.prepare_keep_prepared_txn(now), before)
    if s is TxnState.ONGOING:
        # The bumped epoch is never returned: the producer gets CONCURRENT_TRANSACTIONS and retries, which
        # bumps again (or rotates the producer id when fencing exhausted the epochs).
        return FencedOngoing(md.prepare_fence_and_abort(now, tv, new_producer_id))
    if s is TxnState.PREPARE_EPOCH_FENCE:  # only if a log held one: abort with its (fenced) epoch
        return FencedOngoing(md.prepare_abort_or_commit(TxnState.PREPARE_ABORT, now, tv, new_producer_id))
    raise IllegalTransitionError(f"{md.transactional_id} is {s.display_name}: should never be seen")


# ---------------------------------------------------------------------------------------------- AddPartitionsToTxn
def add_partitions(shard: TransactionShard, txn_id: str, pid: int, epoch: int, tps: set[TopicPartition],
                   now: int, client_transaction_version: int = 0) -> CoordinatorResult[ErrorCode]:
    """AddPartitionsToTxn: Empty/Complete*/Ongoing -> Ongoing with ``tps`` (no write when all are in already).
    ``client_transaction_version`` 2: a broker adds them for a transactions V2 write (Produce v12, TxnOffsetCommit
    v5: KIP-890 part 2's implicit registration), and the transaction ends with an epoch bump."""
    md = shard.txns.get(txn_id)
    if md is None or md.producer_id != pid or md.producer_epoch != epoch or md.pending_transition_in_progress:
        return CoordinatorResult([], _not_owned(md, pid, epoch))
    if md.state.is_prepare or md.state is TxnState.PREPARE_EPOCH_FENCE:
        return CoordinatorResult([], ErrorCode.CONCURRENT_TRANSACTIONS)
    if md.state is TxnState.ONGOING and tps <= md.topic_partitions:
        return CoordinatorResult([], ErrorCode.NONE)  # already added: no write
    t = md.prepare_add_partitions(tps, now, client_transaction_version)
    return CoordinatorResult(_record(shard, txn_id, t), ErrorCode.NONE, md.abort_pending)


def verify_add_partitions(shard: TransactionShard, txn_id: str, pid: int, epoch: int,
                          tps: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
    """AddPartitionsToTxn v4+ verifyOnly (KIP-890 part 1): no write, per-partition answers."""
    md = shard.txns.get(txn_id)
    code = ErrorCode.NONE
    if md is None or md.producer_id != pid:
        code = ErrorCode.INVALID_PRODUCER_ID_MAPPING
    elif md.producer_epoch != epoch:
        code = ErrorCode.PRODUCER_FENCED
    elif md.pending_transition_in_progress and md.pending_state is not TxnState.ONGOING \
            or md.state.is_prepare or md.state is TxnState.PREPARE_EPOCH_FENCE:
        code = ErrorCode.CONCURRENT_TRANSACTIONS
    if code is not ErrorCode.NONE:
        return {tp: code for tp in tps}
    assert md is not None
    return {tp: ErrorCode.NONE if tp in md.topic_partitions else ErrorCode.INVALID_TXN_STATE for tp in tps}


def verify_partition(shard: TransactionShard, txn_id: str, producer_id: int, producer_epoch: int,
                     tp: TopicPartition) -> ErrorCode:
    """May a transactional batch of the producer be appended to ``tp``? NONE only if its transaction is Ongoing
    with that partition added and the epoch matches (the broker's Produce path, KIP-890 part 1).

    While the transaction is being ended, or fenced and aborted (a timeout, a new InitProducerId: the record is
    being written), the answer is CONCURRENT_TRANSACTIONS, retriable, as :func:`verify_add_partitions` answers for a
    remote partition and Kafka's coordinator does (``handleVerifyPartitionsInTransaction``): the producer retries
    and then meets the outcome (PRODUCER_FENCED once the epoch is bumped). INVALID_TXN_STATE there made librdkafka
    take an abortable error at once and then wait out ``message.timeout.ms`` for its batches to the other
    partitions before it answered the commit (a coordinator's wall clock stepped forward, in the fault tests)."""
    md = shard.txns.get(txn_id)
    if md is None or md.producer_id != producer_id:
        return ErrorCode.INVALID_PRODUCER_ID_MAPPING if md is not None else ErrorCode.INVALID_TXN_STATE
    if producer_epoch != md.producer_epoch:
        return ErrorCode.PRODUCER_FENCED
    if md.state.is_prepare or md.state is TxnState.PREPARE_EPOCH_FENCE \
            or md.pending_state not in (None, TxnState.ONGOING):
        return ErrorCode.CONCURRENT_TRANSACTIONS
    if md.state is not TxnState.ONGOING or tp not in md.topic_partitions:
        return ErrorCode.INVALID_TXN_STATE
    return ErrorCode.NONE


# ---------------------------------------------------------------------------------------------- EndTxn
def end_txn(shard: TransactionShard, txn_id: str, pid: int, epoch: int, commit: bool,
            now: int) -> CoordinatorResult[Completing | ErrorCode]:
    """Ongoing -> PrepareCommit/PrepareAbort (the record), or the answer to a retry; an ErrorCode outcome is
    the answer at once."""
    md = shard.txns.get(txn_id)
    if md is None or md.producer_id != pid or md.producer_epoch != epoch or md.pending_transition_in_progress:
        return CoordinatorResult([], _not_owned(md, pid, epoch))
    s = md.state
    if s is TxnState.ONGOING:
        t = md.prepare_abort_or_commit(TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT, now)
        return CoordinatorResult(_record(shard, txn_id, t), Completing(t), md.abort_pending)
    if s is TxnState.COMPLETE_COMMIT:
        return CoordinatorResult([], ErrorCode.NONE if commit else ErrorCode.INVALID_TXN_STATE)
    if s is TxnState.COMPLETE_ABORT:
        return CoordinatorResult([], ErrorCode.NONE if not commit else ErrorCode.INVALID_TXN_STATE)
    if s is TxnState.PREPARE_COMMIT or s is TxnState.PREPARE_ABORT:
        if commit != (s is TxnState.PREPARE_COMMIT):
            return CoordinatorResult([], ErrorCode.INVALID_TXN_STATE)
        return CoordinatorResult([], Completing(md.snapshot()))
    if s is TxnState.EMPTY:
        return CoordinatorResult([], ErrorCode.INVALID_TXN_STATE)
    if s is TxnState.PREPARE_EPOCH_FENCE:
        return CoordinatorResult([], ErrorCode.CONCURRENT_TRANSACTIONS)
    raise IllegalTransitionError(f"{txn_id} is {s.display_name}: should never be seen")


def end_txn_v2(shard: TransactionShard, txn_id: str, pid: int, epoch: int, commit: bool, now: int,
               new_producer_id: Callable[[], int]) -> CoordinatorResult[Completing | Ended | ErrorCode]:
    """EndTxn v5+ (transactions V2, Kafka's ``endTransaction`` for TV_2): the end bumps the epoch.

    The epoch alone says which transaction a request means. One the producer holds now (``epoch`` is the current
    one) ends the ongoing transaction, or, for an abort, one that added nothing (Empty/Complete*: a PrepareAbort
    without partitions, which bumps too). One an epoch below the current one (the epoch was bumped by this EndTxn
    being retried) is a retry: answered NONE with the current producer id and epoch once its outcome is the one
    asked for, INVALID_TXN_STATE otherwise; while the transaction is still Prepare* it waits for the completion. A
    retry that spans an epoch overflow names the previous producer id at Short.MAX_VALUE - 1. Every other epoch is
    PRODUCER_FENCED: an EndTxn delayed past the start of the producer's next transaction cannot end that one
    (KAFKA-17754), and a fenced producer (two bumps, see ``metadata.py``) is never taken for a retry."""
    md = shard.txns.get(txn_id)
    if md is None:
        return CoordinatorResult([], ErrorCode.INVALID_PRODUCER_ID_MAPPING)
    s = md.state
    retry_on_overflow = (md.previous_producer_id == pid and md.producer_id != pid and epoch == SHORT_MAX - 1
                         and md.producer_epoch == 0 and md.last_producer_epoch in (SHORT_MAX - 1, NO_PRODUCER_EPOCH))
    retry_on_bump = md.producer_id == pid and md.producer_epoch == epoch + 1
    if md.producer_id != pid and not retry_on_overflow:
        return CoordinatorResult([], ErrorCode.INVALID_PRODUCER_ID_MAPPING)
    if s.is_prepare:
        valid = retry_on_bump
    elif s.is_complete:
        valid = retry_on_bump or retry_on_overflow or epoch == md.producer_epoch
    else:
        valid = epoch == md.producer_epoch
    if not valid:
        return CoordinatorResult([], ErrorCode.PRODUCER_FENCED)
    if md.pending_transition_in_progress:
        return CoordinatorResult([], ErrorCode.CONCURRENT_TRANSACTIONS)
    is_retry = retry_on_bump or retry_on_overflow
    wanted = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT

    def prepare(target: TxnState, nothing_added: bool) -> CoordinatorResult[Completing | Ended | ErrorCode]:
        t = md.prepare_abort_or_commit(target, now, 2, new_producer_id, nothing_added)
        return CoordinatorResult(_record(shard, txn_id, t), Completing(t), md.abort_pending)

    if s is TxnState.ONGOING:
        return prepare(wanted, False)
    if s.is_complete:
        same = commit == (s is TxnState.COMPLETE_COMMIT)
        if is_retry:
            return CoordinatorResult([], Ended(md.producer_id, md.producer_epoch) if same
                                     else ErrorCode.INVALID_TXN_STATE)
        return prepare(TxnState.PREPARE_ABORT, True) if not commit else \
            CoordinatorResult([], ErrorCode.INVALID_TXN_STATE)
    if s.is_prepare:  # a retry while the completion runs: its outcome answers
        if wanted is not s:
            return CoordinatorResult([], ErrorCode.INVALID_TXN_STATE)
        return CoordinatorResult([], Completing(md.snapshot()))
    if s is TxnState.EMPTY:
        return prepare(TxnState.PREPARE_ABORT, True) if not commit else \
            CoordinatorResult([], ErrorCode.INVALID_TXN_STATE)
    raise IllegalTransitionError(f"{txn_id} is {s.display_name}: should never be seen")


# ---------------------------------------------------------------------------------------------- coordinator aborts
def abort_timed_out(shard: TransactionShard, txn_id: str, pid: int, now: int, tv: int = 0,
                    new_producer_id: Callable[[], int] | None = None
                    ) -> CoordinatorResult[TxnTransitMetadata | None]:
    """An Ongoing transaction past its timeout: fence (bump) the epoch and abort it (``tv``: the coordinator's
    transaction version). None when the transaction moved on meanwhile (ended, re-initialised, or not timed out
    any more)."""
    md = shard.txns.get(txn_id)
    if md is None or md.producer_id != pid or md.pending_transition_in_progress \
            or md.state is not TxnState.ONGOING or not md.txn_start_timestamp + md.txn_timeout_ms < now:
        return CoordinatorResult([], None)
    t = md.prepare_fence_and_abort(now, tv, new_producer_id)
    return CoordinatorResult(_record(shard, txn_id, t), t, md.abort_pending)


def abort_fenced(shard: TransactionShard, txn_id: str, pid: int, now: int, tv: int = 0,
                 new_producer_id: Callable[[], int] | None = None
                 ) -> CoordinatorResult[TxnTransitMetadata | None]:
    """A PrepareEpochFence found at load: abort it with its (fenced) epoch. None when it moved on meanwhile."""
    md = shard.txns.get(txn_id)
    if md is None or md.producer_id != pid or md.pending_transition_in_progress \
            or md.state is not TxnState.PREPARE_EPOCH_FENCE:
        return CoordinatorResult([], None)
    t = md.prepare_abort_or_commit(TxnState.PREPARE_ABORT, now, tv, new_producer_id)
    return CoordinatorResult(_record(shard, txn_id, t), t, md.abort_pending)


# ---------------------------------------------------------------------------------------------- completion
def complete(shard: TransactionShard, txn_id: str, pid: int, epoch: int, commit: bool,
             now: int) -> CoordinatorResult[ErrorCode]:
    """Every marker is durable: PrepareCommit/PrepareAbort -> CompleteCommit/CompleteAbort.

    The record is not waited for (``await_durable=False``): the markers are durable, which is what the answer
    promises; if the record is lost in a crash, loading finds PrepareCommit/Abort and completes it again (markers
    are idempotent)."""
    md = shard.txns.get(txn_id)
    if md is None or md.producer_id != pid or md.producer_epoch != epoch or md.pending_transition_in_progress:
        return CoordinatorResult([], _not_owned(md, pid, epoch))
    if md.state is not (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT):
        return CoordinatorResult([], ErrorCode.INVALID_TXN_STATE)
    t = md.prepare_complete(now)
    return CoordinatorResult(_record(shard, txn_id, t), ErrorCode.NONE, md.abort_pending, await_durable=False)


# ---------------------------------------------------------------------------------------------- expiry
def expire(shard: TransactionShard, txn_id: str, horizon: int) -> CoordinatorResult[bool]:
    """An idle Empty/Complete* id last updated at or before ``horizon`` (transactional.id.expiration.ms ago):
    write its Dead record, which removes it."""
    md = shard.txns.get(txn_id)
    if md is None or not md.state.expiration_allowed or md.pending_transition_in_progress \
            or md.txn_last_update_timestamp > horizon:
        return CoordinatorResult([], False)
    t = md.prepare_dead()
    return CoordinatorResult(_record(shard, txn_id, t), True, md.abort_pending)


def timed_out(shard: TransactionShard, now: int, txn_ids: Iterable[str] | None = None) -> list[tuple[str, int]]:
    """(transactional id, producer id) of every Ongoing transaction past its timeout (2PC ones never time out),
    among ``txn_ids`` (the ids whose timeout timer is due) or, without it, all of the shard's."""
    mds = shard.txns.items() if txn_ids is None else \
        [(txn_id, md) for txn_id in txn_ids if (md := shard.txns.get(txn_id)) is not None]
    return [(txn_id, md.producer_id) for txn_id, md in mds
            if md.state is TxnState.ONGOING and not md.pending_transition_in_progress
            and not md.is_distributed_two_phase_commit_txn() and md.txn_start_timestamp + md.txn_timeout_ms < now]


def expirable(shard: TransactionShard, horizon: int, txn_ids: Iterable[str] | None = None) -> list[str]:
    """Idle Empty/Complete* ids last updated at or before ``horizon``, among ``txn_ids`` (the ids whose
    expiration timer is due) or, without it, all of the shard's."""
    mds = shard.txns.items() if txn_ids is None else \
        [(txn_id, md) for txn_id in txn_ids if (md := shard.txns.get(txn_id)) is not None]
    return [txn_id for txn_id, md in mds
            if md.state.expiration_allowed and not md.pending_transition_in_progress
            and md.txn_last_update_timestamp <= horizon]


# ---------------------------------------------------------------------------------------------- Describe / List
def describe(shard: TransactionShard, txn_id: str) -> TxnDescription:
    md = shard.txns.get(txn_id)
    if md is None or md.state is TxnState.DEAD:
        return TxnDescription(txn_id, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)
    topics: dict[str, list[int]] = {}
    for topic, p in sorted(md.topic_partitions):
        topics.setdefault(topic, []).append(p)
    return TxnDescription(txn_id, ErrorCode.NONE, md.state.display_name, md.producer_id, md.producer_epoch,
                          md.txn_timeout_ms, md.txn_start_timestamp, topics)


def list_transactions(shards: Iterable[TransactionShard], state_filters: Iterable[str],
                      producer_id_filters: Iterable[int], duration_filter_ms: int, now: int) -> TxnListResult:
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
    for shard in shards:
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
