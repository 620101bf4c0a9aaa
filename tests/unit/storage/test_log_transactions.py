"""PartitionLog with producer state: idempotent appends, markers, LSO, aborted-txn index, snapshots, recovery."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from txn_helpers import T0, app, pbatch, plain

from oncelog.protocol.records import decode_records, iter_batch_headers, parse_control_record
from oncelog.storage import (
    AbortedTxn,
    DuplicateSequenceError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    LogConfig,
    OutOfOrderSequenceError,
    PartitionLog,
    TransactionCoordinatorFencedError,
)
from oncelog.storage.txn_index import ABORTED_TXN_SIZE
from oncelog.testing import MockClock


def open_log(path: Path, config: LogConfig | None = None, *, clean: bool = False) -> PartitionLog:
    return PartitionLog.open(path / "t-0", "t", 0, config or LogConfig(), MockClock(T0), clean_shutdown=clean)


def names(plog: PartitionLog, suffix: str) -> list[str]:
    return sorted(p.name for p in plog.directory.iterdir() if p.name.endswith(suffix))


# ====================================================================== append path
def test_idempotent_append_and_duplicate(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    app(plog, plain(2))
    r = app(plog, pbatch(1, 0, 0, 3))
    assert (r.first_offset, r.last_offset) == (2, 4)
    app(plog, pbatch(1, 0, 3, 1))
    with pytest.raises(DuplicateSequenceError) as ei:
        app(plog, pbatch(1, 0, 0, 3))
    assert (ei.value.first_offset, ei.value.last_offset) == (2, 4)
    assert plog.log_end_offset == 6  # nothing written
    with pytest.raises(OutOfOrderSequenceError):
        app(plog, pbatch(1, 0, 9))
    # one bad batch rejects the whole payload: nothing written, no state change
    before = plog.producer_state_manager.state()
    with pytest.raises(OutOfOrderSequenceError):
        app(plog, pbatch(2, 0, 0), plain(), pbatch(1, 0, 4), pbatch(3, 0, 0), pbatch(1, 0, 9))
    assert plog.log_end_offset == 6 and plog.producer_state_manager.state() == before
    app(plog, pbatch(1, 1, 0))  # epoch bump, sequence 0
    with pytest.raises(InvalidProducerEpochError):
        app(plog, pbatch(2, 0, 0), pbatch(1, 0, 4))
    assert plog.log_end_offset == 7 and 2 not in plog.producer_state_manager.producers
    [p] = plog.producer_states()
    assert (p.producer_id, p.producer_epoch, p.last_sequence, p.current_txn_start_offset) == (1, 1, 0, -1)
    plog.close()


def test_transactions_markers_lso_and_index(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    app(plog, plain())  # 0
    app(plog, pbatch(10, 0, 0, 2, txn=True))  # 1-2
    app(plog, pbatch(11, 0, 0, txn=True))  # 3
    assert plog.first_unstable_offset() == 1 and plog.last_stable_offset(4) == 1
    assert [(t.producer_id, t.first_offset) for t in plog.ongoing_transactions()] == [(10, 1), (11, 3)]
    with pytest.raises(InvalidTxnStateError):
        app(plog, pbatch(10, 0, 2))
    m = plog.append_marker(10, 0, False, 5, T0)  # 4: abort
    assert m.first_offset == m.last_offset == 4
    assert plog.first_unstable_offset() == 1  # aborted, but the marker is not below the high watermark yet
    assert plog.maybe_increment_high_watermark(5)
    assert plog.first_unstable_offset() == 3
    with pytest.raises(TransactionCoordinatorFencedError):
        plog.append_marker(10, 0, True, 4, T0)
    plog.append_marker(11, 0, True, 5, T0)  # 5: commit
    assert plog.first_unstable_offset() == 3
    assert plog.flush() == 6  # durable offset releases completed transactions too
    assert plog.first_unstable_offset() is None and plog.last_stable_offset(6) == 6
    assert plog.collect_aborted_txns(0, 6) == [AbortedTxn(10, 1, 4, 3)]
    raw = (plog.directory / "00000000000000000000.txnindex").read_bytes()
    assert raw == AbortedTxn(10, 1, 4, 3).to_bytes() and len(raw) == ABORTED_TXN_SIZE
    # the marker batch is a proper control batch
    res = plog.read(4, 1 << 20, 5)
    cr = parse_control_record(bytes(res.records[0]))
    assert not cr.commit and cr.coordinator_epoch == 5
    # a marker for a producer with no ongoing transaction is written and completes nothing
    plog.append_marker(12, 0, False, 0, T0)
    assert plog.collect_aborted_txns(0, 100) == [AbortedTxn(10, 1, 4, 3)]
    plog.close()


def read_committed(plog: PartitionLog, start: int, end: int) -> list[int]:
    """A READ_COMMITTED consumer over [start, end): Kafka's consumer-side filtering with the aborted list."""
    aborted = sorted(plog.collect_aborted_txns(start, end), key=lambda t: t.first_offset)
    data = b""
    pos = start
    while pos < end:  # a read stays inside one segment
        res = plog.read(pos, 1 << 20, end)
        chunk = b"".join(bytes(r) for r in res.records)
        data += chunk
        pos = list(iter_batch_headers(chunk))[-1].next_offset
    out: list[int] = []
    aborting: set[int] = set()
    for h in iter_batch_headers(data):
        while aborted and aborted[0].first_offset <= h.last_offset:
            aborting.add(aborted.pop(0).producer_id)
        if h.is_control:
            if h.producer_id in aborting and not parse_control_record(data, h.position).commit:
                aborting.discard(h.producer_id)
            continue
        if h.is_transactional and h.producer_id in aborting:
            continue
        out.extend(r.offset for r in decode_records(data, h.position) if r.offset >= start)
    return out


