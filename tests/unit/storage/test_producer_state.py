"""ProducerStateManager / ProducerAppendInfo: Kafka's validation rules, two-phase updates, LSO, snapshots."""

from __future__ import annotations

from pathlib import Path

import pytest
from txn_helpers import T0, headers_for, pbatch, plain

from oncelog.protocol.records import build_control_batch
from oncelog.storage import (
    DuplicateSequenceError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    ProducerStateEntry,
    ProducerStateManager,
    SequenceAfterRefusedBatchError,
    TransactionCoordinatorFencedError,
    UnknownProducerIdError,
)
from oncelog.storage.producer_state import (
    BatchMetadata,
    CompletedTxn,
    CorruptSnapshotError,
    decrement_sequence,
    snapshot_file_name,
)

INT32_MAX = 2**31 - 1


class Harness:
    """A ProducerStateManager plus a running log end offset, committing like PartitionLog.append."""

    def __init__(self, directory: Path | None = None) -> None:
        self.psm = ProducerStateManager("t-0", directory)
        self.leo = 0
        self.aborted: list[tuple[int, int, int, int]] = []

    def append(self, *batches: bytes, origin: str = "client", control: dict[int, tuple[bool, int]] | None = None,
               ) -> tuple[int, int]:
        hs = headers_for(*batches, base=self.leo)
        infos, completed = self.psm.prepare(hs, origin, control)
        first, self.leo = self.leo, hs[-1].last_offset + 1
        for info in infos:
            self.psm.update(info)
        for txn in completed:
            if txn.is_aborted:
                self.aborted.append((txn.producer_id, txn.first_offset, txn.last_offset,
                                     self.psm.last_stable_offset(txn)))
            self.psm.complete_txn(txn)
        return first, self.leo - 1

    def marker(self, pid: int, epoch: int, commit: bool, coordinator_epoch: int = 0) -> int:
        b = build_control_batch(producer_id=pid, producer_epoch=epoch, commit=commit,
                                coordinator_epoch=coordinator_epoch, timestamp_ms=T0)
        return self.append(b, origin="coordinator", control={0: (commit, coordinator_epoch)})[0]

    def entry(self, pid: int) -> ProducerStateEntry:
        return self.psm.producers[pid]


# ====================================================================== idempotence
def test_first_batch_creates_entry() -> None:
    h = Harness()
    assert h.append(pbatch(7, 0, 0, 3)) == (0, 2)
    e = h.entry(7)
    assert (e.producer_epoch, e.first_seq, e.last_seq, e.last_data_offset, e.first_data_offset) == (0, 0, 2, 2, 0)
    assert e.last_timestamp == T0 + 2 and e.current_txn_first_offset is None
    assert list(e.batches) == [BatchMetadata(2, 2, 2, T0 + 2)]
    ap = h.psm.active_producers()[0]
    assert (ap.producer_id, ap.producer_epoch, ap.last_sequence, ap.current_txn_start_offset) == (7, 0, 2, -1)


def test_in_sequence_appends_and_gap_is_out_of_order() -> None:
    h = Harness()
    h.append(pbatch(1, 0, 0, 2))
    h.append(pbatch(1, 0, 2, 1))
    with pytest.raises(OutOfOrderSequenceError) as ei:
        h.append(pbatch(1, 0, 4, 1))
    assert ei.value.error_code == 45 and ei.value.producer_id == 1
    msg = str(ei.value)
    assert "producer 1" in msg and "t-0" in msg and "4 (incoming)" in msg and "2 (last appended)" in msg
    assert h.entry(1).last_seq == 2


def test_unknown_producer_accepts_any_sequence() -> None:
    """Kafka >= 2.5 (KIP-360): state may have been removed by retention/expiry, so any sequence is accepted."""
    h = Harness()
    h.append(pbatch(5, 3, 42, 2))
    assert h.entry(5).last_seq == 43
    h.append(pbatch(5, 3, 44))
    assert UnknownProducerIdError("x").error_code == 59


