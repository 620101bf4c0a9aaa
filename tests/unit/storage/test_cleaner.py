"""Log cleaner (compaction): key retention, offsets, tombstones, transactions, producer state, crash safety."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oncelog.protocol.records import (
    ATTR_DELETE_HORIZON,
    BatchHeader,
    Compression,
    RecordBatchBuilder,
    decode_records,
    iter_batch_headers,
    parse_control_record,
)
from oncelog.storage import DuplicateSequenceError, LogConfig, PartitionLog
from oncelog.storage.cleaner import CLEANER_CHECKPOINT, CleanStats, LogCleaner
from oncelog.testing import MockClock

T0 = 1_700_000_000_000
DAY = 24 * 3600 * 1000


# ==================================================================== helpers
def cfg(**kw: object) -> LogConfig:
    base: dict[str, object] = {"cleanup_policy": "compact", "segment_bytes": 1024, "min_cleanable_dirty_ratio": 0.01,
                               "index_interval_bytes": 128}
    base.update(kw)
    return LogConfig(**base)  # type: ignore[arg-type]


def open_log(path: Path, config: LogConfig, clock: MockClock, *, clean: bool = False) -> PartitionLog:
    return PartitionLog.open(path, "t", 0, config, clock, clean_shutdown=clean)


def kv(items: Sequence[tuple[bytes | None, bytes | None]], *, ts: int = T0, pid: int = -1, epoch: int = -1,
       seq: int = -1, txn: bool = False, compression: int = 0) -> bytes:
    b = RecordBatchBuilder(compression=compression, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                           is_transactional=txn)
    for i, (k, v) in enumerate(items):
        b.append(ts + i, k, v, [("h", b"x")] if i == 0 else ())
    return b.build()


def append(plog: PartitionLog, *batches: bytes) -> int:
    buf = bytearray(b"".join(batches))
    return plog.append(buf, list(iter_batch_headers(buf, check_crc=True))).first_offset


def put(plog: PartitionLog, key: str, value: str | None, **kw: object) -> int:
    return append(plog, kv([(key.encode(), None if value is None else value.encode())], **kw))  # type: ignore[arg-type]


def batches(plog: PartitionLog) -> list[tuple[BatchHeader, bytes]]:
    return list(plog.iter_batches(0))


def records(plog: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    for h, data in batches(plog):
        if h.is_control:
            continue
        out += [(r.offset, r.key, r.value) for r in decode_records(data, check_crc=True)]
    return out


def visible(plog: PartitionLog) -> dict[bytes, bytes]:
    """The key -> value map a READ_COMMITTED consumer builds up to the LSO (tombstones delete)."""
    lso = plog.last_stable_offset(plog.log_end_offset)
    aborted = sorted(plog.collect_aborted_txns(0, plog.log_end_offset), key=lambda a: a.first_offset)
    pids: set[int] = set()
    out: dict[bytes, bytes] = {}
    for h, data in batches(plog):
        if h.base_offset >= lso:
            break
        while aborted and aborted[0].first_offset <= h.last_offset:
            pids.add(aborted.pop(0).producer_id)
        if h.is_control:
            if h.records_count and not parse_control_record(data).commit:
                pids.discard(h.producer_id)
            continue
        if h.is_transactional and h.producer_id in pids:
            continue
        for r in decode_records(data):
            assert r.key is not None
            if r.value is None:
                out.pop(r.key, None)
            else:
                out[r.key] = r.value
    return out


def control_offsets(plog: PartitionLog) -> list[tuple[int, int]]:
    """(offset, record count) of every control batch."""
    return [(h.base_offset, h.records_count) for h, _ in batches(plog) if h.is_control]


def ready(plog: PartitionLog) -> None:
    """Make everything written cleanable up to the active segment: roll + flush (durable = high watermark)."""
    plog.roll()
    plog.flush()


class Producer:
    """Idempotent/transactional producer bookkeeping for tests."""

    def __init__(self, plog: PartitionLog, pid: int, epoch: int = 0) -> None:
        self.plog, self.pid, self.epoch, self.seq = plog, pid, epoch, 0

    def send(self, items: list[tuple[bytes, bytes | None]], *, txn: bool = False, ts: int = T0) -> int:
        off = append(self.plog, kv(items, pid=self.pid, epoch=self.epoch, seq=self.seq, txn=txn, ts=ts))
        self.seq += len(items)
        return off

    def end(self, commit: bool, ts: int = T0) -> int:
        return self.plog.append_marker(self.pid, self.epoch, commit, 0, ts).first_offset


@pytest.fixture
def clock() -> MockClock:
    return MockClock(T0)


# ==================================================================== basic compaction
def test_latest_value_per_key_kept_with_offsets(tmp_path: Path, clock: MockClock) -> None:
    plog = open_log(tmp_path / "t-0", cfg(), clock)
    expected: dict[bytes, tuple[int, bytes]] = {}
    for i in range(200):
        k, v = f"k{i % 13}".encode(), f"v{i}".encode()
        expected[k] = (append(plog, kv([(k, v)])), v)
    ready(plog)
    assert len(plog.segments) > 5
    before = plog.size_in_bytes
    assert plog.needs_cleaning(clock.wall_ms())
    stats = LogCleaner().clean(plog, clock.wall_ms())
    assert isinstance(stats, CleanStats)
    assert stats.records_removed == 200 - 13 and stats.segments_cleaned == len(plog.segments) + stats.segments_cleaned \
        - stats.segments_after - 1
    assert stats.bytes_before > stats.bytes_after > 0
    assert plog.size_in_bytes < before
    assert records(plog) == sorted((o, k, v) for k, (o, v) in expected.items())
    assert plog.log_end_offset == 200 and plog.log_start_offset == 0
    # reads by offset still work: an offset whose record is gone reads from the next kept one
    res = plog.read(5, 1 << 20, plog.log_end_offset)
    first = next(iter_batch_headers(b"".join(bytes(r) for r in res.records)))
    assert first.base_offset == min(o for o, _ in expected.values())
    assert not plog.needs_cleaning(clock.wall_ms())
    assert (tmp_path / "t-0" / CLEANER_CHECKPOINT).exists()
    # a second run merges the (now small) segments; nothing else changes
    plog.roll()
    plog.flush()
    stats2 = LogCleaner().clean(plog, clock.wall_ms() + 1)
    assert records(plog) == sorted((o, k, v) for k, (o, v) in expected.items())
    assert stats2.records_removed == 0
    # appends continue, reopen sees the same log
    put(plog, "k0", "after")
    plog.close()
    again = open_log(tmp_path / "t-0", cfg(), clock, clean=False)
    assert records(again)[-1] == (200, b"k0", b"after")
    assert visible(again)[b"k0"] == b"after"
    again.close()


def test_needs_cleaning_policy_ratio_and_lags(tmp_path: Path, clock: MockClock) -> None:
    plog = open_log(tmp_path / "d-0", cfg(cleanup_policy="delete"), clock)
    for i in range(50):
        put(plog, f"k{i % 3}", "x" * 20)
    ready(plog)
    assert not plog.needs_cleaning(clock.wall_ms())
    assert LogCleaner().clean(plog, clock.wall_ms()) == CleanStats()
    plog.update_config(cfg(min_cleanable_dirty_ratio=0.5))
    assert plog.needs_cleaning(clock.wall_ms())
    LogCleaner().clean(plog, clock.wall_ms())
    assert not plog.needs_cleaning(clock.wall_ms())
    # a little dirty data: below the ratio, until max.compaction.lag.ms says it is too old
    for i in range(3):
        put(plog, f"k{i}", "y", ts=clock.wall_ms())
    ready(plog)
    plog.update_config(cfg(min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=60_000))
    assert not plog.needs_cleaning(clock.wall_ms())
    assert plog.needs_cleaning(clock.wall_ms() + 60_001)
    # min.compaction.lag.ms keeps young segments out of the cleanable range
    plog.update_config(cfg(min_compaction_lag_ms=60_000))
    assert not plog.needs_cleaning(clock.wall_ms())
    stats = LogCleaner().clean(plog, clock.wall_ms())
    assert stats.records_removed == 0
    assert {v for _, _, v in records(plog)} >= {b"y"}
    stats = LogCleaner().clean(plog, clock.wall_ms() + 60_001)
    assert stats.records_removed == 3
    plog.close()


def test_active_segment_and_unflushed_data_untouched(tmp_path: Path, clock: MockClock) -> None:
    plog = open_log(tmp_path / "t-0", cfg(segment_bytes=1 << 20), clock)
    for i in range(30):
        put(plog, "k", f"v{i}")
    assert LogCleaner().clean(plog, clock.wall_ms()) == CleanStats()  # one (active) segment
    plog.roll()  # inactive now, but not flushed: above the durable offset (our high watermark)
    assert not plog.needs_cleaning(clock.wall_ms())
    assert LogCleaner().clean(plog, clock.wall_ms()).records_removed == 0
    plog.flush()
    assert LogCleaner().clean(plog, clock.wall_ms()).records_removed == 29
    plog.close()


# ==================================================================== tombstones
def test_tombstones_expire_after_delete_retention(tmp_path: Path, clock: MockClock) -> None:
    dr = 60_000
    plog = open_log(tmp_path / "t-0", cfg(delete_retention_ms=dr), clock)
    for i in range(20):
        put(plog, f"k{i % 4}", f"v{i}")
    gone = put(plog, "k1", None)
    put(plog, "k2", None)
    put(plog, "k2", "back")
    ready(plog)
    cleaner = LogCleaner()
    now = clock.wall_ms()
    cleaner.clean(plog, now)
    recs = records(plog)
    assert (gone, b"k1", None) in recs  # kept: the delete horizon starts now
    assert [k for _, k, _ in recs].count(b"k2") == 1
    hb = next(h for h, _ in batches(plog) if h.base_offset == gone)
    assert hb.attributes & ATTR_DELETE_HORIZON and hb.base_timestamp == now + dr
    # timestamps are unchanged by the re-based batch
    assert [r.timestamp for h, d in batches(plog) if h.base_offset == gone for r in decode_records(d)] == [T0]
    assert visible(plog) == {b"k0": b"v16", b"k2": b"back", b"k3": b"v19"}
    clock.advance(dr - 1)
    assert not plog.needs_cleaning(clock.wall_ms())
    cleaner.clean(plog, clock.wall_ms())
    assert (gone, b"k1", None) in records(plog)
    clock.advance(1)
    assert plog.needs_cleaning(clock.wall_ms())  # the horizon passed: worth a run without new dirty data
    stats = cleaner.clean(plog, clock.wall_ms())
    assert stats.records_removed == 1
    assert b"k1" not in {k for _, k, _ in records(plog)}
    assert visible(plog) == {b"k0": b"v16", b"k2": b"back", b"k3": b"v19"}
    assert not plog.needs_cleaning(clock.wall_ms())
    plog.close()


# ==================================================================== transactions
def test_aborted_removed_committed_kept_and_index(tmp_path: Path, clock: MockClock) -> None:
    plog = open_log(tmp_path / "t-0", cfg(), clock)
    a, b = Producer(plog, 1000), Producer(plog, 2000)
    put(plog, "x", "plain0")
    a.send([(b"a1", b"A1"), (b"shared", b"A")], txn=True)
    b_first = b.send([(b"b1", b"B1"), (b"shared", b"B")], txn=True)
    put(plog, "x", "plain1")
    b.send([(b"b2", b"B2")], txn=True)
    commit = a.end(True)
    abort = b.end(False)
    put(plog, "y", "plain2")
    ready(plog)
    assert [t.producer_id for t in plog.collect_aborted_txns(0, plog.log_end_offset)] == [2000]
    want = visible(plog)
    assert want == {b"x": b"plain1", b"a1": b"A1", b"shared": b"A", b"y": b"plain2"}
    LogCleaner().clean(plog, clock.wall_ms())
    keys = [k for _, k, _ in records(plog)]
    assert b"b1" not in keys and b"b2" not in keys and b"B" not in [v for _, _, v in records(plog)]
    assert b"a1" in keys
    assert visible(plog) == want
    # both markers kept on this first pass: COMMIT (its data is still there), ABORT (its data was just removed)
    assert control_offsets(plog) == [(commit, 1), (abort, 1)]
    # the ABORT entry of the removed transaction stays in the cleaned segment's index for this pass
    assert [(t.producer_id, t.first_offset) for t in plog.collect_aborted_txns(0, plog.log_end_offset)] == \
        [(2000, b_first)]
    # reopen with a replay of everything: same visible data, no transaction left ongoing
    plog.close()
    for p in (tmp_path / "t-0").glob("*.snapshot"):
        p.unlink()
    again = open_log(tmp_path / "t-0", cfg(), clock)
    assert again.ongoing_transactions() == []
    assert visible(again) == want
    again.close()


def test_undecided_transaction_untouched(tmp_path: Path, clock: MockClock) -> None:
    plog = open_log(tmp_path / "t-0", cfg(), clock)
    for i in range(20):
        put(plog, "k", f"old{i}")
    p = Producer(plog, 7)
    start = p.send([(b"k", b"txn"), (b"t", b"1")], txn=True)
    for i in range(40):
        put(plog, "k", f"new{i}")
        put(plog, "z", f"z{i}")
    ready(plog)
    assert plog.first_unstable_offset() == start
    LogCleaner().clean(plog, clock.wall_ms())
    recs = records(plog)
    # only whole segments below the first unstable offset are cleaned: the one holding it is intact
    bound = max(s.base_offset for s in plog.segments if s.base_offset <= start)
    assert 0 < bound <= start
    assert [r for r in recs if r[0] < bound] == [(bound - 1, b"k", f"old{bound - 1}".encode())]
    assert [r for r in recs if bound <= r[0] < start] == [(o, b"k", f"old{o}".encode()) for o in range(bound, start)]
    assert [r for r in recs if r[0] >= start] == [(start, b"k", b"txn"), (start + 1, b"t", b"1")] + [
        (start + 2 + j, k, v) for j, (k, v) in enumerate(
            kvp for i in range(40) for kvp in ((b"k", f"new{i}".encode()), (b"z", f"z{i}".encode())))]
    p.end(True)
    ready(plog)
    LogCleaner().clean(plog, clock.wall_ms())
    assert visible(plog) == {b"k": b"new39", b"z": b"z39", b"t": b"1"}
    plog.close()


def test_markers_retained_then_removed_after_horizon(tmp_path: Path, clock: MockClock) -> None:
    dr = 10_000
    plog = open_log(tmp_path / "t-0", cfg(delete_retention_ms=dr), clock)
    a, b = Producer(plog, 11), Producer(plog, 22)
    a.send([(b"k", b"a-txn")], txn=True)
    b.send([(b"q", b"b-aborted")], txn=True)
    commit = a.end(True)
    abort = b.end(False)
    put(plog, "k", "plain")  # supersedes the committed record
    a.send([(b"ka", b"later")])  # the producers' last batches are elsewhere: the markers may go
    b.send([(b"kb", b"later")])
    ready(plog)
    cleaner = LogCleaner()
    cleaner.clean(plog, clock.wall_ms())  # data of both transactions removed; markers kept (data seen this pass)
    assert control_offsets(plog) == [(commit, 1), (abort, 1)]
    assert len(plog.collect_aborted_txns(0, plog.log_end_offset)) == 1
    clock.advance(1)
    put(plog, "dirty", "1")  # a run needs new dirty data (or a due horizon)
    ready(plog)
    assert plog.needs_cleaning(clock.wall_ms())
    cleaner.clean(plog, clock.wall_ms())  # no data left: the markers get a delete horizon, the entry goes
    assert control_offsets(plog) == [(commit, 1), (abort, 1)]
    hz = [h.base_timestamp for h, _ in batches(plog) if h.is_control and h.attributes & ATTR_DELETE_HORIZON]
    assert hz == [clock.wall_ms() + dr] * 2
    assert plog.collect_aborted_txns(0, plog.log_end_offset) == []
    clock.advance(dr - 1)
    cleaner.clean(plog, clock.wall_ms())
    assert len(control_offsets(plog)) == 2
    clock.advance(1)
    assert plog.needs_cleaning(clock.wall_ms())
    cleaner.clean(plog, clock.wall_ms())
    assert control_offsets(plog) == []
    assert visible(plog) == {b"k": b"plain", b"ka": b"later", b"kb": b"later", b"dirty": b"1"}
    plog.close()


def test_marker_kept_while_committed_data_remains(tmp_path: Path, clock: MockClock) -> None:
    plog = open_log(tmp_path / "t-0", cfg(delete_retention_ms=0), clock)
    a = Producer(plog, 5)
    a.send([(b"keep", b"1")], txn=True)
    commit = a.end(True)
    a.send([(b"other", b"2")])
    ready(plog)
    cleaner = LogCleaner()
    for _ in range(4):
        clock.advance(1000)
        cleaner.clean(plog, clock.wall_ms())
        assert control_offsets(plog) == [(commit, 1)]
    assert visible(plog) == {b"keep": b"1", b"other": b"2"}
    plog.close()


# ==================================================================== producer state
def test_producer_last_batch_retained_empty(tmp_path: Path, clock: MockClock) -> None:
    plog = open_log(tmp_path / "t-0", cfg(), clock)
    p = Producer(plog, 42, epoch=3)
    p.send([(b"k", b"p0")])
    last = p.send([(b"k", b"p1"), (b"j", b"p1")])
    last_batch = kv([(b"k", b"p1"), (b"j", b"p1")], pid=42, epoch=3, seq=1)
    for i in range(30):
        put(plog, "k", f"plain{i}")
        put(plog, "j", f"plain{i}")
    ready(plog)
    LogCleaner().clean(plog, clock.wall_ms())
    kept = [h for h, _ in batches(plog) if h.producer_id == 42]
    assert len(kept) == 1
    h = kept[0]
    assert (h.base_offset, h.last_offset_delta, h.records_count, h.base_sequence, h.producer_epoch) == \
        (last, 1, 0, 1, 3)
    # duplicate detection still works in memory ...
    with pytest.raises(DuplicateSequenceError):
        append(plog, last_batch)
    # ... and after a restart that replays the cleaned segments (no snapshot)
    plog.close()
    for s in (tmp_path / "t-0").glob("*.snapshot"):
        s.unlink()
    again = open_log(tmp_path / "t-0", cfg(), clock)
    st = {x.producer_id: x for x in again.producer_states()}
    assert st[42].last_sequence == 2 and st[42].producer_epoch == 3
    with pytest.raises(DuplicateSequenceError):
        append(again, last_batch)
    append(again, kv([(b"k", b"next")], pid=42, epoch=3, seq=3))  # in sequence: accepted
    again.close()


# ==================================================================== crash safety
STEPS = ["cleaned", "swap", "deleted", "indexes", "renamed"]


def _build_mixed(plog: PartitionLog) -> None:
    a, b = Producer(plog, 1), Producer(plog, 2)
    for i in range(60):
        put(plog, f"k{i % 7}", f"v{i}")
        if i % 10 == 3:
            a.send([(f"t{i}".encode(), b"commit")], txn=True)
            b.send([(f"t{i}".encode(), b"abort")], txn=True)
            a.end(True)
            b.end(False)
        if i % 9 == 0:
            put(plog, f"k{i % 7}", None)
    ready(plog)


def _snapshot(plog: PartitionLog) -> tuple[Any, ...]:
    return (records(plog), visible(plog), control_offsets(plog),
            [(t.producer_id, t.first_offset) for t in plog.collect_aborted_txns(0, plog.log_end_offset)],
            plog.log_end_offset)


@pytest.mark.parametrize("step", STEPS)
def test_crash_at_every_swap_step_recovers_old_or_new(tmp_path: Path, clock: MockClock, step: str) -> None:
    d = tmp_path / "t-0"
    plog = open_log(d, cfg(segment_bytes=1500), clock)
    _build_mixed(plog)
    old = _snapshot(plog)
    image = tmp_path / "crash" / "t-0"
    images: list[str] = []

    def fault(s: str) -> None:  # freeze the directory as a crash at this point would leave it
        if s == step and not images:
            shutil.copytree(d, image)
            images.append(s)

    LogCleaner(fault=fault).clean(plog, clock.wall_ms())
    new = _snapshot(plog)
    assert new != old and images == [step]
    plog.close()
    crashed = open_log(image, cfg(segment_bytes=1500), clock, clean=False)
    got = _snapshot(crashed)
    leftovers = [p.name for p in image.iterdir() if p.suffix in (".cleaned", ".swap", ".deleted")]
    assert leftovers == []
    # the first group swapped (or not) atomically; other groups are untouched, so the result is a mix of
    # cleaned and uncleaned segments: the visible data and the transaction view are always the same
    assert got[1] == old[1] and got[4] == old[4]
    if step == "cleaned":
        assert got == old
    else:
        first_group_end = crashed.segments[1].base_offset
        assert [r for r in got[0] if r[0] < first_group_end] == [r for r in new[0] if r[0] < first_group_end]
    for h, data in batches(crashed):
        decode_records(data, check_crc=True)
    # the recovered log keeps working: clean it fully and compare with the uninterrupted run
    LogCleaner().clean(crashed, clock.wall_ms())
    assert _snapshot(crashed)[1] == new[1]
    put(crashed, "after", "crash")
    crashed.close()


def test_stale_cleaner_files_removed_at_open(tmp_path: Path, clock: MockClock) -> None:
    d = tmp_path / "t-0"
    plog = open_log(d, cfg(), clock)
    for i in range(40):
        put(plog, f"k{i % 5}", f"v{i}")
    ready(plog)
    before = _snapshot(plog)
    plog.close()
    (d / f"{0:020d}.log.cleaned").write_bytes(b"junk")
    (d / f"{0:020d}.index.cleaned").write_bytes(b"junk")
    (d / f"{5:020d}.log.deleted").write_bytes(b"junk")
    again = open_log(d, cfg(), clock, clean=True)
    assert sorted(p.name for p in d.iterdir() if p.suffix in (".cleaned", ".swap", ".deleted")) == []
    assert _snapshot(again) == before
    again.close()


def test_concurrent_cleaning_while_appending_and_reading(tmp_path: Path, clock: MockClock) -> None:
    """The broker's shape: a worker thread cleans in a loop while the event loop appends, flushes and reads."""
    plog = open_log(tmp_path / "t-0", cfg(segment_bytes=2000, min_cleanable_dirty_ratio=0.2), clock)
    stop = threading.Event()
    errors: list[BaseException] = []
    runs: list[CleanStats] = []

    def worker() -> None:
        cleaner = LogCleaner()
        while not stop.is_set():
            try:
                if plog.needs_cleaning(clock.wall_ms()):
                    runs.append(cleaner.clean(plog, clock.wall_ms()))
            except BaseException as e:  # noqa: BLE001
                errors.append(e)
                return

    t = threading.Thread(target=worker)
    t.start()
    expected: dict[bytes, bytes] = {}
    try:
        for i in range(1500):
            k, v = f"k{i % 40}".encode(), f"v{i}".encode()
            append(plog, kv([(k, v)]))
            expected[k] = v
            if i % 25 == 0:
                plog.flush()
            if i % 250 == 0:
                assert visible(plog) == expected
    finally:
        stop.set()
        t.join()
    assert not errors
    assert sum(r.segments_cleaned for r in runs) > 10
    assert visible(plog) == expected
    plog.close()
    again = open_log(tmp_path / "t-0", cfg(), clock)
    assert visible(again) == expected
    again.close()


