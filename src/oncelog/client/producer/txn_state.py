"""The transactional producer's client-side state machine, without I/O (Kafka's TransactionManager.State).

Every legal transition is in :data:`LEGAL_PREDECESSORS` (target state -> the states it may be entered from); the
async driver in :mod:`.transaction_manager` does the requests and calls :meth:`TxnStateMachine.transition`.
The abortable/fatal split of broker errors is :func:`classify`.

KIP-939 (two-phase commit) adds PREPARED_TRANSACTION: entered by ``prepare_transaction()`` (from IN_TRANSACTION) or
by ``init_transactions(keep_prepared_txn=True)`` finding a kept transaction (from INITIALIZING); it is left by
committing or aborting that transaction. :class:`PreparedTxnState` is what an external coordinator stores.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from oncelog.protocol.errors import ErrorCode

from ..errors import KafkaError

__all__ = [
    "FATAL_CODES",
    "LEGAL_PREDECESSORS",
    "RETRIABLE_TXN_CODES",
    "IllegalTxnStateError",
    "PreparedTxnState",
    "TxnState",
    "TxnStateMachine",
    "classify",
]


class TxnState(enum.Enum):
    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    PREPARED_TRANSACTION = "PREPARED_TRANSACTION"
    COMMITTING_TRANSACTION = "COMMITTING_TRANSACTION"
    ABORTING_TRANSACTION = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


S = TxnState

#: target state -> the states it may be entered from. FATAL_ERROR may be entered from anywhere.
LEGAL_PREDECESSORS: dict[TxnState, frozenset[TxnState]] = {
    # back to UNINITIALIZED: an init_transactions that failed with a retriable error / timed out may be retried
    S.UNINITIALIZED: frozenset({S.INITIALIZING}),
    # first init; or an epoch bump (KIP-360) after aborting a transaction that hit UNKNOWN_PRODUCER_ID etc.
    S.INITIALIZING: frozenset({S.UNINITIALIZED, S.ABORTING_TRANSACTION}),
    S.READY: frozenset({S.INITIALIZING, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION}),
    S.IN_TRANSACTION: frozenset({S.READY}),
    S.PREPARED_TRANSACTION: frozenset({S.IN_TRANSACTION, S.INITIALIZING}),
    S.COMMITTING_TRANSACTION: frozenset({S.IN_TRANSACTION, S.PREPARED_TRANSACTION}),
    S.ABORTING_TRANSACTION: frozenset({S.IN_TRANSACTION, S.PREPARED_TRANSACTION, S.ABORTABLE_ERROR}),
    S.ABORTABLE_ERROR: frozenset({S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR}),
    S.FATAL_ERROR: frozenset(TxnState),
}

#: errors after which the producer can never be used again (Kafka: fatal errors)
FATAL_CODES = frozenset({
    ErrorCode.PRODUCER_FENCED,
    ErrorCode.INVALID_PRODUCER_EPOCH,
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ErrorCode.UNSUPPORTED_VERSION,
    ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
    ErrorCode.INVALID_TXN_STATE,
    ErrorCode.INVALID_PRODUCER_ID_MAPPING,
    ErrorCode.TRANSACTIONAL_ID_NOT_FOUND,
    ErrorCode.INVALID_TRANSACTION_TIMEOUT,
})

#: errors of coordinator requests that are retried after a short backoff (NOT_COORDINATOR etc. also re-look up)
RETRIABLE_TXN_CODES = frozenset({
    ErrorCode.CONCURRENT_TRANSACTIONS,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.NETWORK_EXCEPTION,
})


def classify(code: int) -> str:
    """``"retry"``, ``"fatal"`` or ``"abortable"`` for an error code of a transactional request or batch."""
    if code in RETRIABLE_TXN_CODES:
        return "retry"
    if code in FATAL_CODES:
        return "fatal"
    return "abortable"


class IllegalTxnStateError(KafkaError):
    """A transactional method was called in a state that does not allow it (Kafka's IllegalStateException)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.INVALID_TXN_STATE, message, retriable=False)


@dataclass(frozen=True, slots=True)
class PreparedTxnState:
    """A prepared (KIP-939) transaction: the producer id and epoch that wrote it. ``str()`` gives ``"pid:epoch"``,
    the form an external transaction coordinator (a database, Spark's commit protocol) stores;
    :meth:`parse` reads it back."""

    producer_id: int
    epoch: int

    def __str__(self) -> str:
        return f"{self.producer_id}:{self.epoch}"

    @classmethod
    def parse(cls, s: str) -> PreparedTxnState:
        pid, sep, epoch = s.strip().partition(":")
        try:
            if not sep:
                raise ValueError
            return cls(int(pid), int(epoch))
        except ValueError:
            raise ValueError(f"not a prepared transaction state {s!r}; expected 'producerId:epoch'") from None


class TxnStateMachine:
    """The current state, the error that caused ABORTABLE_ERROR/FATAL_ERROR, and the checked transitions."""

    def __init__(self, transactional_id: str | None) -> None:
        self.transactional_id = transactional_id
        self.state = S.UNINITIALIZED
        self.last_error: KafkaError | None = None
        self.epoch_bump_needed = False  # abort must re-init the producer id (KIP-360)

    def __repr__(self) -> str:
        return f"TxnStateMachine({self.transactional_id!r}, {self.state.name})"

    @staticmethod
    def is_legal(source: TxnState, target: TxnState) -> bool:
        return source in LEGAL_PREDECESSORS[target]

    def transition(self, target: TxnState, error: KafkaError | None = None) -> None:
        """Move to ``target``; IllegalTxnStateError (the producer is unchanged) if that is not a legal transition."""
        if self.state is S.FATAL_ERROR and target is not S.FATAL_ERROR:
            raise self.fatal_error()
        if not self.is_legal(self.state, target):
            raise IllegalTxnStateError(
                f"transactional producer {self.transactional_id!r}: cannot go from {self.state.name} to "
                f"{target.name}")
        self.state = target
        if target in (S.ABORTABLE_ERROR, S.FATAL_ERROR):
            self.last_error = error
        elif target in (S.READY, S.IN_TRANSACTION):
            self.last_error = None

    def fail(self, error: KafkaError, *, fatal: bool | None = None) -> None:
        """Record a failure: FATAL_ERROR for fatal codes (or ``fatal=True``), else ABORTABLE_ERROR when in a
        transaction. Errors while no transaction is open (READY...) only become fatal when fatal."""
        is_fatal = classify(int(error.code())) == "fatal" if fatal is None else fatal
        if is_fatal:
            if self.state is not S.FATAL_ERROR:
                self.transition(S.FATAL_ERROR, error)
        elif self.state in (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION):
            self.transition(S.ABORTABLE_ERROR, error)

    def fatal_error(self) -> KafkaError:
        err = self.last_error
        detail = f"{err.name()}: {err.message}" if err is not None else "an earlier fatal error"
        return KafkaError(int(err.code()) if err is not None else ErrorCode.INVALID_TXN_STATE,
                          f"transactional producer {self.transactional_id!r} failed fatally ({detail}); "
                          "close it and create a new producer", fatal=True, retriable=False)

    def abortable_error(self) -> KafkaError:
        err = self.last_error
        detail = f"{err.name()}: {err.message}" if err is not None else "an earlier error"
        return KafkaError(int(err.code()) if err is not None else ErrorCode.INVALID_TXN_STATE,
                          f"the transaction of {self.transactional_id!r} failed ({detail}); call "
                          "abort_transaction() and start a new one", retriable=False, txn_requires_abort=True)

    def require(self, what: str, *allowed: TxnState) -> None:
        """Raise the right error unless the state is one of ``allowed``."""
        if self.state in allowed:
            return
        if self.state is S.FATAL_ERROR:
            raise self.fatal_error()
        if self.state is S.ABORTABLE_ERROR:
            raise self.abortable_error()
        names = " or ".join(s.name for s in allowed)
        hint = " (call init_transactions() first)" if self.state is S.UNINITIALIZED else ""
        raise IllegalTxnStateError(
            f"cannot {what} for transactional producer {self.transactional_id!r} in state {self.state.name}; "
            f"it needs {names}{hint}")