def test_duplicate_within_last_five_returns_original_offsets() -> None:
    h = Harness()
    offs = [h.append(pbatch(1, 0, seq * 2, 2)) for seq in range(6)]  # sequences 0..11 in 6 batches
    assert len(h.entry(1).batches) == 5
    for seq in range(1, 6):  # the last five batches are cached
        with pytest.raises(DuplicateSequenceError) as ei:
            h.append(pbatch(1, 0, seq * 2, 2))
        assert (ei.value.first_offset, ei.value.last_offset) == offs[seq]
        assert ei.value.timestamp == T0 + 1
    # the oldest one fell out of the cache: it is an out-of-order retry now
    with pytest.raises(OutOfOrderSequenceError):
        h.append(pbatch(1, 0, 0, 2))
    # same first sequence but different last sequence is not a duplicate
    with pytest.raises(OutOfOrderSequenceError):
        h.append(pbatch(1, 0, 10, 1))
    assert h.leo == 12


def test_a_batch_pipelined_behind_a_refused_one_is_refused_the_same_way_not_out_of_order() -> None:
    """The broker refused batch 2..3 before appending it (the ISR below min.insync.replicas), then accepts writes
    again when 4..5, pipelined behind it, arrives: 4..5 gets the same retriable answer (librdkafka would bump its
    epoch on OUT_OF_ORDER_SEQUENCE_NUMBER and re-send written records), 2..3 then 4..5 are appended in order."""
    h = Harness()
    h.append(pbatch(1, 0, 0, 2))
    h.psm.note_refused(1, 0, 2)
    with pytest.raises(SequenceAfterRefusedBatchError) as ei:
        h.append(pbatch(1, 0, 4, 2))
    assert ei.value.error_code == 19 and "refused before the append" in str(ei.value)
    with pytest.raises(OutOfOrderSequenceError):  # a rewind is not explained by the refusal
        h.append(pbatch(1, 0, 1, 1))
    h.psm.note_refused(1, 0, 4)  # refused too while the ISR was short: the gap still starts at 2
    with pytest.raises(SequenceAfterRefusedBatchError):
        h.append(pbatch(1, 0, 6, 2))
    h.append(pbatch(1, 0, 2, 2))  # the retry of the refused batch clears the note
    assert 1 not in h.psm.refused
    h.append(pbatch(1, 0, 4, 2))
    with pytest.raises(OutOfOrderSequenceError):  # a real gap is out of order again
        h.append(pbatch(1, 0, 9, 1))
    h.psm.note_refused(1, 7, 6)  # a refusal at another epoch or not next in sequence leaves no such gap
    h.psm.note_refused(1, 0, 8)
    assert 1 not in h.psm.refused


def test_duplicate_check_needs_same_epoch() -> None:
    h = Harness()
    h.append(pbatch(1, 0, 0))
    h.append(pbatch(1, 1, 0))  # epoch bump restarts at 0: not a duplicate of epoch 0's batch
    with pytest.raises(DuplicateSequenceError):
        h.append(pbatch(1, 1, 0))
    with pytest.raises(InvalidProducerEpochError):  # the old epoch's retry is fenced, not a duplicate
        h.append(pbatch(1, 0, 0))


def test_epoch_rules() -> None:
    h = Harness()
    h.append(pbatch(1, 3, 0, 5))
    with pytest.raises(InvalidProducerEpochError) as ei:
        h.append(pbatch(1, 2, 5))
    assert ei.value.error_code == 47 and "epoch 2" in str(ei.value) and "3" in str(ei.value)
    with pytest.raises(OutOfOrderSequenceError, match="new epoch 4"):
        h.append(pbatch(1, 4, 5))
    h.append(pbatch(1, 4, 0))
    e = h.entry(1)
    assert e.producer_epoch == 4 and [b.first_seq for b in e.batches] == [0]  # older epoch's batches dropped
    assert ProducerFencedError("x").error_code == 90 and isinstance(ProducerFencedError("x"),
                                                                     InvalidProducerEpochError)