# ==================================================================== format
def test_cleaned_batches_are_valid_for_kafka_python(tmp_path: Path, clock: MockClock) -> None:
    kafka_records = pytest.importorskip("kafka.record.default_records")
    plog = open_log(tmp_path / "t-0", cfg(segment_bytes=4096), clock)
    p = Producer(plog, 9)
    for i in range(40):
        codec = [Compression.NONE, Compression.GZIP, Compression.NONE][i % 3]
        append(plog, kv([(f"k{i % 6}".encode(), f"v{i}".encode()), (f"u{i}".encode(), b"unique"),
                         (f"k{(i + 1) % 6}".encode(), None)], compression=codec, ts=T0 + i))
    p.send([(b"k0", b"idem")])
    for i in range(10):
        put(plog, "k0", f"w{i}")
    ready(plog)
    LogCleaner().clean(plog, clock.wall_ms())
    seen_empty = seen_horizon = 0
    for seg in plog.segments[:-1]:
        raw = seg.pread(0, seg.size)
        ours = list(iter_batch_headers(raw, check_crc=True))
        pos = 0
        for h in ours:
            kb = kafka_records.DefaultRecordBatch(raw[pos:pos + h.size])
            assert kb.validate_crc()
            got = [(r.offset, r.key, r.value, r.timestamp) for r in kb]
            want = [(r.offset, r.key, r.value, r.timestamp) for r in decode_records(raw, pos)]
            assert got == want
            assert kb.base_offset == h.base_offset and kb.last_offset_delta == h.last_offset_delta
            seen_empty += h.records_count == 0
            seen_horizon += bool(h.attributes & ATTR_DELETE_HORIZON)
            pos += h.size
    assert seen_empty == 1 and seen_horizon > 0