def test_three_interleaved_aborted_transactions(tmp_path: Path) -> None:
    """Three interleaved producers, all aborted: (10, 101, 115), (11, 103, 106), (12, 104, 111) over offsets
    100-115 leave 100, 105, 109, 110, 112, 113, 114 visible to a READ_COMMITTED consumer."""
    plog = open_log(tmp_path, LogConfig(segment_bytes=700))
    app(plog, plain(100))
    seqs = {10: 0, 11: 0, 12: 0}

    def tx(pid: int) -> None:
        app(plog, pbatch(pid, 0, seqs[pid], txn=True))
        seqs[pid] += 1

    app(plog, plain())  # 100
    for pid in (10, 10, 11, 12):  # 101-104
        tx(pid)
    app(plog, plain())  # 105
    plog.append_marker(11, 0, False, 0, T0)  # 106
    for pid in (10, 10):  # 107-108
        tx(pid)
    app(plog, plain()), app(plog, plain())  # 109-110
    plog.append_marker(12, 0, False, 0, T0)  # 111
    app(plog, plain()), app(plog, plain()), app(plog, plain())  # 112-114
    plog.append_marker(10, 0, False, 0, T0)  # 115
    assert len(plog.segments) > 1
    assert plog.collect_aborted_txns(100, 116) == [AbortedTxn(11, 103, 106, 101), AbortedTxn(12, 104, 111, 101),
                                                   AbortedTxn(10, 101, 115, 116)]
    assert read_committed(plog, 100, 116) == [100, 105, 109, 110, 112, 113, 114]
    assert plog.collect_aborted_txns(112, 113) == [AbortedTxn(10, 101, 115, 116)]
    assert plog.collect_aborted_txns(0, 100) == []
    plog.close()


