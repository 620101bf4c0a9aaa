"""Storage-layer exceptions. Each names what failed, on what, and what the caller or operator can do.

The broker maps them to Kafka error codes:

    OffsetOutOfRangeError   -> OFFSET_OUT_OF_RANGE (1)
    InvalidTopicError       -> INVALID_TOPIC_EXCEPTION (17)
    TopicExistsError        -> TOPIC_ALREADY_EXISTS (36)
    UnknownTopicError       -> UNKNOWN_TOPIC_OR_PARTITION (3)
    InvalidPartitionsError  -> INVALID_PARTITIONS (37)
    InvalidConfigError      -> INVALID_CONFIG (40)
    KafkaStorageError       -> KAFKA_STORAGE_ERROR (56)
    UnexpectedAppendOffsetError -> not an API error: a replica fetcher's bug or a race (Kafka's
                                   UnexpectedAppendOffsetException); nothing was written

Producer state (idempotence / transactions); each carries ``error_code``:

    OutOfOrderSequenceError            -> OUT_OF_ORDER_SEQUENCE_NUMBER (45)
    DuplicateSequenceError             -> not an error for the client: answer success with its
                                          ``first_offset``/``last_offset`` (the original append); code 46 is
                                          DUPLICATE_SEQUENCE_NUMBER for completeness
    InvalidProducerEpochError          -> INVALID_PRODUCER_EPOCH (47)
    ProducerFencedError                -> PRODUCER_FENCED (90); never raised by the log (Kafka's log layer
                                          answers INVALID_PRODUCER_EPOCH since 2.7), for the coordinator
    InvalidTxnStateError               -> INVALID_TXN_STATE (48)
    SequenceAfterRefusedBatchError     -> NOT_ENOUGH_REPLICAS (19), retriable: a batch pipelined behind one of
                                          the producer's that was refused before the append
    TransactionCoordinatorFencedError  -> TRANSACTION_COORDINATOR_FENCED (52)
    UnknownProducerIdError             -> UNKNOWN_PRODUCER_ID (59); never raised by the log (Kafka >= 2.5
                                          accepts an unknown producer id at any sequence, KIP-360)
"""

from __future__ import annotations

__all__ = [
    "DuplicateSequenceError",
    "InvalidConfigError",
    "InvalidPartitionsError",
    "InvalidProducerEpochError",
    "InvalidTopicError",
    "InvalidTxnStateError",
    "KafkaStorageError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "ProducerFencedError",
    "ProducerStateError",
    "SequenceAfterRefusedBatchError",
    "StorageError",
    "TopicExistsError",
    "TransactionCoordinatorFencedError",
    "UnexpectedAppendOffsetError",
    "UnknownProducerIdError",
    "UnknownTopicError",
]


class StorageError(Exception):
    """Base class of every oncelog.storage error."""


class OffsetOutOfRangeError(StorageError):
    def __init__(self, topic: str, partition: int, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset
        super().__init__(
            f"offset {offset} is out of range for {topic}-{partition} "
            f"(valid offsets are {log_start_offset}..{log_end_offset}); "
            f"reset the consumer position to the log start or end offset"
        )


class InvalidTopicError(StorageError, ValueError):
    """The topic name is not legal (characters, length, '.'/'..') or collides with an existing one."""


class TopicExistsError(StorageError):
    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"topic {name!r} already exists; pick another name or delete the topic first")


class UnknownTopicError(StorageError, KeyError):
    def __init__(self, name: str, partition: int | None = None) -> None:
        self.name = name
        self.partition = partition
        what = f"topic {name!r}" if partition is None else f"partition {name}-{partition}"
        super().__init__(f"{what} does not exist on this broker; create it first or check the name")

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return str(self.args[0])


class InvalidPartitionsError(StorageError, ValueError):
    """A partition count is < 1, or add_partitions would not increase the count."""


class InvalidConfigError(StorageError, ValueError):
    """A topic config key is unknown or its value does not parse/validate."""

    def __init__(self, message: str, key: str | None = None) -> None:
        self.key = key
        super().__init__(message)


class KafkaStorageError(StorageError, OSError):
    """An I/O error on the data directory (disk full, permissions, failing device)."""


class UnexpectedAppendOffsetError(StorageError, ValueError):
    """A follower append whose batches do not continue the log: an offset below the log end, or batches out of
    order. Nothing was written; the replica fetcher refetches from the log end."""

    def __init__(self, message: str, first_offset: int, log_end_offset: int) -> None:
        self.first_offset = first_offset
        self.log_end_offset = log_end_offset
        super().__init__(message)


# ---------------------------------------------------------------------------------------------------------------
# Producer state (idempotent producer, transactions)
# ---------------------------------------------------------------------------------------------------------------


class ProducerStateError(StorageError):
    """A batch was rejected by the producer-state checks; nothing of the partition payload was written."""

    error_code = -1

    def __init__(self, message: str, producer_id: int = -1) -> None:
        self.producer_id = producer_id
        super().__init__(message)


class OutOfOrderSequenceError(ProducerStateError):
    """The batch's sequence is not the next one expected (a gap, or a retry older than the 5 cached batches)."""

    error_code = 45


class DuplicateSequenceError(ProducerStateError):
    """The batch repeats one of the producer's last 5 batches. Not a failure: the broker answers success with
    the offsets of the original append (``first_offset``, ``last_offset``) and writes nothing."""

    error_code = 46

    def __init__(self, message: str, producer_id: int, first_offset: int, last_offset: int,
                 timestamp: int = -1) -> None:
        self.first_offset = first_offset
        self.last_offset = last_offset
        self.timestamp = timestamp
        super().__init__(message, producer_id)


class InvalidProducerEpochError(ProducerStateError):
    """The batch's (or marker's) producer epoch is older than the one the partition has seen: a zombie."""

    error_code = 47


class ProducerFencedError(InvalidProducerEpochError):
    """PRODUCER_FENCED: a newer producer with the same transactional id exists. For the transaction
    coordinator and request handlers; the log itself raises :class:`InvalidProducerEpochError`."""

    error_code = 90


class InvalidTxnStateError(ProducerStateError):
    """A non-transactional batch from a producer that has a transaction ongoing on this partition, or a
    transactional batch that repeats the sequences of a batch whose transaction has ended (a reused sequence)."""

    error_code = 48


class SequenceAfterRefusedBatchError(ProducerStateError):
    """A batch past the gap left by the producer's own batch that was refused before the append with a retriable
    error: refused the same way (NOT_ENOUGH_REPLICAS, Kafka's answer to a write the ISR cannot take now), so the
    producer retries both in order. OUT_OF_ORDER_SEQUENCE_NUMBER there makes librdkafka bump the producer epoch
    and re-send every record it is not sure about, written ones included: duplicates."""

    error_code = 19


class TransactionCoordinatorFencedError(ProducerStateError):
    """A transaction marker from a coordinator epoch older than the last one seen for this producer."""

    error_code = 52


class UnknownProducerIdError(ProducerStateError):
    """UNKNOWN_PRODUCER_ID; kept for completeness, the log never raises it (see the module docstring)."""

    error_code = 59