def test_int32_sequence_wrap() -> None:
    h = Harness()
    h.append(pbatch(1, 0, INT32_MAX - 1, 2))  # sequences MAX-1, MAX
    assert h.entry(1).last_seq == INT32_MAX
    h.append(pbatch(1, 0, 0, 1))
    h.append(pbatch(1, 0, 1, 1))
    with pytest.raises(DuplicateSequenceError):
        h.append(pbatch(1, 0, INT32_MAX - 1, 2))
    # a batch spanning the wrap: first seq MAX-1, last seq 0
    h2 = Harness()
    h2.append(pbatch(2, 0, INT32_MAX - 3, 2))
    h2.append(pbatch(2, 0, INT32_MAX - 1, 3))
    e = h2.entry(2)
    assert e.last_seq == 0 and e.batches[-1].first_seq == INT32_MAX - 1
    with pytest.raises(DuplicateSequenceError):
        h2.append(pbatch(2, 0, INT32_MAX - 1, 3))
    h2.append(pbatch(2, 0, 1))
    assert decrement_sequence(0, 1) == INT32_MAX and decrement_sequence(5, 2) == 3


def test_two_phase_whole_payload_rejected() -> None:
    h = Harness()
    h.append(pbatch(1, 0, 0))
    before = h.psm.state()
    hs = headers_for(pbatch(1, 0, 1), pbatch(2, 0, 0), pbatch(1, 0, 5), base=h.leo)
    with pytest.raises(OutOfOrderSequenceError):
        h.psm.prepare(hs, "client")
    assert h.psm.state() == before
    # prepare alone changes nothing; several batches of one producer in a payload chain
    hs = headers_for(pbatch(1, 0, 1), plain(), pbatch(1, 0, 2, 2), base=h.leo)
    infos, completed = h.psm.prepare(hs, "client")
    assert h.psm.state() == before and not completed and len(infos) == 1
    h.psm.update(infos[0])
    assert h.entry(1).last_seq == 3 and [b.last_offset for b in h.entry(1).batches] == [0, 1, 4]


def test_duplicate_in_multi_batch_payload_reports_it() -> None:
    h = Harness()
    h.append(pbatch(1, 0, 0))
    hs = headers_for(pbatch(1, 0, 0), pbatch(1, 0, 1), base=h.leo)
    with pytest.raises(DuplicateSequenceError) as ei:
        h.psm.prepare(hs, "client")
    assert ei.value.first_offset == 0


def test_coordinator_origin_skips_sequence_checks() -> None:
    h = Harness()
    h.append(pbatch(9, 2, 0))
    h.append(pbatch(9, 2, 17), origin="coordinator")  # e.g. transactional offset commits: epoch check only
    with pytest.raises(InvalidProducerEpochError):
        h.append(pbatch(9, 1, 18), origin="coordinator")
    h.append(pbatch(9, 1, 18), origin="replication")  # replay never rejects


# ====================================================================== transactions
def test_transaction_start_and_invalid_txn_state() -> None:
    h = Harness()
    h.append(plain(3))
    h.append(pbatch(1, 0, 0, 2, txn=True))
    assert h.entry(1).current_txn_first_offset == 3
    assert [(t.producer_id, t.first_offset) for t in h.psm.ongoing_transactions()] == [(1, 3)]
    h.append(pbatch(1, 0, 2, txn=True))
    assert h.entry(1).current_txn_first_offset == 3
    with pytest.raises(InvalidTxnStateError) as ei:
        h.append(pbatch(1, 0, 3))
    assert ei.value.error_code == 48 and "transaction ongoing since offset 3" in str(ei.value)
    assert h.psm.first_unstable_offset() == 3


