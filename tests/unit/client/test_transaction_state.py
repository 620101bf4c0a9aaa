"""The transactional producer's sans-I/O state machine, error classification, PreparedTxnState, sequences and
the idempotence/transaction configuration rules."""

from __future__ import annotations

import itertools
import struct

import crc32c
import pytest

from oncelog.client import ConfigError, KafkaError, PreparedTxnState
from oncelog.client.config import parse_producer_config
from oncelog.client.producer import PreparedTxnState as PreparedFromProducer
from oncelog.client.producer.idempotence import SequenceNumbers, increment_sequence, stamp_batch
from oncelog.client.producer.txn_state import (
    LEGAL_PREDECESSORS,
    IllegalTxnStateError,
    TxnState,
    TxnStateMachine,
    classify,
)
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.records import RecordBatchBuilder, compute_crc, parse_batch_header

S = TxnState

LEGAL = {
    (S.INITIALIZING, S.UNINITIALIZED), (S.UNINITIALIZED, S.INITIALIZING), (S.ABORTING_TRANSACTION, S.INITIALIZING),
    (S.INITIALIZING, S.READY), (S.COMMITTING_TRANSACTION, S.READY), (S.ABORTING_TRANSACTION, S.READY),
    (S.READY, S.IN_TRANSACTION),
    (S.IN_TRANSACTION, S.PREPARED_TRANSACTION), (S.INITIALIZING, S.PREPARED_TRANSACTION),
    (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION), (S.PREPARED_TRANSACTION, S.COMMITTING_TRANSACTION),
    (S.IN_TRANSACTION, S.ABORTING_TRANSACTION), (S.PREPARED_TRANSACTION, S.ABORTING_TRANSACTION),
    (S.ABORTABLE_ERROR, S.ABORTING_TRANSACTION),
    (S.IN_TRANSACTION, S.ABORTABLE_ERROR), (S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR),
    (S.ABORTABLE_ERROR, S.ABORTABLE_ERROR),
} | {(s, S.FATAL_ERROR) for s in TxnState}


def test_table_matches_the_documented_transitions_exactly() -> None:
    table = {(src, dst) for dst, srcs in LEGAL_PREDECESSORS.items() for src in srcs}
    assert table == LEGAL


@pytest.mark.parametrize(("src", "dst"), sorted(itertools.product(TxnState, TxnState), key=str))
def test_every_pair_is_legal_or_rejected(src: TxnState, dst: TxnState) -> None:
    fsm = TxnStateMachine("t")
    fsm.state = src
    if (src, dst) in LEGAL and (src is not S.FATAL_ERROR or dst is S.FATAL_ERROR):
        fsm.transition(dst, KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR))
        assert fsm.state is dst
    else:
        with pytest.raises(KafkaError):
            fsm.transition(dst)
        assert fsm.state is src  # unchanged


@pytest.mark.parametrize(("src", "dst"), [
    (S.UNINITIALIZED, S.IN_TRANSACTION), (S.READY, S.COMMITTING_TRANSACTION), (S.READY, S.PREPARED_TRANSACTION),
    (S.ABORTABLE_ERROR, S.COMMITTING_TRANSACTION), (S.PREPARED_TRANSACTION, S.IN_TRANSACTION),
    (S.COMMITTING_TRANSACTION, S.IN_TRANSACTION), (S.IN_TRANSACTION, S.READY), (S.READY, S.ABORTING_TRANSACTION),
])
def test_illegal_transitions_name_both_states(src: TxnState, dst: TxnState) -> None:
    fsm = TxnStateMachine("tid-x")
    fsm.state = src
    with pytest.raises(IllegalTxnStateError, match=f"'tid-x'.*{src.name} to {dst.name}"):
        fsm.transition(dst)


def test_fatal_is_terminal_and_reports_its_cause() -> None:
    fsm = TxnStateMachine("t")
    fsm.state = S.IN_TRANSACTION
    fsm.fail(KafkaError(ErrorCode.PRODUCER_FENCED, "fenced by a newer instance"))
    assert fsm.state is S.FATAL_ERROR
    with pytest.raises(KafkaError, match="PRODUCER_FENCED.*create a new producer"):
        fsm.transition(S.READY)
    with pytest.raises(KafkaError, match="PRODUCER_FENCED"):
        fsm.require("commit", S.IN_TRANSACTION)


@pytest.mark.parametrize(("code", "kind"), [
    (ErrorCode.PRODUCER_FENCED, "fatal"), (ErrorCode.INVALID_PRODUCER_EPOCH, "fatal"),
    (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "fatal"), (ErrorCode.UNSUPPORTED_VERSION, "fatal"),
    (ErrorCode.CONCURRENT_TRANSACTIONS, "retry"), (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "retry"),
    (ErrorCode.NOT_COORDINATOR, "retry"),
    (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "abortable"), (ErrorCode.REQUEST_TIMED_OUT, "retry"),
    (ErrorCode.TOPIC_AUTHORIZATION_FAILED, "abortable"), (ErrorCode.MESSAGE_TOO_LARGE, "abortable"),
    (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, "abortable"), (ErrorCode.ILLEGAL_GENERATION, "abortable"),
])
def test_classify(code: ErrorCode, kind: str) -> None:
    assert classify(code) == kind