def test_compressed_batches_keep_their_codec(tmp_path: Path, clock: MockClock) -> None:
    plog = open_log(tmp_path / "t-0", cfg(segment_bytes=4096), clock)
    codecs = [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
    for i in range(40):
        append(plog, kv([(f"k{i % 3}".encode(), f"v{i}".encode()), (f"u{i}".encode(), b"x" * 50)],
                        compression=codecs[i % 4]))
    ready(plog)
    LogCleaner().clean(plog, clock.wall_ms())
    for h, data in batches(plog):
        if h.records_count:
            assert h.compression == codecs[(h.base_offset // 2) % 4]
            decode_records(data, check_crc=True)
    assert visible(plog)[b"k0"] == b"v39"


# ==================================================================== property: visible data never changes
OPS = st.lists(st.one_of(
    st.tuples(st.just("put"), st.integers(0, 7), st.integers(0, 3)),
    st.tuples(st.just("del"), st.integers(0, 7)),
    st.tuples(st.just("txn"), st.integers(0, 2), st.integers(0, 7), st.integers(0, 3)),
    st.tuples(st.just("end"), st.integers(0, 2), st.booleans()),
    st.tuples(st.just("clean"), st.integers(0, 3)),
), min_size=5, max_size=150)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_property_visible_map_unchanged(tmp_path_factory: pytest.TempPathFactory, ops: list[tuple]) -> None:  # type: ignore[type-arg]
    d = tmp_path_factory.mktemp("prop") / "t-0"
    clock = MockClock(T0)
    c = cfg(segment_bytes=300, delete_retention_ms=1000, index_interval_bytes=64)
    plog = open_log(d, c, clock)
    prods = [Producer(plog, 100 + i) for i in range(3)]
    ongoing = [False] * 3
    cleaner = LogCleaner()
    originals: set[tuple[int, bytes | None, bytes | None]] = set()

    def check() -> None:
        want = model_visible()
        assert visible(plog) == want
        assert set(records(plog)) <= originals

    # the model: committed data in order (a txn's records become visible at its commit)
    committed: list[tuple[int, bytes, bytes | None]] = []
    pending: list[list[tuple[int, bytes, bytes | None]]] = [[], [], []]

    def model_visible() -> dict[bytes, bytes]:
        lso = plog.last_stable_offset(plog.log_end_offset)
        out: dict[bytes, bytes] = {}
        for off, k, v in sorted(committed):
            if off >= lso:
                break
            if v is None:
                out.pop(k, None)
            else:
                out[k] = v
        return out

    for n, op in enumerate(ops):
        if op[0] == "put":
            k, v = f"k{op[1]}".encode(), f"v{op[2]}-{n}".encode()
            committed.append((append(plog, kv([(k, v)], ts=clock.wall_ms())), k, v))
        elif op[0] == "del":
            k = f"k{op[1]}".encode()
            committed.append((append(plog, kv([(k, None)], ts=clock.wall_ms())), k, None))
        elif op[0] == "txn":
            i, k, v = op[1], f"k{op[2]}".encode(), f"t{op[3]}-{n}".encode()
            pending[i].append((prods[i].send([(k, v)], txn=True, ts=clock.wall_ms()), k, v))
            ongoing[i] = True
        elif op[0] == "end":
            i = op[1]
            if ongoing[i]:
                prods[i].end(op[2], ts=clock.wall_ms())
                if op[2]:
                    committed.extend(pending[i])
                pending[i] = []
                ongoing[i] = False
        else:
            originals.update(records(plog))
            ready(plog)
            check()
            clock.advance(op[1] * 600)
            cleaner.clean(plog, clock.wall_ms())
            check()
    originals.update(records(plog))
    ready(plog)
    for _ in range(3):
        clock.advance(1001)
        cleaner.clean(plog, clock.wall_ms())
        check()
    plog.close()
    for s in d.glob("*.snapshot"):
        s.unlink()
    plog = open_log(d, c, clock)  # replays every (cleaned) segment
    assert sorted((t.first_offset, t.producer_id) for t in plog.ongoing_transactions()) == sorted(
        (p[0][0], 100 + i) for i, p in enumerate(pending) if p)
    check()
    plog.close()