def test_reused_sequence_of_an_ended_transaction_is_refused() -> None:
    """A transactional batch is a retry only of a batch of the same, still open transaction; matching a batch of
    a transaction that has ended (same epoch) it is a reused sequence: INVALID_TXN_STATE, not a duplicate."""
    h = Harness()
    h.append(pbatch(1, 0, 0, 2, txn=True))  # 0-1
    h.append(pbatch(1, 0, 2, 2, txn=True))  # 2-3: written, but its answer never reached the producer
    with pytest.raises(DuplicateSequenceError) as dup:  # a retry while the transaction is open
        h.append(pbatch(1, 0, 2, 2, txn=True))
    assert (dup.value.first_offset, dup.value.last_offset) == (2, 3)
    h.marker(1, 0, commit=False)  # 4: the producer aborted, and hands sequences 2..3 to its next transaction
    with pytest.raises(InvalidTxnStateError) as ei:
        h.append(pbatch(1, 0, 2, 2, txn=True))
    assert ei.value.error_code == 48 and ei.value.producer_id == 1
    assert "reused sequence" in str(ei.value) and "offsets 2..3" in str(ei.value)
    assert h.entry(1).current_txn_first_offset is None and h.leo == 5  # nothing written, no transaction started
    # the next transaction goes on in sequence; a retry of its own batch is a duplicate again, one of the
    # ended transaction's batches is not
    h.append(pbatch(1, 0, 4, txn=True))  # 5
    assert h.entry(1).current_txn_first_offset == 5
    with pytest.raises(DuplicateSequenceError):
        h.append(pbatch(1, 0, 4, txn=True))
    with pytest.raises(InvalidTxnStateError):
        h.append(pbatch(1, 0, 0, 2, txn=True))
    # an idempotent (non-transactional) producer's retries are duplicates as before
    h.append(pbatch(2, 0, 0, 2))
    with pytest.raises(DuplicateSequenceError):
        h.append(pbatch(2, 0, 0, 2))


def test_markers_end_transactions_and_lso() -> None:
    h = Harness()
    h.append(pbatch(1, 0, 0, txn=True))  # 0
    h.append(pbatch(2, 0, 0, 2, txn=True))  # 1-2
    h.append(plain())  # 3
    assert h.psm.first_unstable_offset() == 0
    m1 = h.marker(1, 0, commit=True)  # 4
    assert h.entry(1).current_txn_first_offset is None and h.entry(1).coordinator_epoch == 0
    assert h.psm.first_undecided_offset() == 1
    assert h.psm.first_unstable_offset() == 0  # committed, but the marker is not below the high watermark
    h.psm.on_high_watermark(m1)
    assert h.psm.first_unstable_offset() == 0
    h.psm.on_high_watermark(m1 + 1)
    assert h.psm.first_unstable_offset() == 1
    m2 = h.marker(2, 0, commit=False)  # 5
    assert h.aborted == [(2, 1, m2, m2 + 1)]
    h.psm.on_high_watermark(m2 + 1)
    assert h.psm.first_unstable_offset() is None
    # new transactions; batch metadata survives a same-epoch marker
    assert h.entry(2).last_seq == 1
    h.append(pbatch(2, 0, 2, txn=True))
    assert h.entry(2).current_txn_first_offset == 6


def test_abort_lso_is_next_other_ongoing_txn() -> None:
    h = Harness()
    h.append(pbatch(1, 0, 0, txn=True))  # 0
    h.append(pbatch(2, 0, 0, txn=True))  # 1
    h.append(pbatch(3, 0, 0, txn=True))  # 2
    m = h.marker(2, 0, commit=False)  # 3
    m1 = h.marker(1, 0, commit=False)  # 4
    m3 = h.marker(3, 0, commit=False)  # 5
    assert h.aborted == [(2, 1, m, 0), (1, 0, m1, 2), (3, 2, m3, m3 + 1)]