def test_abortable_error_requires_abort() -> None:
    fsm = TxnStateMachine("t")
    fsm.state = S.IN_TRANSACTION
    fsm.fail(KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "no write access to 'x'"))
    assert fsm.state is S.ABORTABLE_ERROR
    with pytest.raises(KafkaError, match="TOPIC_AUTHORIZATION_FAILED.*abort_transaction"):
        fsm.require("commit_transaction()", S.IN_TRANSACTION)
    fsm.transition(S.ABORTING_TRANSACTION)
    fsm.transition(S.READY)
    assert fsm.last_error is None


def test_require_hints_init() -> None:
    with pytest.raises(IllegalTxnStateError, match="UNINITIALIZED.*init_transactions"):
        TxnStateMachine("t").require("begin_transaction()", S.READY)


def test_prepared_txn_state_round_trip() -> None:
    s = PreparedTxnState(4711, 3)
    assert str(s) == "4711:3" and PreparedTxnState.parse("4711:3") == s and PreparedFromProducer is PreparedTxnState
    assert PreparedTxnState.parse(" 1:0 ") == PreparedTxnState(1, 0)
    for bad in ("", "12", "a:b", "1:2:3"):
        with pytest.raises(ValueError, match="producerId:epoch"):
            PreparedTxnState.parse(bad)
    with pytest.raises(AttributeError):
        s.epoch = 4  # type: ignore[misc]


def test_sequence_wraps_at_int32() -> None:
    assert increment_sequence(2**31 - 1, 1) == 0
    assert increment_sequence(2**31 - 3, 5) == 2
    seqs = SequenceNumbers()
    seqs._next[("t", 0)] = 2**31 - 2
    assert seqs.assign(("t", 0), 5) == 2**31 - 2
    assert seqs.next_sequence(("t", 0)) == 3
    assert seqs.assign(("t", 1), 10) == 0 and seqs.assign(("t", 1), 1) == 10
    seqs.rewind(("t", 1), 10)
    assert seqs.next_sequence(("t", 1)) == 10


def test_stamp_batch_sets_producer_fields_and_a_valid_crc() -> None:
    b = RecordBatchBuilder()
    b.append(1000, b"k", b"v")
    b.append(1001, None, b"w")
    raw = stamp_batch(b.build(), 77, 5, 2**31 - 1, True)
    h = parse_batch_header(raw)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (77, 5, 2**31 - 1)
    assert h.is_transactional
    assert struct.unpack_from(">I", raw, 17)[0] == compute_crc(raw, 0, len(raw)) == crc32c.crc32c(raw[21:])


def _conf(**kw: object) -> dict[str, object]:
    return {"bootstrap.servers": "h:1", **{k.replace("_", "."): v for k, v in kw.items()}}


def test_idempotence_is_on_by_default() -> None:
    c = parse_producer_config({"bootstrap.servers": "h:1"})
    assert c.enable_idempotence and c.max_in_flight == 5 and c.transactional_id is None
    assert c.transaction_timeout_ms == 60000 and not c.transaction_two_phase_commit_enable


@pytest.mark.parametrize(("key", "value"), [("acks", "1"), ("acks", 0), ("retries", 0),
                                            ("max.in.flight.requests.per.connection", 6)])
def test_explicit_idempotence_rejects_conflicts_naming_the_key(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=key.split(".")[0]):
        parse_producer_config({"bootstrap.servers": "h:1", "enable.idempotence": "true", key: value})
    with pytest.raises(ConfigError, match=key.split(".")[0]):
        parse_producer_config({"bootstrap.servers": "h:1", "transactional.id": "t", key: value})
    # not set explicitly: silently off, as in Kafka
    assert not parse_producer_config({"bootstrap.servers": "h:1", key: value}).enable_idempotence


def test_transactional_config() -> None:
    c = parse_producer_config({"bootstrap.servers": "h:1", "transactional.id": "t1",
                               "transaction.timeout.ms": 3000, "transaction.two.phase.commit.enable": "true"})
    assert c.enable_idempotence and c.transactional_id == "t1" and c.transaction_timeout_ms == 3000
    assert c.transaction_two_phase_commit_enable
    with pytest.raises(ConfigError, match="enable.idempotence"):
        parse_producer_config({"bootstrap.servers": "h:1", "transactional.id": "t", "enable.idempotence": False})
    with pytest.raises(ConfigError, match="transactional.id"):
        parse_producer_config({"bootstrap.servers": "h:1", "transaction.two.phase.commit.enable": True})
    with pytest.raises(ConfigError, match="transactional.id"):
        parse_producer_config({"bootstrap.servers": "h:1", "transactional.id": ""})
