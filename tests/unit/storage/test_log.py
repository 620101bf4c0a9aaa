"""PartitionLog: append/read, rolls, indexes, timestamps, retention, DeleteRecords, recovery, flush."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import pytest
from storage_helpers import append, batch, headers_of, open_log, payload_of

from oncelog.protocol.records import Compression, TimestampType, decode_records
from oncelog.storage import CHECKPOINT_FILE, LogConfig, OffsetOutOfRangeError, PartitionLog
from oncelog.testing import MockClock

T0 = 1_700_000_000_000


def offsets(plog: PartitionLog, start: int = 0) -> list[int]:
    return [r.offset for h, b in plog.iter_batches(start) for r in decode_records(b)]


def test_append_assigns_offsets_and_reads_back(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    r1 = append(plog, batch(3, tag=1))
    r2 = append(plog, batch(2, tag=2), batch(1, tag=3))
    assert (r1.first_offset, r1.last_offset) == (0, 2)
    assert (r2.first_offset, r2.last_offset) == (3, 5)
    assert r1.log_append_time_ms == -1 and r1.max_timestamp == T0
    assert plog.log_end_offset == 6 and plog.log_start_offset == 0
    res = plog.read(0, 1 << 20, 6)
    hs = headers_of(res.records)
    assert [h.base_offset for h in hs] == [0, 3, 5] and res.first_batch_offset == 0
    assert res.size == sum(h.size for h in hs)
    recs = [r for rec in res.records for r in decode_records(bytes(rec))]
    assert [r.value[:4] for r in recs][:1] == [b"1:0:"]
    assert offsets(plog) == list(range(6))
    plog.close()


def test_read_inside_batch_returns_whole_batch(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    append(plog, batch(5), batch(5), batch(5))
    for off in range(15):
        res = plog.read(off, 1, 100)
        hs = headers_of(res.records)
        assert len(hs) == 1 and hs[0].base_offset == off // 5 * 5


def test_max_bytes_and_kip74(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    b = batch(1, value_size=1000)
    for _ in range(10):
        append(plog, b)
    size = len(b)
    res = plog.read(0, size * 3 + 10, 100)
    assert len(headers_of(res.records)) == 3 and res.size == 3 * size
    res = plog.read(2, size // 2, 100)  # first batch is larger than max_bytes: returned whole
    assert [h.base_offset for h in headers_of(res.records)] == [2]
    assert plog.read(2, size // 2, 100, min_one_batch=False).size == 0
    assert plog.read(0, 0, 100).size == size


def test_max_offset_and_range(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    append(plog, batch(2), batch(2), batch(2))
    assert [h.base_offset for h in headers_of(plog.read(0, 1 << 20, 4).records)] == [0, 2]
    assert plog.read(0, 1 << 20, 3).size == len(batch(2))  # batch 2..3 has last offset 3 >= 3
    assert plog.read(4, 1 << 20, 4).size == 0
    assert plog.read(6, 1 << 20, 100).size == 0  # at the log end: empty
    with pytest.raises(OffsetOutOfRangeError) as ei:
        plog.read(7, 100, 100)
    assert "t-0" in str(ei.value) and "0..6" in str(ei.value)
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(-1, 100, 100)


def test_sparse_index_lookups(tmp_path: Path) -> None:
    plog = open_log(tmp_path, LogConfig(index_interval_bytes=200, segment_bytes=5000))
    n = 0
    for i in range(300):
        k = 1 + i % 4
        append(plog, batch(k, value_size=20 + i % 50, tag=i))
        n += k
    assert len(plog.segments) > 3
    assert any(len(s.offset_index) > 5 for s in plog.segments)
    for off in range(n):
        hs = headers_of(plog.read(off, 1, n).records)
        assert hs[0].base_offset <= off <= hs[0].last_offset
    assert offsets(plog) == list(range(n))
    assert offsets(plog, 500) == list(range(plog.read(500, 1, n).first_batch_offset, n))


def test_roll_by_size_and_hook(tmp_path: Path) -> None:
    b = batch(1, value_size=400)
    plog = open_log(tmp_path, LogConfig(segment_bytes=len(b) * 3))
    rolls: list[tuple[int, int]] = []
    plog.on_roll.append(lambda old, new: rolls.append((old.base_offset, new.base_offset)))
    for _ in range(10):
        append(plog, b)
    assert [s.base_offset for s in plog.segments] == [0, 3, 6, 9]
    assert rolls == [(0, 3), (3, 6), (6, 9)]
    names = sorted(p.name for p in plog.directory.iterdir())
    assert "00000000000000000003.log" in names and "00000000000000000003.index" in names
    assert "00000000000000000003.timeindex" in names
    assert plog.read(4, 10 << 20, 100).size == 2 * len(b)  # reads stay inside one segment
    assert plog.roll().base_offset == 10 and plog.roll().base_offset == 10


def test_roll_by_time(tmp_path: Path) -> None:
    clock = MockClock(T0)
    plog = open_log(tmp_path, LogConfig(segment_ms=1000), clock)
    append(plog, batch(1, ts=T0))
    append(plog, batch(1, ts=T0 + 1000))
    assert len(plog.segments) == 1
    append(plog, batch(1, ts=T0 + 1001))
    assert [s.base_offset for s in plog.segments] == [0, 2]


def test_timestamps_lookup(tmp_path: Path) -> None:
    plog = open_log(tmp_path, LogConfig(index_interval_bytes=100, segment_bytes=3000))
    for i in range(40):
        append(plog, batch(3, ts=T0 + i * 100, ts_step=10, compression=Compression.LZ4 if i % 2 else 0))
    # record j of batch i has timestamp T0 + 100 i + 10 j at offset 3 i + j
    assert plog.offset_for_timestamp(T0 + 1010) == (31, T0 + 1010)
    assert plog.offset_for_timestamp(T0 + 1015) == (32, T0 + 1020)
    assert plog.offset_for_timestamp(T0 + 1021) == (33, T0 + 1100)
    assert plog.offset_for_timestamp(0) == (0, T0)
    assert plog.offset_for_timestamp(T0 + 10_000) is None
    assert plog.max_timestamp_and_offset() == (T0 + 3920, 119)
    plog.close()
    plog = open_log(tmp_path, LogConfig(index_interval_bytes=100, segment_bytes=3000), clean=True)
    assert plog.max_timestamp_and_offset() == (T0 + 3920, 119)
    assert plog.offset_for_timestamp(T0 + 2015) == (62, T0 + 2020)


def test_log_append_time(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    res = append(plog, batch(2, ts=5), batch(1, ts=6), log_append_time_ms=T0)
    assert res.log_append_time_ms == T0 and res.max_timestamp == T0 and res.offset_of_max_timestamp == 0
    hs = headers_of(plog.read(0, 1 << 20, 10).records)  # CRC re-checked in headers_of
    assert all(h.timestamp_type == TimestampType.LOG_APPEND_TIME and h.max_timestamp == T0 for h in hs)
    assert plog.offset_for_timestamp(T0) == (0, T0)


def test_empty_log_queries(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    assert plog.read(0, 100, 0).size == 0
    assert plog.offset_for_timestamp(0) is None
    assert plog.max_timestamp_and_offset() == (-1, -1)
    assert list(plog.iter_batches(0)) == []
    assert plog.flush() == 0


def test_retention_by_time(tmp_path: Path) -> None:
    clock = MockClock(T0)
    b = batch(1, value_size=400)
    cfg = LogConfig(segment_bytes=len(b) * 2, retention_ms=10_000)
    plog = open_log(tmp_path, cfg, clock)
    for i in range(8):
        append(plog, batch(1, value_size=400, ts=T0 + i * 1000))
    assert [s.base_offset for s in plog.segments] == [0, 2, 4, 6]
    assert plog.apply_retention(T0 + 10_999) == 0
    assert plog.apply_retention(T0 + 11_001) == 1  # segment 0's newest record is T0 + 1000
    assert plog.log_start_offset == 2
    assert plog.apply_retention(T0 + 100_000) == 2  # never the active segment
    assert plog.log_start_offset == 6 and [s.base_offset for s in plog.segments] == [6]
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(5, 100, 100)
    assert offsets(plog) == [6, 7]
    assert not (plog.directory / "00000000000000000000.log").exists()


def test_retention_by_size_and_compact_policy(tmp_path: Path) -> None:
    b = batch(1, value_size=400)
    plog = open_log(tmp_path, LogConfig(segment_bytes=len(b) * 2, retention_bytes=len(b) * 3, retention_ms=-1))
    for _ in range(9):
        append(plog, b)
    assert plog.size_in_bytes == 9 * len(b)
    assert plog.apply_retention(T0) == 3
    assert plog.size_in_bytes == 3 * len(b) and plog.log_start_offset == 6
    plog.update_config(LogConfig(cleanup_policy="compact", retention_bytes=0))
    for _ in range(4):
        append(plog, b)
    assert plog.apply_retention(T0) == 0


def test_delete_records_survives_reopen(tmp_path: Path) -> None:
    b = batch(2, value_size=300)
    cfg = LogConfig(segment_bytes=len(b) * 2)
    plog = open_log(tmp_path, cfg)
    for _ in range(6):
        append(plog, b)  # segments at 0, 4, 8
    assert plog.delete_records_before(5) == 5
    assert [s.base_offset for s in plog.segments] == [4, 8]
    # the batch 4..5 straddles the start: served whole, batches wholly below it are not
    assert plog.read(5, 1 << 20, 100).first_batch_offset == 4
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(4, 100, 100)
    assert plog.delete_records_before(3) == 5
    with pytest.raises(OffsetOutOfRangeError):
        plog.delete_records_before(13)
    plog.close()
    for clean in (True, False):
        plog = open_log(tmp_path, cfg, clean=clean)
        assert plog.log_start_offset == 5 and plog.log_end_offset == 12
        plog.close()
    plog = open_log(tmp_path, cfg)
    assert plog.delete_records_before(12) == 12  # everything: the active segment rolls and goes
    assert [s.base_offset for s in plog.segments] == [12] and plog.read(12, 100, 100).size == 0
    r = append(plog, b)
    assert r.first_offset == 12
    plog.close()
    plog = open_log(tmp_path, cfg)
    assert (plog.log_start_offset, plog.log_end_offset) == (12, 14)


# ------------------------------------------------------------------------------------------------ recovery
def _fill(tmp_path: Path, cfg: LogConfig, n: int = 20) -> tuple[PartitionLog, int]:
    plog = open_log(tmp_path, cfg)
    for i in range(n):
        append(plog, batch(2, value_size=100, tag=i))
    plog.flush()
    return plog, len(batch(2, value_size=100))


def _crash(plog: PartitionLog) -> None:
    """Simulate a crash: close file descriptors without the clean-close bookkeeping."""
    for s in plog.segments:
        s.close()


@pytest.mark.parametrize("damage", ["cut", "flip", "garbage", "zeros", "bad_length"])
def test_recovery_drops_only_the_bad_tail(tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture) -> None:
    cfg = LogConfig(segment_bytes=10_000, index_interval_bytes=300)
    plog, bsize = _fill(tmp_path, cfg)
    active = plog.segments[-1]
    n_active = (active.next_offset - active.base_offset) // 2
    path = active.log_path
    _crash(plog)
    size = path.stat().st_size
    data = bytearray(path.read_bytes())
    expect_end = 40
    if damage == "cut":
        data = data[: size - bsize // 2]
        expect_end = 38
    elif damage == "flip":
        data[size - 10] ^= 0x40
        expect_end = 38
    elif damage == "garbage":
        data += os.urandom(333)
    elif damage == "zeros":
        data += bytes(4096)  # preallocated / unwritten blocks after a power loss
    elif damage == "bad_length":
        data[size - bsize + 8: size - bsize + 12] = (10**6).to_bytes(4, "big")
        expect_end = 38
    path.write_bytes(data)
    with caplog.at_level(logging.WARNING, logger="oncelog.storage"):
        plog = open_log(tmp_path, cfg)
    assert plog.log_end_offset == expect_end and plog.durable_offset == expect_end
    assert offsets(plog) == list(range(expect_end))
    assert any("truncated" in r.message and "t-0" in r.message for r in caplog.records)
    assert n_active >= 2
    r = append(plog, batch(1))
    assert r.first_offset == expect_end
    assert offsets(plog)[-1] == expect_end
    plog.close()


def test_clean_shutdown_skips_scan_but_unclean_scans_active(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=10_000)
    plog, _ = _fill(tmp_path, cfg)
    plog.close()
    path = plog.segments[-1].log_path
    with open(path, "ab") as f:
        f.write(b"\x00" * 100)
    plog = open_log(tmp_path, cfg, clean=True)  # trusts the clean shutdown: no CRC scan of the data
    assert plog.log_end_offset == 40
    _crash(plog)
    plog = open_log(tmp_path, cfg, clean=False)
    assert plog.log_end_offset == 40 and path.stat().st_size % 10 != 100 % 10 or True
    assert plog.segments[-1].size == sum(h.size for h, _ in plog.iter_batches(plog.segments[-1].base_offset))


def test_missing_or_corrupt_indexes_rebuilt(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=1500, index_interval_bytes=200)
    plog, _ = _fill(tmp_path, cfg, 30)
    plog.close()
    before = [(s.base_offset, list(s.offset_index.offsets), list(s.time_index.timestamps)) for s in plog.segments]
    segs = plog.segments
    assert len(segs) >= 4
    segs[0].offset_index.path.unlink()
    segs[1].time_index.path.unlink()
    segs[2].offset_index.path.write_bytes(b"\x00\x00\x00\x05\x7f\xff\xff\xff")  # position beyond the log
    segs[3].time_index.path.write_bytes(b"\x01\x02\x03")
    plog = open_log(tmp_path, cfg, clean=True)
    after = [(s.base_offset, list(s.offset_index.offsets), list(s.time_index.timestamps)) for s in plog.segments]
    assert after == before
    assert offsets(plog) == list(range(60))


def test_crash_after_roll_before_flush_recovers_older_segment(tmp_path: Path) -> None:
    """The recovery point stops below a rolled but unflushed segment, so its torn tail is found."""
    b = batch(2, value_size=300)
    cfg = LogConfig(segment_bytes=len(b) * 3)
    plog = open_log(tmp_path, cfg)
    for _ in range(3):
        append(plog, b)
    plog.flush()
    for _ in range(4):
        append(plog, b)  # rolls: segments 0, 6 (inactive, unflushed) and 12
    assert [s.base_offset for s in plog.segments] == [0, 6, 12]
    seg6 = plog.segments[1].log_path
    _crash(plog)
    with open(seg6, "r+b") as f:
        f.truncate(len(b) * 2 + 7)
    plog = open_log(tmp_path, cfg)
    assert plog.log_end_offset == 10 and [s.base_offset for s in plog.segments] == [0, 6]
    assert offsets(plog) == list(range(10))


def test_checkpoint_lso_beyond_recovered_end(tmp_path: Path) -> None:
    cfg = LogConfig()
    plog, _ = _fill(tmp_path, cfg, 5)
    plog.delete_records_before(10)
    _crash(plog)
    path = plog.segments[0].log_path
    path.write_bytes(path.read_bytes()[:100])  # the data under the start offset vanished
    plog = open_log(tmp_path, cfg)
    assert (plog.log_start_offset, plog.log_end_offset) == (10, 10)
    assert append(plog, batch(1)).first_offset == 10
    assert (plog.directory / CHECKPOINT_FILE).exists()


def test_concurrent_flush_while_appending(tmp_path: Path) -> None:
    plog = open_log(tmp_path, LogConfig(segment_bytes=64 * 1024))
    b = batch(4, value_size=200)
    stop = threading.Event()
    durable: list[int] = []
    errors: list[BaseException] = []

    def flusher() -> None:
        try:
            while not stop.is_set():
                durable.append(plog.flush())
        except Exception as e:  # noqa: BLE001  # pragma: no cover
            errors.append(e)

    t = threading.Thread(target=flusher)
    t.start()
    for _ in range(3000):
        append(plog, b)
        assert plog.durable_offset <= plog.log_end_offset
    stop.set()
    t.join()
    assert not errors
    assert durable == sorted(durable) and len(durable) > 1
    assert plog.flush() == plog.log_end_offset == 12000
    assert len(plog.segments) > 10 and plog.recovery_point == plog.segments[-1].base_offset
    plog.close()
    plog = open_log(tmp_path, LogConfig(segment_bytes=64 * 1024))
    assert plog.log_end_offset == 12000 and len(offsets(plog, 11000)) == 1000


def test_closed_and_deleted(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    append(plog, batch(1))
    plog.delete()
    assert not plog.directory.exists()
    with pytest.raises(Exception, match="closed"):
        append(plog, batch(1))
    buf, hs = payload_of(batch(1))
    assert hs[0].size == len(buf)
