"""The partition-log interface a replica uses, against real files: follower appends, leader epochs, truncation
(KIP-101/KIP-279), the high watermark set from outside, and crashes in the middle of a truncation."""

from __future__ import annotations

from pathlib import Path

import pytest
from txn_helpers import T0, app, pbatch, plain

from oncelog.protocol.records import (
    BatchHeader,
    RecordBatchBuilder,
    build_control_batch,
    iter_batch_headers,
)
from oncelog.storage import LogConfig, OutOfOrderSequenceError, PartitionLog
from oncelog.storage.errors import UnexpectedAppendOffsetError
from oncelog.storage.interface import BrokerLog, HighWatermarkRule, ReplicaLog
from oncelog.storage.leader_epoch import LEADER_EPOCH_CHECKPOINT, LeaderEpochCache
from oncelog.testing import MockClock

SMALL = LogConfig(segment_bytes=300, index_interval_bytes=100)


def open_log(path: Path, name: str = "t-0", config: LogConfig = SMALL, *, clean: bool = False,
             high_watermark: int | None = None) -> PartitionLog:
    topic, _, part = name.rpartition("-")
    return PartitionLog.open(path / name, topic, int(part), config, MockClock(T0), clean_shutdown=clean,
                             high_watermark=high_watermark)


def reopen(plog: PartitionLog, *, clean: bool) -> PartitionLog:
    if clean:
        plog.close()
    else:
        plog.close_without_flush()  # a crash: no clean-shutdown marker, nothing flushed
    return PartitionLog.open(plog.directory, plog.topic, plog.partition, plog.config, MockClock(T0),
                             clean_shutdown=clean)


def batches(plog: PartitionLog, start: int = 0) -> list[bytes]:
    return [data for _, data in plog.iter_batches(start)]


def epochs(plog: PartitionLog) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in plog.leader_epoch_cache.entries()]


def as_payload(*data: bytes) -> tuple[bytearray, list[BatchHeader]]:
    buf = bytearray(b"".join(data))
    return buf, list(iter_batch_headers(buf, check_crc=True))


def follow(follower: PartitionLog, *data: bytes) -> None:
    follower.append_as_follower(*as_payload(*data))


def replicate(leader: PartitionLog, follower: PartitionLog, upto: int | None = None) -> None:
    """What a replica fetcher does: the leader's batches from the follower's log end, as they are (only the
    batches wholly below ``upto`` if given)."""
    end = leader.log_end_offset if upto is None else upto
    for h, data in leader.iter_batches(follower.log_end_offset):
        if h.last_offset >= end:
            break
        follow(follower, data)


def leader_history(tmp_path: Path) -> PartitionLog:
    """A leader log over three epochs and several segments: plain and idempotent batches, transactions committed
    and aborted, a marker in each epoch."""
    ld = open_log(tmp_path / "leader", "t-0")
    ld.assign_leader_epoch(1, 0)
    app(ld, plain(3), leader_epoch=1)                          # 0-2
    app(ld, pbatch(7, 0, 0, 2), leader_epoch=1)                # 3-4
    app(ld, pbatch(8, 0, 0, 2, txn=True), leader_epoch=1)      # 5-6  txn of 8
    ld.append_marker(8, 0, False, 1, T0, leader_epoch=1)       # 7    abort
    ld.assign_leader_epoch(2, ld.log_end_offset)
    app(ld, pbatch(7, 0, 2, 3), leader_epoch=2)                # 8-10
    app(ld, pbatch(9, 0, 0, 1, txn=True), leader_epoch=2)      # 11   txn of 9
    app(ld, plain(4), leader_epoch=2)                          # 12-15
    ld.append_marker(9, 0, True, 1, T0, leader_epoch=2)        # 16   commit
    ld.assign_leader_epoch(4, ld.log_end_offset)
    app(ld, pbatch(8, 1, 0, 2, txn=True), leader_epoch=4)      # 17-18 txn of 8, epoch 1
    app(ld, pbatch(7, 0, 5, 2), leader_epoch=4)                # 19-20
    ld.append_marker(8, 1, False, 2, T0, leader_epoch=4)       # 21   abort
    app(ld, plain(2), leader_epoch=4)                          # 22-23
    return ld


