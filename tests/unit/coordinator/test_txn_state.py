"""The transaction state table, metadata two-phase transitions, log record codec and partitioner."""

from __future__ import annotations

import itertools

import pytest

from oncelog.coordinator.transaction.metadata import (
    SHORT_MAX,
    IllegalTransitionError,
    TransactionMetadata,
    TxnError,
)
from oncelog.coordinator.transaction.partitioner import java_abs, java_string_hash, partition_for
from oncelog.coordinator.transaction.records import (
    decode_key,
    decode_value,
    encode_key,
    encode_txn_record,
    encode_value,
)
from oncelog.coordinator.transaction.state import VALID_PREVIOUS, TxnState, is_valid_transition
from oncelog.protocol.coordinator_records import TransactionLogValue, decode_record, encode_record
from oncelog.protocol.errors import ErrorCode
from oncelog.testing import MockClock

S = TxnState

# Kafka TransactionState.validPreviousStates, written out pair by pair
KAFKA_TABLE = {
    (S.EMPTY, S.EMPTY), (S.COMPLETE_COMMIT, S.EMPTY), (S.COMPLETE_ABORT, S.EMPTY),
    (S.ONGOING, S.ONGOING), (S.EMPTY, S.ONGOING), (S.COMPLETE_COMMIT, S.ONGOING), (S.COMPLETE_ABORT, S.ONGOING),
    (S.ONGOING, S.PREPARE_COMMIT),
    (S.ONGOING, S.PREPARE_ABORT), (S.PREPARE_EPOCH_FENCE, S.PREPARE_ABORT), (S.EMPTY, S.PREPARE_ABORT),
    (S.COMPLETE_COMMIT, S.PREPARE_ABORT), (S.COMPLETE_ABORT, S.PREPARE_ABORT),
    (S.PREPARE_COMMIT, S.COMPLETE_COMMIT),
    (S.PREPARE_ABORT, S.COMPLETE_ABORT),
    (S.EMPTY, S.DEAD), (S.COMPLETE_ABORT, S.DEAD), (S.COMPLETE_COMMIT, S.DEAD),
    (S.ONGOING, S.PREPARE_EPOCH_FENCE),
}


def test_ids_and_names_match_kafka() -> None:
    assert [(s.value, s.display_name) for s in S] == [
        (0, "Empty"), (1, "Ongoing"), (2, "PrepareCommit"), (3, "PrepareAbort"), (4, "CompleteCommit"),
        (5, "CompleteAbort"), (6, "Dead"), (7, "PrepareEpochFence")]
    for s in S:
        assert S.from_name(s.display_name) is s
        assert S.from_id(int(s)) is s
    assert S.from_name("Bogus") is None
    with pytest.raises(ValueError):
        S.from_id(8)
    assert {s for s in S if s.expiration_allowed} == {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}


@pytest.mark.parametrize("frm,to", list(itertools.product(list(S), list(S))))
def test_every_transition_against_kafka_table(frm: TxnState, to: TxnState) -> None:
    expected = (frm, to) in KAFKA_TABLE
    assert is_valid_transition(frm, to) is expected
    assert (frm in VALID_PREVIOUS[to]) is expected
    # the metadata enforces the same table
    md = TransactionMetadata("t", producer_id=7, producer_epoch=3, state=frm, txn_start_timestamp=5,
                             txn_last_update_timestamp=5)
    if expected:
        t = md._prepare(to)
        assert t.state is to and md.pending_state is to
    else:
        with pytest.raises(IllegalTransitionError):
            md._prepare(to)
        assert md.pending_state is None


# ---------------------------------------------------------------------------- metadata per API
def fresh(clock: MockClock) -> TransactionMetadata:
    return TransactionMetadata("txn", producer_id=100, txn_timeout_ms=60_000,
                               txn_last_update_timestamp=clock.wall_ms())


def test_init_add_commit_cycle() -> None:
    clock = MockClock()
    md = fresh(clock)
    t = md.prepare_increment_producer_epoch(30_000, None, clock.wall_ms())
    assert (t.state, t.producer_epoch, t.last_producer_epoch, t.txn_timeout_ms) == (S.EMPTY, 0, -1, 30_000)
    assert md.state is S.EMPTY and md.producer_epoch == -1  # nothing applied before the log says so
    with pytest.raises(IllegalTransitionError):
        md.prepare_add_partitions({("a", 0)}, clock.wall_ms())  # a pending transition blocks another
    md.complete_transition(t)
    assert md.producer_epoch == 0 and md.pending_state is None

    clock.advance(10)
    t = md.prepare_add_partitions({("a", 0), ("b", 1)}, clock.wall_ms())
    md.complete_transition(t)
    assert md.state is S.ONGOING and md.txn_start_timestamp == clock.wall_ms()
    start = md.txn_start_timestamp
    clock.advance(10)
    md.complete_transition(md.prepare_add_partitions({("c", 2)}, clock.wall_ms()))
    assert md.txn_start_timestamp == start and md.topic_partitions == {("a", 0), ("b", 1), ("c", 2)}

    t = md.prepare_abort_or_commit(S.PREPARE_COMMIT, clock.wall_ms())
    md.complete_transition(t)
    assert md.state is S.PREPARE_COMMIT and md.producer_epoch == 0
    md.complete_transition(md.prepare_complete(clock.wall_ms()))
    assert md.state is S.COMPLETE_COMMIT and md.topic_partitions == set()
    # next transaction restarts the start time
    clock.advance(5)
    md.complete_transition(md.prepare_add_partitions({("a", 0)}, clock.wall_ms()))
    assert md.txn_start_timestamp == clock.wall_ms()


