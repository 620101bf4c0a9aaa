"""One transactional id's metadata at the coordinator, changed in two phases (Kafka ``TransactionMetadata``).

A ``prepare_*`` method validates a request against the current state and returns a :class:`TxnTransitMetadata`,
the values the metadata would take, marking the metadata with ``pending_state`` so that no other change can start.
The transit is written to the log; only once that record is durable does the runtime replay it and
``complete_transition`` apply it. If the append fails, ``abort_pending`` drops the marker and nothing changed.

Unlike Kafka, fencing an ongoing transaction never touches the current epoch before the log says so: the bumped
epoch lives only in the PrepareAbort transit (``epoch_fence=True``) until that record is durable. A failed
fence write therefore leaves nothing to undo (Kafka needs ``hasFailedEpochFence`` for that).

Transactions V2 (KIP-890 part 2, ``client_transaction_version`` 2): every EndTxn bumps the epoch. The
PrepareCommit/PrepareAbort transit carries epoch + 1 (``epoch_bump``; ``last_producer_epoch`` keeps the one the
producer used), the markers are written with it, and it is the producer's epoch for its next transaction, so a
request of the ended transaction that arrives late (an EndTxn, a Produce) carries an epoch older than every later
write and is fenced. When the epoch the bump starts from is exhausted (Short.MAX_VALUE - 1 and up) the transit also
names a new producer id (``next_producer_id``) and the Complete* record moves to it at epoch 0. A fence (a timeout,
a fencing InitProducerId) under transactions V2 bumps twice, as Kafka's does: once for the fence, once for the end,
so the fenced producer's epoch is never "the one before the bump" of a retried EndTxn. Transactions V1 keep the
epoch across EndTxn (Kafka 3.x brokers, and every client that sees no ``transaction.version`` 2).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from oncelog.protocol.errors import ErrorCode

from .state import VALID_PREVIOUS, TxnState

__all__ = [
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "SHORT_MAX",
    "IllegalTransitionError",
    "TopicPartition",
    "TransactionMetadata",
    "TxnError",
    "TxnTransitMetadata",
    "is_epoch_exhausted",
]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
SHORT_MAX = 32767
INT_MAX = 2147483647

TopicPartition = tuple[str, int]


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps Short.MAX_VALUE in reserve so the coordinator can always fence once more."""
    return epoch >= SHORT_MAX - 1


class TxnError(Exception):
    """A request the current state refuses; carries the Kafka error code to answer with."""

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(message or code.name)
        self.code = code


class IllegalTransitionError(RuntimeError):
    """A transition the state table (or the transition checks) forbids: a bug, never a client error."""


@dataclass(frozen=True, slots=True)
class TxnTransitMetadata:
    producer_id: int
    prev_producer_id: int
    next_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TxnState
    topic_partitions: frozenset[TopicPartition]
    txn_start_timestamp: int
    txn_last_update_timestamp: int
    client_transaction_version: int = 0
    epoch_fence: bool = False  # the transit also bumps the epoch (fence / keepPreparedTxn); not in the log
    epoch_bump: bool = False  # transactions V2: EndTxn bumps the epoch (once more after a fence); not in the log


