"""The leader-epoch cache and its checkpoint file: Kafka's LeaderEpochFileCache semantics, case by case."""

from __future__ import annotations

from pathlib import Path

import pytest

from oncelog.storage.leader_epoch import (
    LEADER_EPOCH_CHECKPOINT,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    LeaderEpochCache,
    LeaderEpochCheckpointError,
)

UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def cache(tmp_path: Path, *entries: tuple[int, int]) -> LeaderEpochCache:
    c = LeaderEpochCache(tmp_path / LEADER_EPOCH_CHECKPOINT, "t-0")
    for epoch, start in entries:
        c.assign(epoch, start)
    return c


def pairs(c: LeaderEpochCache) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in c.entries()]


def test_checkpoint_file_is_kafkas_text_format_and_loads_back(tmp_path: Path) -> None:
    c = cache(tmp_path, (0, 0), (3, 1200))
    assert (tmp_path / LEADER_EPOCH_CHECKPOINT).read_text() == "0\n2\n0 0\n3 1200\n"
    assert pairs(LeaderEpochCache.load(tmp_path / LEADER_EPOCH_CHECKPOINT, "t-0")) == [(0, 0), (3, 1200)]
    c.clear()
    assert (tmp_path / LEADER_EPOCH_CHECKPOINT).read_text() == "0\n0\n"
    assert pairs(LeaderEpochCache.load(tmp_path / LEADER_EPOCH_CHECKPOINT, "t-0")) == []


@pytest.mark.parametrize("text", ["", "0\n", "1\n0\n", "0\n2\n0 0\n", "0\n1\n0\n", "0\n1\nx 1\n",
                                  "0\n2\n3 5\n2 9\n", "0\n2\n1 5\n2 5\n", "0\n1\n1 5\n7 9\n"])
def test_malformed_checkpoint_is_an_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / LEADER_EPOCH_CHECKPOINT
    path.write_text(text)
    with pytest.raises(LeaderEpochCheckpointError):
        LeaderEpochCache.load(path, "t-0")


def test_missing_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        LeaderEpochCache.load(tmp_path / LEADER_EPOCH_CHECKPOINT, "t-0")


def test_assign_rules(tmp_path: Path) -> None:
    c = cache(tmp_path, (2, 10))
    assert not c.assign(2, 10) and not c.assign(2, 15)  # same epoch, not earlier: nothing to do
    assert c.assign(3, 20) and pairs(c) == [(2, 10), (3, 20)]
    assert c.assign(3, 18) and pairs(c) == [(2, 10), (3, 18)]  # same epoch, earlier start: replaced
    assert c.assign(5, 18) and pairs(c) == [(2, 10), (5, 18)]  # a start already taken: the newer epoch wins
    assert c.assign(4, 30) and pairs(c) == [(2, 10), (4, 30)]  # an older epoch truncates the conflicting ones
    with pytest.raises(ValueError):
        c.assign(-1, 40)
    with pytest.raises(ValueError):
        c.assign(6, -1)
    assert pairs(LeaderEpochCache.load(c.path, "t-0")) == [(2, 10), (4, 30)]  # every change persisted


def test_end_offset_for_as_kafka(tmp_path: Path) -> None:
    assert cache(tmp_path).end_offset_for(0, 5) == UNDEFINED  # nothing known
    c = cache(tmp_path, (0, 10), (2, 13), (4, 17))
    assert c.end_offset_for(UNDEFINED_EPOCH, 20) == UNDEFINED
    assert c.end_offset_for(4, 20) == (4, 20)  # the latest epoch ends at the log end
    assert c.end_offset_for(2, 20) == (2, 17)
    assert c.end_offset_for(0, 20) == (0, 13)
    assert c.end_offset_for(1, 20) == (0, 13)  # no exact epoch: the one before, ending where the next starts
    assert c.end_offset_for(3, 20) == (2, 17)
    assert c.end_offset_for(5, 20) == UNDEFINED  # above every epoch
    c2 = cache(tmp_path, (5, 11), (6, 12))
    assert c2.end_offset_for(4, 20) == (4, 11)  # below every epoch: the requested one, up to the first start


def test_truncate_from_end(tmp_path: Path) -> None:
    c = cache(tmp_path, (2, 6), (3, 8), (4, 11))
    assert not c.truncate_from_end(12) and pairs(c) == [(2, 6), (3, 8), (4, 11)]
    assert c.truncate_from_end(11) and pairs(c) == [(2, 6), (3, 8)]
    assert c.truncate_from_end(7) and pairs(c) == [(2, 6)]
    assert pairs(LeaderEpochCache.load(c.path, "t-0")) == [(2, 6)]


@pytest.mark.parametrize("start,expect", [
    (5, [(2, 6), (3, 8), (4, 11)]), (6, [(2, 6), (3, 8), (4, 11)]), (8, [(3, 8), (4, 11)]),
    (9, [(3, 9), (4, 11)]), (11, [(4, 11)]), (12, [(4, 12)]),
])
def test_truncate_from_start(tmp_path: Path, start: int, expect: list[tuple[int, int]]) -> None:
    c = cache(tmp_path, (2, 6), (3, 8), (4, 11))
    c.truncate_from_start(start)
    assert pairs(c) == expect
    assert pairs(LeaderEpochCache.load(c.path, "t-0")) == expect


def test_epoch_for_offset_and_assign_all(tmp_path: Path) -> None:
    c = cache(tmp_path)
    assert c.epoch_for_offset(3) is None and c.latest_epoch is None
    assert c.assign_all([EpochEntry(1, 0), EpochEntry(1, 4), EpochEntry(3, 9)])
    assert [c.epoch_for_offset(o) for o in (0, 8, 9, 100)] == [1, 1, 3, 3]
    assert c.latest_entry == EpochEntry(3, 9) and c.earliest_entry == EpochEntry(1, 0)
    assert pairs(LeaderEpochCache.load(c.path, "t-0")) == [(1, 0), (3, 9)]


def test_a_new_leaders_epoch_is_written_by_the_next_flush(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """KAFKA-15046: a broker taking over many partitions neither fsyncs nor writes each epoch file as it does; the
    log's next flush writes and fsyncs it, before the recovery point can pass a record of that epoch."""
    import os

    from oncelog.clock import SystemClock
    from oncelog.storage import LogConfig
    from oncelog.storage.log import PartitionLog

    plog = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig(), SystemClock(), clean_shutdown=True)
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    path = tmp_path / "t-0" / LEADER_EPOCH_CHECKPOINT
    before = path.read_text()
    plog.assign_leader_epoch(3, 0)
    assert synced == [] and path.read_text() == before and plog.leader_epoch_cache.latest_epoch == 3
    plog.flush()
    assert any(LEADER_EPOCH_CHECKPOINT in p for p in synced)  # written to a .tmp, fsynced, renamed
    assert pairs(LeaderEpochCache.load(path, "t-0")) == [(3, 0)]
    synced.clear()
    plog.flush()  # once
    assert not any(LEADER_EPOCH_CHECKPOINT in p for p in synced)
    plog.close()