# ====================================================================== snapshots / recovery
def test_snapshots_at_roll_and_close(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    app(plog, pbatch(1, 0, 0, txn=True))
    for seq in range(1, 5):
        app(plog, pbatch(1, 0, seq, txn=True))
        plog.roll()
    assert names(plog, ".snapshot") == ["00000000000000000004.snapshot", "00000000000000000005.snapshot"]
    plog.flush()  # recovery point 5: the newest snapshot at or below it is kept for crash recovery
    for seq in range(5, 7):
        app(plog, pbatch(1, 0, seq, txn=True))
        plog.roll()
    assert [n[:20] for n in names(plog, ".snapshot")] == ["00000000000000000005", "00000000000000000006",
                                                          "00000000000000000007"]
    app(plog, pbatch(1, 0, 7, txn=True))
    state = plog.producer_state_manager.state()
    plog.close()
    assert names(plog, ".snapshot")[-1] == "00000000000000000008.snapshot"
    plog = open_log(tmp_path, clean=True)
    assert plog.producer_state_manager.state() == state
    assert plog.first_unstable_offset() == 0
    with pytest.raises(DuplicateSequenceError) as ei:  # the last 5 batches survive the restart
        app(plog, pbatch(1, 0, 3, txn=True))
    assert ei.value.first_offset == 3
    with pytest.raises(OutOfOrderSequenceError):
        app(plog, pbatch(1, 0, 2, txn=True))
    plog.close()


def test_corrupt_snapshot_is_skipped_and_index_rebuilt(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    app(plog, pbatch(1, 0, 0, txn=True))
    app(plog, pbatch(2, 0, 0, txn=True))
    plog.roll()
    plog.append_marker(1, 0, False, 0, T0)
    app(plog, pbatch(2, 0, 1, txn=True))
    plog.append_marker(2, 0, False, 0, T0)
    state = plog.producer_state_manager.state()
    aborted = plog.collect_aborted_txns(0, 100)
    assert aborted == [AbortedTxn(1, 0, 2, 1), AbortedTxn(2, 1, 4, 5)]
    plog.close()
    snaps = names(plog, ".snapshot")
    (plog.directory / snaps[-1]).write_bytes(b"garbage")
    (plog.directory / "00000000000000000002.txnindex").unlink()
    plog = open_log(tmp_path, clean=True)
    assert plog.producer_state_manager.state() == state
    assert plog.collect_aborted_txns(0, 100) == aborted
    assert (plog.directory / "00000000000000000002.txnindex").stat().st_size == 2 * ABORTED_TXN_SIZE
    plog.close()
    # no snapshot at all and no txn indexes (an old log): everything is rebuilt from the log
    for p in plog.directory.iterdir():
        if p.suffix in (".snapshot", ".txnindex"):
            p.unlink()
    plog = open_log(tmp_path, clean=True)
    assert plog.producer_state_manager.state() == state
    assert plog.collect_aborted_txns(0, 100) == aborted
    plog.close()


def test_crash_with_torn_tail_rebuilds_state_of_kept_prefix(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    app(plog, pbatch(1, 0, 0, 2))
    app(plog, pbatch(2, 0, 0, txn=True))
    plog.roll()
    app(plog, pbatch(1, 0, 2))
    plog.flush()
    kept_state = plog.producer_state_manager.state()
    kept_end = plog.log_end_offset
    size_at_flush = plog.active_segment.size
    plog.append_marker(2, 0, False, 0, T0)
    app(plog, pbatch(1, 0, 3))
    seg = plog.active_segment.log_path
    plog.close_without_flush()
    with open(seg, "r+b") as f:
        f.truncate(os.path.getsize(seg) - 3)  # tear the last batch ... and drop the marker too
        f.truncate(size_at_flush + 5)
    plog = open_log(tmp_path)
    assert plog.log_end_offset == kept_end
    assert plog.producer_state_manager.state() == kept_state
    assert plog.first_unstable_offset() == 2
    assert plog.collect_aborted_txns(0, 100) == []
    app(plog, pbatch(1, 0, 3))  # sequences continue from the kept prefix
    plog.close()


def test_delete_records_and_expiry(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    app(plog, pbatch(1, 0, 0))  # 0
    app(plog, pbatch(2, 0, 0, ts=T0 + 10))  # 1
    app(plog, pbatch(3, 0, 0, txn=True))  # 2
    plog.roll()
    plog.delete_records_before(2)
    assert sorted(p.producer_id for p in plog.producer_states()) == [3]
    app(plog, pbatch(1, 0, 7))  # unknown again: accepted at any sequence
    assert plog.expire_producers(T0 + 1000, 500) == [1]
    assert sorted(p.producer_id for p in plog.producer_states()) == [3]
    plog.close()


def test_txnindex_deleted_with_segment(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    app(plog, pbatch(1, 0, 0, txn=True))
    plog.append_marker(1, 0, False, 0, T0)
    plog.roll()
    app(plog, plain())
    assert "00000000000000000000.txnindex" in names(plog, ".txnindex")
    plog.delete_records_before(2)
    assert names(plog, ".txnindex") == ["00000000000000000002.txnindex"]
    assert plog.collect_aborted_txns(2, 3) == []
    plog.close()


# ====================================================================== property test
PIDS = (1, 2, 3)
CFG = LogConfig(segment_bytes=900, index_interval_bytes=150, retention_ms=-1)


class TxnLogModel(RuleBasedStateMachine):
    """Random idempotent/transactional batches from several producers, markers, duplicates, gaps, rolls,
    flushes, clean reopens and crashes with torn tails. After every reopen the state rebuilt from snapshot +
    replay must equal the live state recorded at the recovered log end, and the aborted list must equal a
    simple model's."""

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="oncelog-txn-model-"))
        self.log = PartitionLog.open(self.root / "t-0", "t", 0, CFG, MockClock(T0), clean_shutdown=False)
        self.leo = 0
        self.seq = dict.fromkeys(PIDS, 0)
        self.epoch = dict.fromkeys(PIDS, 0)
        self.ongoing: dict[int, int] = {}  # pid -> first offset
        self.aborted: list[AbortedTxn] = []
        self.last: dict[int, tuple[bytes, int, int]] = {}  # pid -> (batch, first, last offset)
        self.log_epoch: dict[int, int] = {}  # pid -> epoch of its last batch or marker in the log
        self.history: dict[int, tuple[object, dict[int, int], dict[int, int], dict[int, int], dict[int, int],
                                      dict[int, tuple[bytes, int, int]]]] = {}
        self.ts = T0
        self.record()

    def teardown(self) -> None:
        self.log.close_without_flush()
        shutil.rmtree(self.root, ignore_errors=True)

    def record(self) -> None:
        self.history[self.leo] = (self.log.producer_state_manager.state(), dict(self.seq), dict(self.epoch),
                                  dict(self.ongoing), dict(self.log_epoch), dict(self.last))

    def _append(self, b: bytes) -> tuple[int, int]:
        r = app(self.log, b)
        assert r.first_offset == self.leo
        self.leo = r.last_offset + 1
        return r.first_offset, r.last_offset

    @rule(pid=st.sampled_from(PIDS), n=st.integers(1, 3), txn=st.booleans())
    def produce(self, pid: int, n: int, txn: bool) -> None:
        self.ts += 1
        b = pbatch(pid, self.epoch[pid], self.seq[pid], n, txn=txn, ts=self.ts)
        if pid in self.ongoing and not txn:
            with pytest.raises(InvalidTxnStateError):
                app(self.log, b)
            return
        first, last = self._append(b)
        self.seq[pid] = (self.seq[pid] + n) & 0x7FFFFFFF
        self.last[pid] = (b, first, last)
        self.log_epoch[pid] = self.epoch[pid]
        if txn and pid not in self.ongoing:
            self.ongoing[pid] = first
        self.record()

    @rule(pid=st.sampled_from(PIDS))
    def retry_last(self, pid: int) -> None:
        if pid not in self.last:
            return
        b, first, last = self.last[pid]
        header = iter_batch_headers(b).__next__()
        if header.producer_epoch < self.log_epoch[pid]:
            with pytest.raises(InvalidProducerEpochError):  # fenced by a marker of a newer epoch
                app(self.log, b)
            return
        if header.is_transactional and self.ongoing.get(pid, last + 1) > first:
            # its transaction has ended (no transaction open, or one that began after it): a reused sequence,
            # not a retry (the sequence-reuse defence, producer_state.find_duplicate)
            with pytest.raises(InvalidTxnStateError):
                app(self.log, b)
            return
        with pytest.raises(DuplicateSequenceError) as ei:
            app(self.log, b)
        assert (ei.value.first_offset, ei.value.last_offset) == (first, last)

    @rule(pid=st.sampled_from(PIDS), gap=st.integers(1, 5))
    def gap(self, pid: int, gap: int) -> None:
        if pid not in self.last:
            return
        with pytest.raises(OutOfOrderSequenceError):
            app(self.log, pbatch(pid, self.epoch[pid], self.seq[pid] + gap, txn=pid in self.ongoing))

    @rule(pid=st.sampled_from(PIDS))
    def bump_epoch(self, pid: int) -> None:
        if pid in self.ongoing:
            return
        self.epoch[pid] += 1
        self.seq[pid] = 0

    @rule(pid=st.sampled_from(PIDS), commit=st.booleans())
    def marker(self, pid: int, commit: bool) -> None:
        if pid in self.ongoing:
            others = [f for p, f in self.ongoing.items() if p != pid]
            lso = min(others) if others else self.leo + 1
            if not commit:
                self.aborted.append(AbortedTxn(pid, self.ongoing[pid], self.leo, lso))
            del self.ongoing[pid]
        self.ts += 1
        self.log.append_marker(pid, self.epoch[pid], commit, 0, self.ts)
        self.log_epoch[pid] = self.epoch[pid]
        self.leo += 1
        self.record()

    @rule()
    def plain_batch(self) -> None:
        self._append(plain(2))
        self.record()

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule()
    def flush(self) -> None:
        assert self.log.flush() == self.leo
        assert self.log.first_unstable_offset() == min(self.ongoing.values(), default=None)

    @rule()
    def reopen_clean(self) -> None:
        self.log.close()
        self.log = PartitionLog.open(self.root / "t-0", "t", 0, CFG, MockClock(T0), clean_shutdown=True)
        self.check_reloaded()

    @precondition(lambda self: self.leo > 0)
    @rule(data=st.data())
    def crash(self, data: st.DataObject) -> None:
        seg = self.log.active_segment
        path, size = seg.log_path, seg.size
        self.log.close_without_flush()
        cut = data.draw(st.integers(0, size), label="cut")
        with open(path, "r+b") as f:
            f.truncate(cut)
        self.log = PartitionLog.open(self.root / "t-0", "t", 0, CFG, MockClock(T0), clean_shutdown=False)
        new_leo = self.log.log_end_offset
        assert new_leo in self.history, (new_leo, sorted(self.history))
        self.leo = new_leo
        _, seq, epoch, ongoing, log_epoch, last = self.history[new_leo]
        self.seq, self.epoch, self.ongoing, self.log_epoch = dict(seq), dict(epoch), dict(ongoing), dict(log_epoch)
        self.last = dict(last)
        self.history = {k: v for k, v in self.history.items() if k <= new_leo}
        self.aborted = [t for t in self.aborted if t.last_offset < new_leo]
        self.check_reloaded()

    def check_reloaded(self) -> None:
        assert self.log.log_end_offset == self.leo
        assert self.log.producer_state_manager.state() == self.history[self.leo][0]
        assert self.log.first_unstable_offset() == min(self.ongoing.values(), default=None)

    @invariant()
    def aborted_list(self) -> None:
        assert self.log.collect_aborted_txns(0, self.leo + 1) == self.aborted
        assert self.log.producer_state_manager.state() == self.history[self.leo][0]


TxnLogModel.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None,
                                         suppress_health_check=[HealthCheck.too_slow])
TestTxnLogModel = TxnLogModel.TestCase