@dataclass(slots=True, eq=False)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    txn_timeout_ms: int = 60_000
    state: TxnState = TxnState.EMPTY
    topic_partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_timestamp: int = -1
    txn_last_update_timestamp: int = -1
    client_transaction_version: int = 0
    pending_state: TxnState | None = None
    pending_transit: TxnTransitMetadata | None = None

    # ------------------------------------------------------------------ queries
    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    def is_distributed_two_phase_commit_txn(self) -> bool:
        """KIP-939: a 2PC transaction has no timeout (stored as Integer.MAX_VALUE)."""
        return self.txn_timeout_ms == INT_MAX

    def has_pending_transaction(self) -> bool:
        return self.state in (TxnState.ONGOING, TxnState.PREPARE_ABORT, TxnState.PREPARE_COMMIT)

    def snapshot(self) -> TxnTransitMetadata:
        """The current values as a transit (no pending marker is set)."""
        return self._transit()

    def _transit(self, **changes: object) -> TxnTransitMetadata:
        """The current values with ``changes`` applied, built in one construction (this runs for every coordinator
        record; snapshot() + dataclasses.replace cost twice as much)."""
        fields: dict[str, object] = {
            "producer_id": self.producer_id, "prev_producer_id": self.previous_producer_id,
            "next_producer_id": self.next_producer_id, "producer_epoch": self.producer_epoch,
            "last_producer_epoch": self.last_producer_epoch, "txn_timeout_ms": self.txn_timeout_ms,
            "state": self.state, "txn_start_timestamp": self.txn_start_timestamp,
            "txn_last_update_timestamp": self.txn_last_update_timestamp,
            "client_transaction_version": self.client_transaction_version,
        }
        fields.update(changes)
        if "topic_partitions" not in fields:
            fields["topic_partitions"] = frozenset(self.topic_partitions)
        return TxnTransitMetadata(**fields)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ prepare_*
    def _prepare(self, target: TxnState, **changes: object) -> TxnTransitMetadata:
        if self.pending_state is not None:
            raise IllegalTransitionError(
                f"{self.transactional_id}: preparing a transition to {target.display_name} while "
                f"{self.pending_state.display_name} is pending")
        transit = self._transit(**changes, state=target, prev_producer_id=self.producer_id)
        if transit.producer_id < 0:
            raise IllegalTransitionError(f"illegal new producer id {transit.producer_id}")
        if target is not TxnState.DEAD and transit.producer_epoch < 0:
            raise IllegalTransitionError(f"illegal new producer epoch {transit.producer_epoch}")
        if self.state not in VALID_PREVIOUS[target]:
            raise IllegalTransitionError(
                f"{self.transactional_id}: {self.state.display_name} -> {target.display_name} is not a legal "
                "transition")
        self.pending_state = target
        self.pending_transit = transit
        return transit

    def prepare_no_transit(self) -> TxnTransitMetadata:
        return self.snapshot()

    def prepare_fence_producer_epoch(self) -> TxnTransitMetadata:
        """Ongoing -> (pending) PrepareEpochFence with the epoch bumped (not past Short.MAX_VALUE).

        Never written to the log: the caller follows with ``prepare_abort_or_commit(PREPARE_ABORT)``, which
        turns it into a PrepareAbort carrying the bumped epoch.
        """
        bumped = self.producer_epoch if self.producer_epoch >= SHORT_MAX else self.producer_epoch + 1
        return self._prepare(TxnState.PREPARE_EPOCH_FENCE, producer_epoch=bumped)

    def prepare_increment_producer_epoch(self, new_txn_timeout_ms: int, expected_producer_epoch: int | None,
                                         update_timestamp: int) -> TxnTransitMetadata:
        """InitProducerId on Empty/Complete*: bump the epoch (KIP-360 rules for an expected epoch)."""
        if self.is_producer_epoch_exhausted():
            raise IllegalTransitionError(f"no producer epochs left for producer id {self.producer_id}")
        bumped = self.producer_epoch + 1
        if expected_producer_epoch is None:
            epoch, last_epoch = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_producer_epoch == self.producer_epoch:
            epoch, last_epoch = bumped, self.producer_epoch
        elif expected_producer_epoch == self.last_producer_epoch:
            # a retry of a bump that succeeded: hand back the current epoch
            epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        else:
            raise TxnError(ErrorCode.PRODUCER_FENCED,
                           f"expected epoch {expected_producer_epoch} is neither current {self.producer_epoch} "
                           f"nor last {self.last_producer_epoch}")
        return self._prepare(TxnState.EMPTY, producer_epoch=epoch, last_producer_epoch=last_epoch,
                             txn_timeout_ms=new_txn_timeout_ms, topic_partitions=frozenset(),
                             txn_start_timestamp=-1, txn_last_update_timestamp=update_timestamp)

    def prepare_producer_id_rotation(self, new_producer_id: int, new_txn_timeout_ms: int, update_timestamp: int,
                                     record_last_epoch: bool) -> TxnTransitMetadata:
        """Epoch exhausted: move to a new producer id with epoch 0."""
        if self.has_pending_transaction():
            raise IllegalTransitionError("cannot rotate producer ids while a transaction is still pending")
        return self._prepare(TxnState.EMPTY, producer_id=new_producer_id, producer_epoch=0,
                             last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
                             txn_timeout_ms=new_txn_timeout_ms, topic_partitions=frozenset(),
                             txn_start_timestamp=-1, txn_last_update_timestamp=update_timestamp)

    def prepare_add_partitions(self, added: set[TopicPartition] | frozenset[TopicPartition],
                               update_timestamp: int, client_transaction_version: int = 0) -> TxnTransitMetadata:
        """-> Ongoing with ``added``; ``client_transaction_version`` says how the partitions came (Kafka's
        transactionVersionForAddPartitionsToTxn: 2 when a broker added them for a transactions V2 write)."""
        if self.state in (TxnState.EMPTY, TxnState.COMPLETE_ABORT, TxnState.COMPLETE_COMMIT):
            start = update_timestamp
        else:
            start = self.txn_start_timestamp
        return self._prepare(TxnState.ONGOING, topic_partitions=frozenset(self.topic_partitions) | frozenset(added),
                             txn_start_timestamp=start, txn_last_update_timestamp=update_timestamp,
                             client_transaction_version=client_transaction_version)

    def prepare_keep_prepared_txn(self, update_timestamp: int) -> TxnTransitMetadata:
        """KIP-939 InitProducerId(keepPreparedTxn) on an Ongoing (prepared) transaction: keep it, with its
        partitions, but bump the epoch so the previous producer instance is fenced; the new instance then
        commits or aborts it with the new epoch (markers carry it; a marker may have a higher epoch)."""
        if self.state is not TxnState.ONGOING:
            raise IllegalTransitionError(f"keepPreparedTxn from {self.state.display_name}")
        if is_epoch_exhausted(self.producer_epoch + 1):
            raise TxnError(ErrorCode.INVALID_TXN_STATE, "no epoch left to keep the prepared transaction")
        return self._prepare(TxnState.ONGOING, producer_epoch=self.producer_epoch + 1,
                             last_producer_epoch=self.producer_epoch, txn_last_update_timestamp=update_timestamp,
                             epoch_fence=True)

    def prepare_abort_or_commit(self, new_state: TxnState, update_timestamp: int, client_transaction_version: int = 0,
                                new_producer_id: Callable[[], int] | None = None,
                                no_partition_added: bool = False) -> TxnTransitMetadata:
        """Ongoing -> PrepareCommit/PrepareAbort. After ``prepare_fence_producer_epoch`` (pending
        PrepareEpochFence) a PrepareAbort takes over that pending marker and carries the bumped epoch.

        Transactions V2 (``client_transaction_version`` >= 2) bump the epoch once more; when the epoch bumped from is
        exhausted ``new_producer_id`` gives the producer id the Complete* record moves to. ``no_partition_added``: a
        V2 abort of a transaction that added nothing (from Empty/Complete*), which starts now."""
        if new_state not in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            raise IllegalTransitionError(f"prepare_abort_or_commit to {new_state.display_name}")
        changes: dict[str, object] = {"txn_last_update_timestamp": update_timestamp,
                                      "client_transaction_version": client_transaction_version}
        fence = self.pending_transit if self.pending_state is TxnState.PREPARE_EPOCH_FENCE else None
        epoch = self.producer_epoch
        if fence is not None:
            if new_state is not TxnState.PREPARE_ABORT:
                raise IllegalTransitionError("an epoch fence can only be followed by an abort")
            epoch = fence.producer_epoch
            changes.update(producer_epoch=epoch, last_producer_epoch=NO_PRODUCER_EPOCH, epoch_fence=True)
        elif self.state is TxnState.PREPARE_EPOCH_FENCE:
            # loaded from a log that holds a PrepareEpochFence record: its epoch is already the fenced one
            changes.update(last_producer_epoch=NO_PRODUCER_EPOCH)
        if client_transaction_version >= 2:
            next_pid = NO_PRODUCER_ID
            if is_epoch_exhausted(epoch):
                if new_producer_id is None:
                    raise IllegalTransitionError(f"producer id {self.producer_id} needs a new producer id to end a "
                                                 "transactions V2 transaction at its last epoch")
                next_pid = new_producer_id()
            changes.update(producer_epoch=min(epoch + 1, SHORT_MAX), last_producer_epoch=epoch,
                           next_producer_id=next_pid, epoch_bump=True)
        if no_partition_added:
            changes.update(txn_start_timestamp=update_timestamp)
        if fence is not None:  # the abort takes over the fence's pending marker
            self.pending_state = None
            self.pending_transit = None
        try:
            return self._prepare(new_state, **changes)
        except BaseException:
            if fence is not None:
                self.pending_state, self.pending_transit = TxnState.PREPARE_EPOCH_FENCE, fence
            raise

    def prepare_fence_and_abort(self, update_timestamp: int, client_transaction_version: int = 0,
                                new_producer_id: Callable[[], int] | None = None) -> TxnTransitMetadata:
        """Ongoing -> PrepareAbort with the epoch bumped: what a fencing InitProducerId or a timeout does
        (``client_transaction_version``: the coordinator's own, as Kafka's fence uses the server's level)."""
        self.prepare_fence_producer_epoch()
        try:
            return self.prepare_abort_or_commit(TxnState.PREPARE_ABORT, update_timestamp,
                                                client_transaction_version, new_producer_id)
        except BaseException:
            self.abort_pending()
            raise

    def prepare_complete(self, update_timestamp: int) -> TxnTransitMetadata:
        """PrepareCommit/PrepareAbort -> CompleteCommit/CompleteAbort. A transactions V2 transaction whose prepare
        named a new producer id (the epoch was exhausted) moves to it at epoch 0; the last epoch stays the one the
        producer used (Kafka's prepareComplete)."""
        if self.state is TxnState.PREPARE_COMMIT:
            target = TxnState.COMPLETE_COMMIT
        elif self.state is TxnState.PREPARE_ABORT:
            target = TxnState.COMPLETE_ABORT
        else:
            raise IllegalTransitionError(f"{self.transactional_id}: complete from {self.state.display_name}")
        changes: dict[str, object] = {}
        if self.client_transaction_version >= 2 and self.next_producer_id != NO_PRODUCER_ID:
            changes.update(producer_id=self.next_producer_id, producer_epoch=0)
        return self._prepare(target, next_producer_id=NO_PRODUCER_ID, topic_partitions=frozenset(),
                             txn_last_update_timestamp=update_timestamp, **changes)

    def prepare_dead(self) -> TxnTransitMetadata:
        return self._prepare(TxnState.DEAD, topic_partitions=frozenset())

    # ------------------------------------------------------------------ complete / abort
    def abort_pending(self) -> None:
        """The log append of the pending transit failed: drop the marker; the metadata is unchanged."""
        self.pending_state = None
        self.pending_transit = None

    def _fail(self, transit: TxnTransitMetadata, why: str) -> IllegalTransitionError:
        return IllegalTransitionError(f"{self.transactional_id}: transition {self.state.display_name} -> "
                                      f"{transit.state.display_name} rejected ({why}): {transit}")

    def _valid_epoch(self, t: TxnTransitMetadata) -> bool:
        """The transit's producer id is this one's and its epoch the current one, bumped by the fence and by the
        transactions V2 end it carries (never past Short.MAX_VALUE)."""
        if t.producer_id != self.producer_id:
            return False
        expected = self.producer_epoch
        if t.epoch_fence:
            expected = min(expected + 1, SHORT_MAX)
        if t.epoch_bump:
            expected = min(expected + 1, SHORT_MAX)
        return t.producer_epoch == expected

    def _valid_rotation(self, t: TxnTransitMetadata) -> bool:
        """A transactions V2 Complete* moving to the producer id its prepare named, at epoch 0."""
        return (t.client_transaction_version >= 2 and self.next_producer_id != NO_PRODUCER_ID
                and t.producer_id == self.next_producer_id and t.producer_epoch == 0
                and t.prev_producer_id == self.producer_id)

    def _valid_epoch_bump(self, t: TxnTransitMetadata) -> bool:
        return t.producer_epoch == self.producer_epoch + 1 or (t.producer_epoch == 0 and t.producer_id != self.producer_id)

    def complete_transition(self, transit: TxnTransitMetadata) -> None:
        """Apply a transit whose log record is durable (Kafka ``completeTransitionTo``)."""
        target = self.pending_state
        if target is None:
            raise self._fail(transit, "no pending state")
        if target is not transit.state:
            raise self._fail(transit, f"pending state is {target.display_name}")
        s = transit.state
        if s is TxnState.EMPTY:
            if ((self.producer_epoch != transit.producer_epoch or self.producer_id != transit.producer_id)
                    and not self._valid_epoch_bump(transit)) or transit.topic_partitions \
                    or transit.txn_start_timestamp != -1:
                raise self._fail(transit, "bad epoch bump or leftover partitions")
        elif s is TxnState.ONGOING:
            if not self._valid_epoch(transit) or not transit.topic_partitions >= self.topic_partitions \
                    or transit.txn_timeout_ms != self.txn_timeout_ms:
                raise self._fail(transit, "epoch, partitions or timeout changed")
        elif s in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            # transactions V2 may abort from Empty/Complete* (nothing added): that transaction starts now
            empty_abort = s is TxnState.PREPARE_ABORT and transit.client_transaction_version >= 2 \
                and self.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
            if not self._valid_epoch(transit) or transit.topic_partitions != frozenset(self.topic_partitions) \
                    or transit.txn_timeout_ms != self.txn_timeout_ms \
                    or (transit.txn_start_timestamp != self.txn_start_timestamp and not empty_abort):
                raise self._fail(transit, "epoch, partitions, timeout or start time changed")
        elif s in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            if not (self._valid_epoch(transit) or self._valid_rotation(transit)) \
                    or transit.txn_timeout_ms != self.txn_timeout_ms or transit.txn_start_timestamp == -1:
                raise self._fail(transit, "epoch or timeout changed, or no start time")
        else:  # PREPARE_EPOCH_FENCE and DEAD are never completed into memory
            raise self._fail(transit, "never completed; Dead removes the id, a fence becomes PrepareAbort")
        self._apply(transit)

    def _apply(self, t: TxnTransitMetadata) -> None:
        self.producer_id = t.producer_id
        self.previous_producer_id = t.prev_producer_id
        self.next_producer_id = t.next_producer_id
        self.producer_epoch = t.producer_epoch
        self.last_producer_epoch = t.last_producer_epoch
        self.txn_timeout_ms = t.txn_timeout_ms
        self.state = t.state
        self.topic_partitions = set(t.topic_partitions)
        self.txn_start_timestamp = t.txn_start_timestamp
        self.txn_last_update_timestamp = t.txn_last_update_timestamp
        self.client_transaction_version = t.client_transaction_version
        self.pending_state = None
        self.pending_transit = None

    @classmethod
    def from_transit(cls, transactional_id: str, t: TxnTransitMetadata) -> TransactionMetadata:
        """Metadata as loaded from the log (no pending marker)."""
        md = cls(transactional_id=transactional_id, producer_id=t.producer_id)
        md._apply(t)
        return md
