"""The power-cut model of the crash tests (oncelog.testing.power_cut) against the real log: the fsync trace says
what is durable, a cut never goes below it, and recovery after the cut keeps every durable batch."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

import oncelog.storage.local_log as log_module
from oncelog.protocol.records import decode_records
from oncelog.storage import LogConfig, PartitionLog
from oncelog.testing.power_cut import cut_to_durable, durable_sizes, freeze_with_undurable, is_stopped, undurable

from storage_helpers import append, batch, open_log


@pytest.fixture
def trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "fsync.trace"
    monkeypatch.setattr(log_module, "_fsync_trace", str(path))
    return path


def values(plog: PartitionLog, upto: int) -> list[bytes | None]:
    """Every record value below offset ``upto``, in log order."""
    out: list[bytes | None] = []
    for _, data in plog.iter_batches(0):
        out += [r.value for r in decode_records(data) if r.offset < upto]
    return out


@pytest.mark.parametrize("seed", range(8))
def test_cut_keeps_what_was_fsynced_and_recovery_keeps_it_too(tmp_path: Path, trace: Path, seed: int) -> None:
    rnd = random.Random(seed)
    data = tmp_path / "data"
    plog = open_log(data, LogConfig(segment_bytes=4096))
    for i in range(40):  # several segments, each flushed now and then
        append(plog, batch(rnd.randint(1, 5), tag=i, value_size=60))
        if rnd.random() < 0.3:
            plog.flush()
    durable = plog.flush()
    expected = values(plog, durable)
    for i in range(40, 40 + rnd.randint(1, 10)):  # written, never fsynced: a power cut may take any of it
        append(plog, batch(rnd.randint(1, 5), tag=i, value_size=60))
    end = plog.log_end_offset
    sizes_before = {p: p.stat().st_size for p in (data / "t-0").glob("*.log")}
    plog.close_without_flush()  # SIGKILL: no flush, no clean-shutdown marker

    traced = durable_sizes(trace)
    assert traced, "flush() wrote no trace"
    cuts = cut_to_durable(data, trace, rnd)
    for c in cuts:
        assert c.durable <= c.kept < c.size, c
        assert traced.get(c.segment, 0) == c.durable
    for p, size in sizes_before.items():
        assert p.stat().st_size >= min(traced.get(p, 0), size), f"{p.name} cut below its durable size"

    again = open_log(data, LogConfig(segment_bytes=4096))  # unclean: recovery scans and truncates torn tails
    try:
        assert durable <= again.log_end_offset <= end
        assert values(again, durable) == expected, "a batch that was durable did not survive the cut"
        # recovery made what it kept durable and said so: a second cut cannot take it back
        kept_end = again.log_end_offset
        kept = values(again, kept_end)
    finally:
        again.close_without_flush()
    cut_to_durable(data, trace, rnd)
    third = open_log(data, LogConfig(segment_bytes=4096))
    try:
        assert third.log_end_offset == kept_end
        assert values(third, kept_end) == kept
    finally:
        third.close_without_flush()


def test_a_segment_never_fsynced_is_cut_only_if_it_is_the_last(tmp_path: Path, trace: Path) -> None:
    part = tmp_path / "data" / "t-0"
    part.mkdir(parents=True)
    older, last = part / "00000000000000000000.log", part / "00000000000000000010.log"
    older.write_bytes(b"a" * 100)  # e.g. written by the log cleaner, which fsyncs it itself
    last.write_bytes(b"b" * 100)
    trace.write_text("")
    rnd = random.Random(1)
    while older.stat().st_size == 100 and last.stat().st_size == 100:
        cut_to_durable(tmp_path / "data", trace, rnd)
    assert older.stat().st_size == 100
    assert last.stat().st_size < 100



@pytest.fixture
def durable_segment(tmp_path: Path, trace: Path) -> Path:
    """A partition's only segment, 100 bytes, all of them traced as durable."""
    part = tmp_path / "data" / "t-0"
    part.mkdir(parents=True)
    seg = part / "00000000000000000000.log"
    seg.write_bytes(b"a" * 100)
    trace.write_text(f"{seg} 100\n")
    return seg


def test_freeze_lets_the_process_run_until_it_has_undurable_bytes_then_holds_it_stopped(
        tmp_path: Path, trace: Path, durable_segment: Path) -> None:
    seg = durable_segment
    assert undurable(tmp_path / "data", trace) == {}  # all durable: nothing to find yet
    # a writer that appends 20 bytes 0.3 s from now, without fsync: found only if it is let run between looks
    child = subprocess.Popen([sys.executable, "-c",
                              f"import time; time.sleep(0.3); open({str(seg)!r}, 'ab').write(b'b' * 20); "
                              "time.sleep(60)"])
    try:
        pending = freeze_with_undurable(child.pid, tmp_path / "data", trace, random.Random(0), timeout=10)
        assert pending == {seg: (100, 120)}
        assert is_stopped(child.pid), "the process was not left stopped for the kill"
    finally:
        child.kill()
        child.wait()


def test_freeze_gives_up_with_nothing_undurable_after_its_timeout(tmp_path: Path, trace: Path,
                                                                   durable_segment: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert freeze_with_undurable(child.pid, tmp_path / "data", trace, random.Random(0), timeout=0.2) == {}
        assert is_stopped(child.pid)
    finally:
        child.kill()
        child.wait()