def test_abort_pending_leaves_state_untouched() -> None:
    clock = MockClock()
    md = fresh(clock)
    md.complete_transition(md.prepare_increment_producer_epoch(1000, None, 1))
    before = md.snapshot()
    md.prepare_add_partitions({("x", 1)}, 2)
    md.abort_pending()
    assert md.snapshot() == before and md.pending_state is None


def test_kip360_expected_epoch_rules() -> None:
    md = TransactionMetadata("t", producer_id=1, producer_epoch=5, last_producer_epoch=-1, state=S.EMPTY,
                             txn_last_update_timestamp=0)
    t = md.prepare_increment_producer_epoch(1000, 5, 1)  # matches current: bump, remember last
    assert (t.producer_epoch, t.last_producer_epoch) == (6, 5)
    md.complete_transition(t)
    t = md.prepare_increment_producer_epoch(1000, 5, 2)  # retry of that bump: no new bump
    assert (t.producer_epoch, t.last_producer_epoch) == (6, 5)
    md.complete_transition(t)
    with pytest.raises(TxnError) as e:
        md.prepare_increment_producer_epoch(1000, 3, 3)
    assert e.value.code is ErrorCode.PRODUCER_FENCED
    assert md.pending_state is None


def test_fence_then_abort_carries_the_bumped_epoch() -> None:
    md = TransactionMetadata("t", producer_id=1, producer_epoch=4, last_producer_epoch=3, state=S.ONGOING,
                             topic_partitions={("a", 0)}, txn_start_timestamp=10, txn_last_update_timestamp=10)
    fence = md.prepare_fence_producer_epoch()
    assert fence.state is S.PREPARE_EPOCH_FENCE and fence.producer_epoch == 5 and md.producer_epoch == 4
    t = md.prepare_abort_or_commit(S.PREPARE_ABORT, 20)
    assert (t.state, t.producer_epoch, t.last_producer_epoch, t.epoch_fence) == (S.PREPARE_ABORT, 5, -1, True)
    assert md.pending_state is S.PREPARE_ABORT and md.producer_epoch == 4
    md.complete_transition(t)
    assert md.producer_epoch == 5 and md.state is S.PREPARE_ABORT
    md.complete_transition(md.prepare_complete(30))
    assert md.state is S.COMPLETE_ABORT and md.producer_epoch == 5


def test_fence_at_short_max_does_not_overflow() -> None:
    md = TransactionMetadata("t", producer_id=1, producer_epoch=SHORT_MAX, state=S.ONGOING,
                             topic_partitions={("a", 0)}, txn_start_timestamp=1, txn_last_update_timestamp=1)
    t = md.prepare_fence_and_abort(2)
    assert t.producer_epoch == SHORT_MAX
    md.complete_transition(t)


def test_commit_cannot_follow_a_fence() -> None:
    md = TransactionMetadata("t", producer_id=1, producer_epoch=0, state=S.ONGOING, topic_partitions={("a", 0)},
                             txn_start_timestamp=1, txn_last_update_timestamp=1)
    md.prepare_fence_producer_epoch()
    with pytest.raises(IllegalTransitionError):
        md.prepare_abort_or_commit(S.PREPARE_COMMIT, 2)


def test_epoch_exhaustion_and_rotation() -> None:
    md = TransactionMetadata("t", producer_id=1, producer_epoch=SHORT_MAX - 1, state=S.COMPLETE_COMMIT,
                             txn_start_timestamp=1, txn_last_update_timestamp=1)
    assert md.is_producer_epoch_exhausted()
    with pytest.raises(IllegalTransitionError):
        md.prepare_increment_producer_epoch(1000, None, 2)
    t = md.prepare_producer_id_rotation(2, 1000, 2, record_last_epoch=True)
    assert (t.producer_id, t.producer_epoch, t.last_producer_epoch, t.prev_producer_id) == (2, 0, SHORT_MAX - 1, 1)
    md.complete_transition(t)
    assert (md.producer_id, md.producer_epoch, md.previous_producer_id) == (2, 0, 1)
    md2 = TransactionMetadata("t", producer_id=1, producer_epoch=5, state=S.ONGOING, txn_start_timestamp=1)
    with pytest.raises(IllegalTransitionError):
        md2.prepare_producer_id_rotation(3, 1000, 2, False)