def state(plog: PartitionLog) -> tuple[object, ...]:
    """Everything a truncation must leave consistent, comparable between two logs (whatever their high
    watermarks: the first undecided offset, not the first unstable one)."""
    return (plog.log_start_offset, plog.log_end_offset, batches(plog), plog.producer_state_manager.state(),
            plog.collect_aborted_txns(0, plog.log_end_offset), epochs(plog),
            plog.producer_state_manager.first_undecided_offset())


# ====================================================================== the interface
def test_partition_log_satisfies_the_protocols(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    replica: ReplicaLog = plog
    served: BrokerLog = plog
    assert replica.log_end_offset == served.log_end_offset == 0


# ====================================================================== leader appends and epochs
def test_leader_append_stamps_the_epoch_and_records_it(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    app(plog, plain(2), leader_epoch=3)
    app(plog, plain(1))  # no epoch given: the batch keeps its own (-1), the cache is unchanged
    app(plog, plain(1), plain(2), leader_epoch=5)
    plog.append_marker(1, 0, True, 0, T0, leader_epoch=5)
    assert [h.partition_leader_epoch for h, _ in plog.iter_batches()] == [3, -1, 5, 5, 5]
    assert epochs(plog) == [(3, 0), (5, 3)]
    assert plog.latest_epoch == 5
    assert plog.end_offset_for_epoch(5) == (5, plog.log_end_offset)
    assert plog.end_offset_for_epoch(4) == (3, 3)
    assert plog.end_offset_for_epoch(9) == (-1, -1)
    for clean in (True, False):
        plog = reopen(plog, clean=clean)
        assert epochs(plog) == [(3, 0), (5, 3)]


def test_epoch_cache_rebuilt_from_batch_headers_when_missing_or_corrupt(tmp_path: Path) -> None:
    ld = leader_history(tmp_path)
    expected = epochs(ld)
    assert expected == [(1, 0), (2, 8), (4, 17)]
    for damage in ("missing", "corrupt"):
        path = ld.directory / LEADER_EPOCH_CHECKPOINT
        ld.close()
        if damage == "missing":
            path.unlink()
        else:
            path.write_text("0\n3\n1 0\n")
        ld = PartitionLog.open(ld.directory, "t", 0, SMALL, MockClock(T0), clean_shutdown=True)
        assert epochs(ld) == expected
        assert path.read_text() == "0\n3\n1 0\n2 8\n4 17\n"


def test_an_epoch_recorded_past_the_log_end_is_dropped_on_load(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    app(plog, plain(2), leader_epoch=1)
    plog.flush()
    plog.assign_leader_epoch(2, plog.log_end_offset)  # a new leader's entry, then a crash before any append
    app(plog, plain(1), leader_epoch=2)
    plog.active_segment.log_path.open("r+b").truncate(plog.active_segment.size - 5)  # the append is torn
    plog = reopen(plog, clean=False)
    assert plog.log_end_offset == 2 and epochs(plog) == [(1, 0)]


@pytest.mark.parametrize("clean", [True, False])
def test_a_new_leaders_epoch_not_yet_written_survives_a_restart_with_its_records(tmp_path: Path, clean: bool) -> None:
    """A new leader's epoch is written to the checkpoint at the next flush, not as it takes over: a crash before
    that flush loses no epoch of a record (recovery reads it from the batches past the recovery point), and a
    clean shutdown flushes it."""
    plog = open_log(tmp_path)
    app(plog, plain(2), leader_epoch=1)
    plog.flush()
    plog.assign_leader_epoch(2, plog.log_end_offset)
    app(plog, plain(3), leader_epoch=2)
    assert LeaderEpochCache.load(plog.directory / LEADER_EPOCH_CHECKPOINT, "t-0").latest_epoch == 1  # not written
    plog = reopen(plog, clean=clean)
    assert plog.log_end_offset == 5 and epochs(plog) == [(1, 0), (2, 2)]
    assert plog.end_offset_for_epoch(1) == (1, 2)


def test_log_start_moves_truncate_the_epoch_cache_from_the_start(tmp_path: Path) -> None:
    ld = leader_history(tmp_path)
    ld.delete_records_before(10)
    assert epochs(ld) == [(2, 10), (4, 17)]
    assert epochs(reopen(ld, clean=False)) == [(2, 10), (4, 17)]


# ====================================================================== follower appends
def test_follower_append_keeps_offsets_epochs_and_bytes(tmp_path: Path) -> None:
    ld = leader_history(tmp_path)
    fo = open_log(tmp_path / "follower", "t-0")
    fo.high_watermark_rule = HighWatermarkRule.EXTERNAL
    replicate(ld, fo)
    assert batches(fo) == batches(ld)
    assert state(fo)[1:] == state(ld)[1:]
    assert len(fo.segments) > 2 and fo.high_watermark == 0
    for clean in (True, False):
        fo = reopen(fo, clean=clean)
        assert state(fo)[1:] == state(ld)[1:]


def test_follower_append_has_replication_semantics(tmp_path: Path) -> None:
    """No sequence validation (the leader did it), transactions and markers applied; the state it leaves lets a
    later leader append continue the producer's sequence (a failover)."""
    fo = open_log(tmp_path)
    gap = RecordBatchBuilder(producer_id=7, producer_epoch=0, base_sequence=9, base_offset=1)
    gap.append(T0, b"k", b"v")
    gap.append(T0, b"k", b"w")
    follow(fo, plain(1), gap.build())  # sequence 9 first: a leader would answer OUT_OF_ORDER_SEQUENCE
    b = RecordBatchBuilder(producer_id=5, producer_epoch=0, base_sequence=0, is_transactional=True, base_offset=3,
                           partition_leader_epoch=2)
    b.append(T0, b"k", b"v")
    follow(fo, b.build(), build_control_batch(producer_id=5, producer_epoch=0, commit=False, coordinator_epoch=3,
                                              timestamp_ms=T0, base_offset=4, partition_leader_epoch=2))
    assert fo.log_end_offset == 5
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in fo.collect_aborted_txns(0, 5)] == [(5, 3, 4)]
    assert fo.producer_states()[0].last_sequence == 10
    assert epochs(fo) == [(2, 3)]
    with pytest.raises(OutOfOrderSequenceError):  # as leader now: sequences are checked again
        app(fo, pbatch(7, 0, 12))
    assert app(fo, pbatch(7, 0, 11), leader_epoch=3).first_offset == 5
    assert epochs(fo) == [(2, 3), (3, 5)]


def test_follower_append_must_continue_the_log(tmp_path: Path) -> None:
    fo = open_log(tmp_path)
    follow(fo, _at(0, 2))
    size = fo.size_in_bytes
    for data in ([_at(1, 1)], [_at(2, 2), _at(3, 1)], [_at(5, 1), _at(5, 1)]):
        with pytest.raises(UnexpectedAppendOffsetError):
            follow(fo, *data)
        assert fo.log_end_offset == 2 and fo.size_in_bytes == size  # nothing written
    follow(fo, _at(7, 2))  # a gap (the leader's log is compacted) is fine
    assert fo.log_end_offset == 9 and [h.base_offset for h, _ in fo.iter_batches()] == [0, 7]
    fo = reopen(fo, clean=False)
    assert fo.log_end_offset == 9


def _at(base: int, n: int, epoch: int = 0) -> bytes:
    b = RecordBatchBuilder(base_offset=base, partition_leader_epoch=epoch)
    for i in range(n):
        b.append(T0 + i, b"k", b"v%d" % (base + i))
    return b.build()


def test_follower_append_far_past_an_empty_segment_starts_a_new_one(tmp_path: Path) -> None:
    fo = open_log(tmp_path)
    far = 2**31 + 10
    follow(fo, _at(far, 3))
    assert fo.segments[-1].base_offset == far and fo.log_end_offset == far + 3
    follow(fo, _at(far + 2**31 + 5, 1))  # and past a non-empty one: rolled there
    assert fo.segments[-1].base_offset == far + 2**31 + 5
    assert reopen(fo, clean=False).log_end_offset == far + 2**31 + 6


# ====================================================================== truncation
@pytest.mark.parametrize("target", [0, 1, 5, 7, 8, 9, 12, 16, 17, 20, 23])
def test_truncate_to_matches_a_log_that_only_ever_had_the_prefix(tmp_path: Path, target: int) -> None:
    ld = leader_history(tmp_path)
    full = open_log(tmp_path / "full", "t-0")
    replicate(ld, full)
    full.take_producer_snapshot()  # snapshots at several offsets, some above the target
    full.roll()
    assert full.truncate_to(target)
    ref = open_log(tmp_path / "ref", "t-0")
    replicate(ld, ref, upto=target)
    new_end = ref.log_end_offset
    assert full.log_end_offset == new_end <= target
    assert state(full) == state(ref)
    d = full.directory
    for p in d.iterdir():  # no file of a segment or snapshot above the new end survives
        base = p.name.split(".")[0]
        if base.isdigit() and len(base) == 20:
            assert int(base) <= new_end, p.name
    assert sum(p.stat().st_size for p in d.glob("*.log")) == sum(len(b) for b in batches(ref))
    for clean in (True, False):
        full = reopen(full, clean=clean)
        assert state(full) == state(ref)
    replicate(ld, full)  # and the follower catches up again
    assert state(full)[1:] == state(ld)[1:]


def test_truncate_to_a_straddled_batch_removes_it_whole(tmp_path: Path) -> None:
    fo = open_log(tmp_path)
    follow(fo, _at(0, 3), _at(3, 5))
    assert fo.truncate_to(5)
    assert fo.log_end_offset == 3 and [h.base_offset for h, _ in fo.iter_batches()] == [0]


def test_truncate_at_or_past_the_end_only_drops_epochs_beyond_it(tmp_path: Path) -> None:
    fo = open_log(tmp_path)
    follow(fo, _at(0, 3, epoch=1))
    fo.assign_leader_epoch(2, 3)  # a leader that took over at 3 and wrote nothing before losing the lead
    assert not fo.truncate_to(10) and epochs(fo) == [(1, 0)]
    assert fo.log_end_offset == 3


def test_truncate_lowers_the_high_watermark_and_keeps_a_transaction_unstable(tmp_path: Path) -> None:
    fo = open_log(tmp_path)
    fo.high_watermark_rule = HighWatermarkRule.EXTERNAL
    follow(fo, _at(0, 2), _txn_at(2), _at(3, 2))
    assert fo.update_high_watermark(5) == 5
    assert fo.first_unstable_offset() == 2
    fo.truncate_to(4)
    assert fo.high_watermark == 3 and fo.log_end_offset == 3 and fo.first_unstable_offset() == 2


def _txn_at(base: int) -> bytes:
    b = RecordBatchBuilder(producer_id=5, producer_epoch=0, base_sequence=0, is_transactional=True, base_offset=base)
    b.append(T0, b"k", b"v")
    return b.build()


def test_truncate_below_the_first_segment_empties_the_log(tmp_path: Path) -> None:
    ld = leader_history(tmp_path)
    ld.delete_records_before(12)
    assert ld.log_start_offset == 12
    assert ld.truncate_to(4)
    assert (ld.log_start_offset, ld.log_end_offset, batches(ld), epochs(ld)) == (4, 4, [], [])


def test_truncate_fully_and_start_at(tmp_path: Path) -> None:
    fo = leader_history(tmp_path)
    fo.truncate_fully_and_start_at(100)
    empty = (100, 100, [], ({}, []), [], [], None)
    assert state(fo) == empty and fo.high_watermark == 100
    assert not list(fo.directory.glob("*.snapshot"))
    for clean in (True, False):
        fo = reopen(fo, clean=clean)
        assert state(fo) == empty
    follow(fo, _at(100, 2, epoch=6))
    assert (fo.log_end_offset, epochs(fo)) == (102, [(6, 100)])
    with pytest.raises(UnexpectedAppendOffsetError):
        follow(fo, _at(50, 1))


# ====================================================================== crash in the middle of a truncation
class Crash(Exception):
    pass


TRUNCATE_STEPS = ["checkpoint", "segments_deleted", "segment_truncated", "epochs"]


@pytest.mark.parametrize("step", TRUNCATE_STEPS)
@pytest.mark.parametrize("target", [3, 9, 18])
def test_crash_in_the_middle_of_truncate_to_leaves_a_log_that_loads(tmp_path: Path, step: str,
                                                                    target: int) -> None:
    ld = leader_history(tmp_path)
    fo = open_log(tmp_path / "follower", "t-0")
    replicate(ld, fo)
    fo.flush()

    def crash(at: str) -> None:
        if at == step:
            raise Crash(at)

    fo.fault = crash
    with pytest.raises(Crash):
        fo.truncate_to(target)
    fo = reopen(fo, clean=False)
    end = fo.log_end_offset
    ref = open_log(tmp_path / f"ref-{end}", "t-0")
    replicate(ld, ref, upto=end)
    assert end == ref.log_end_offset and end <= ld.log_end_offset
    assert state(fo) == state(ref)  # a prefix of the old log, whole and consistent
    fo.truncate_to(target)  # the follower truncates again and catches up
    replicate(ld, fo)
    assert state(fo)[1:] == state(ld)[1:]


@pytest.mark.parametrize("step", ["snapshots_deleted", "segments_deleted", "epochs"])
def test_crash_in_the_middle_of_truncate_fully_leaves_a_log_that_loads(tmp_path: Path, step: str) -> None:
    ld = leader_history(tmp_path)
    fo = open_log(tmp_path / "follower", "t-0")
    replicate(ld, fo)
    fo.take_producer_snapshot()
    fo.flush()

    def crash(at: str) -> None:
        if at == step:
            raise Crash(at)

    fo.fault = crash
    with pytest.raises(Crash):
        fo.truncate_fully_and_start_at(40)
    fo = reopen(fo, clean=False)
    start, end = fo.log_start_offset, fo.log_end_offset
    if end > start:  # the old log, whole: the crash came before any segment was deleted
        assert state(fo)[1:] == state(ld)[1:]
    else:
        assert batches(fo) == [] and fo.producer_state_manager.state() == ({}, [])
        assert all(s <= end for _, s in epochs(fo))
    fo.truncate_fully_and_start_at(40)
    assert state(fo) == (40, 40, [], ({}, []), [], [], None)


# ====================================================================== high watermark
def test_high_watermark_rules(tmp_path: Path) -> None:
    plog = open_log(tmp_path)  # DURABLE by default: flush moves it
    app(plog, plain(2))
    assert plog.high_watermark == 0
    plog.flush()
    assert plog.high_watermark == 2
    plog.high_watermark_rule = HighWatermarkRule.LOG_END
    app(plog, plain(3))
    assert plog.high_watermark == 5
    plog.high_watermark_rule = HighWatermarkRule.EXTERNAL
    app(plog, plain(1))
    plog.flush()
    assert plog.high_watermark == 5
    assert plog.maybe_increment_high_watermark(6) and not plog.maybe_increment_high_watermark(6)
    with pytest.raises(ValueError):
        plog.maybe_increment_high_watermark(7)
    assert plog.update_high_watermark(1) == 1  # a follower may be told a lower one
    assert plog.update_high_watermark(99) == 6  # bounded by the log end
    plog.delete_records_before(3)
    assert plog.update_high_watermark(0) == 3  # and by the log start


def test_high_watermark_holds_a_completed_transaction_unstable_until_it_passes_the_marker(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.high_watermark_rule = HighWatermarkRule.EXTERNAL
    app(plog, pbatch(4, 0, 0, 2, txn=True))
    plog.append_marker(4, 0, True, 0, T0)
    plog.flush()
    assert plog.first_unstable_offset() == 0  # committed, but the marker (2) is not below the HW
    plog.maybe_increment_high_watermark(2)
    assert plog.last_stable_offset(plog.high_watermark) == 0
    plog.maybe_increment_high_watermark(3)
    assert plog.first_unstable_offset() is None and plog.last_stable_offset(plog.high_watermark) == 3
    # reopened with a replica's checkpointed high watermark below the marker: unstable again
    plog.close_without_flush()
    for snap in plog.directory.glob("*.snapshot"):
        snap.unlink()
    again = PartitionLog.open(plog.directory, "t", 0, SMALL, MockClock(T0), clean_shutdown=False,
                              high_watermark=2)
    assert again.high_watermark == 2 and again.first_unstable_offset() == 0
    assert again.maybe_increment_high_watermark(3) and again.first_unstable_offset() is None