def test_marker_fencing_rules() -> None:
    h = Harness()
    h.append(pbatch(1, 5, 0, txn=True))
    h.marker(1, 5, commit=True, coordinator_epoch=3)
    with pytest.raises(TransactionCoordinatorFencedError) as ei:
        h.marker(1, 5, commit=True, coordinator_epoch=2)
    assert ei.value.error_code == 52 and "2 (zombie coordinator)" in str(ei.value)
    with pytest.raises(InvalidProducerEpochError):
        h.marker(1, 4, commit=False, coordinator_epoch=3)
    # a marker for a producer with nothing ongoing (or unknown) is fine and completes nothing
    h.marker(1, 5, commit=False, coordinator_epoch=3)
    h.marker(77, 0, commit=False, coordinator_epoch=0)
    assert not h.aborted and h.entry(77).producer_epoch == 0
    # a marker with a bumped epoch (TV2 style) clears the batch metadata, next epoch starts at 0
    h.marker(1, 6, commit=True, coordinator_epoch=3)
    assert h.entry(1).producer_epoch == 6 and h.entry(1).is_empty
    with pytest.raises(OutOfOrderSequenceError):
        h.append(pbatch(1, 6, 1))
    h.append(pbatch(1, 6, 0))


def test_complete_unknown_txn_raises() -> None:
    with pytest.raises(ValueError):
        ProducerStateManager("t-0").complete_txn(CompletedTxn(1, 5, 9, True))


def test_expire_keeps_ongoing_transactions() -> None:
    h = Harness()
    h.append(pbatch(1, 0, 0, ts=T0))
    h.append(pbatch(2, 0, 0, ts=T0, txn=True))
    h.append(pbatch(3, 0, 0, ts=T0 + 5000))
    assert h.psm.expire(T0 + 10_000, 10_000) == [1]
    assert sorted(h.psm.producers) == [2, 3]


def test_log_start_drops_producers_below_it() -> None:
    h = Harness()
    h.append(pbatch(1, 0, 0))  # 0
    h.append(pbatch(2, 0, 0, txn=True))  # 1
    h.append(pbatch(3, 0, 0, 2))  # 2-3
    h.append(pbatch(4, 0, 0, txn=True))  # 4: ongoing, kept even when the log start passes it
    h.marker(2, 0, commit=True)  # 5
    assert h.psm.on_log_start_offset(3) == [1, 2]  # 2's data is below 3 (only its marker is above)
    assert h.psm.on_log_start_offset(6) == [3]
    assert sorted(h.psm.producers) == [4] and h.psm.first_unstable_offset() == 4


# ====================================================================== snapshots
def test_snapshot_round_trip_and_corruption(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    for i in range(7):
        h.append(pbatch(1, 2, i))
    h.append(pbatch(2, 0, 0, 3, txn=True))
    h.marker(1, 2, commit=True, coordinator_epoch=4)
    h.append(pbatch(3, 1, 10, txn=True))
    path = h.psm.take_snapshot(h.leo)
    assert path is not None and path.name == snapshot_file_name(h.leo)
    assert h.psm.take_snapshot(h.leo) is None  # nothing new
    other = ProducerStateManager("t-0", tmp_path)
    assert other.load_latest_snapshot(h.leo) == h.leo
    assert other.state() == h.psm.state()
    assert other.first_undecided_offset() == 7
    # flip a byte: CRC fails, the file is deleted, loading finds nothing
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(data)
    with pytest.raises(CorruptSnapshotError):
        ProducerStateManager.deserialize(bytes(data))
    with pytest.raises(CorruptSnapshotError):
        ProducerStateManager.deserialize(bytes(data[:10]))
    third = ProducerStateManager("t-0", tmp_path)
    assert third.load_latest_snapshot(h.leo) is None and not third.producers
    assert not path.exists()


def test_snapshot_retention_keeps_two_and_recovery_base(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    for off in (10, 20, 30, 40, 50):
        h.append(pbatch(1, 0, off // 10))
        h.psm.take_snapshot(off, keep=(20,))
    assert h.psm.snapshot_offsets() == [20, 40, 50]
    h.psm.take_snapshot(60)
    assert h.psm.snapshot_offsets() == [50, 60]
    assert h.psm.load_latest_snapshot(55) == 50
    h.psm.delete_snapshots(above=55)
    assert h.psm.snapshot_offsets() == [50]
    assert h.psm.load_latest_snapshot(49) is None