def test_complete_transition_checks() -> None:
    md = TransactionMetadata("t", producer_id=1, producer_epoch=0, state=S.ONGOING, topic_partitions={("a", 0)},
                             txn_start_timestamp=1, txn_last_update_timestamp=1)
    with pytest.raises(IllegalTransitionError):
        md.complete_transition(md.snapshot())  # nothing pending
    t = md.prepare_abort_or_commit(S.PREPARE_COMMIT, 2)
    import dataclasses
    with pytest.raises(IllegalTransitionError):
        md.complete_transition(dataclasses.replace(t, producer_epoch=9))
    with pytest.raises(IllegalTransitionError):
        md.complete_transition(dataclasses.replace(t, state=S.PREPARE_ABORT))
    with pytest.raises(IllegalTransitionError):
        md.complete_transition(dataclasses.replace(t, topic_partitions=frozenset()))
    md.complete_transition(t)
    md2 = TransactionMetadata("t", producer_id=1, producer_epoch=0, state=S.EMPTY, txn_last_update_timestamp=1)
    dead = md2.prepare_dead()
    with pytest.raises(IllegalTransitionError):
        md2.complete_transition(dead)  # Dead removes the id; it is never completed into memory


# ---------------------------------------------------------------------------- records
def test_record_round_trip_and_kafka_layout() -> None:
    md = TransactionMetadata("my-txn", producer_id=4242, producer_epoch=7, state=S.ONGOING,
                             topic_partitions={("b", 1), ("a", 3), ("a", 0)}, txn_start_timestamp=111,
                             txn_last_update_timestamp=222, txn_timeout_ms=60_000)
    t = md.prepare_abort_or_commit(S.PREPARE_COMMIT, 333)
    key, value = encode_txn_record("my-txn", t)
    # key: int16 version 0 + int16-length string
    assert key == b"\x00\x00" + b"\x00\x06my-txn"
    assert decode_key(key) == "my-txn"
    assert value is not None and value[:2] == b"\x00\x01"
    back = decode_value(value)
    assert back.state is S.PREPARE_COMMIT and back.producer_id == 4242 and back.producer_epoch == 7
    assert back.topic_partitions == t.topic_partitions and back.txn_timeout_ms == 60_000
    assert (back.txn_start_timestamp, back.txn_last_update_timestamp) == (111, 333)
    assert back.prev_producer_id == 4242 and back.last_producer_epoch == -1
    _, raw = decode_record(TransactionLogValue, value)
    assert [(p.topic, p.partition_ids) for p in raw.transaction_partitions or []] == [("a", [0, 3]), ("b", [1])]
    # version 0 (Kafka 3.x) layout: fixed fields, then int32-count arrays
    v0 = encode_value(t, version=0)
    assert v0[:2] == b"\x00\x00"
    assert v0[2:17] == (4242).to_bytes(8, "big") + (7).to_bytes(2, "big") + (60_000).to_bytes(4, "big") + b"\x02"
    assert decode_value(v0).topic_partitions == t.topic_partitions


def test_empty_state_stores_null_partitions_and_dead_is_tombstone() -> None:
    md = TransactionMetadata("x", producer_id=1, producer_epoch=-1, state=S.EMPTY)
    t = md.prepare_increment_producer_epoch(1000, None, 5)
    _, value = encode_txn_record("x", t)
    assert value is not None
    _, raw = decode_record(TransactionLogValue, value)
    assert raw.transaction_partitions is None
    md.complete_transition(t)
    key, tomb = encode_txn_record("x", md.prepare_dead())
    assert tomb is None and key == encode_key("x")
    # an unknown key version is not ours
    assert decode_key(b"\x00\x01\x00\x01x") is None
    assert decode_key(encode_record(__import__(
        "oncelog.protocol.coordinator_records", fromlist=["TransactionLogKey"]).TransactionLogKey("y"), 0)) == "y"


# ---------------------------------------------------------------------------- partitioner
@pytest.mark.parametrize("s,h", [
    ("", 0), ("a", 97), ("abc", 96354), ("hello", 99162322), ("Hello", 69609650), ("test", 3556498),
    ("hello world", 1794106052), ("Aa", 2112), ("BB", 2112), ("polygenelubricants", -2147483648),
    ("\U0001F600", 0xD83D * 31 + 0xDE00), ("é", 233),
])
def test_java_string_hash(s: str, h: int) -> None:
    assert java_string_hash(s) == h


def test_partition_for_uses_kafka_abs() -> None:
    assert java_abs(-2147483648) == 0 and java_abs(-5) == 5
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("hello world", 7) == 1794106052 % 7
    neg = next(s for s in (f"transactional-id-{i}" for i in range(1000)) if java_string_hash(s) < 0)
    assert partition_for(neg, 50) == (-java_string_hash(neg)) % 50
    with pytest.raises(ValueError):
        partition_for("x", 0)
