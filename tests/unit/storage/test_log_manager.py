"""LogManager and TopicCatalog: topics, partitions, configs, clean-shutdown marker, directory lock."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from storage_helpers import append, batch

from oncelog.storage import (
    CATALOG_FILE,
    CLEAN_SHUTDOWN_FILE,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    KafkaStorageError,
    LogConfig,
    LogManager,
    TopicExistsError,
    UnknownTopicError,
    validate_topic_name,
)
from oncelog.testing import MockClock


def test_topic_lifecycle_and_persistence(tmp_path: Path) -> None:
    mgr = LogManager.open(tmp_path, LogConfig(), MockClock())
    cid = mgr.cluster_id
    assert len(cid) == 22
    info = mgr.create_topic("orders", 3, {"retention.ms": "1000"})
    assert info.num_partitions == 3 and isinstance(info.topic_id, uuid.UUID)
    assert mgr.get_log("orders", 2) is not None and mgr.get_log("orders", 3) is None
    assert mgr.get_log("orders", 0).config.retention_ms == 1000  # type: ignore[union-attr]
    append(mgr.get_log("orders", 1), batch(3))  # type: ignore[arg-type]
    with pytest.raises(TopicExistsError):
        mgr.create_topic("orders", 1)
    mgr.create_topic("or_ders", 1)
    with pytest.raises(InvalidTopicError, match="collides"):
        mgr.create_topic("or.ders", 1)
    mgr.add_partitions("orders", 5)
    with pytest.raises(InvalidPartitionsError):
        mgr.add_partitions("orders", 5)
    mgr.set_topic_configs("orders", {"segment.bytes": "100000"})
    assert mgr.get_log("orders", 4).config.segment_bytes == 100000  # type: ignore[union-attr]
    assert mgr.get_log("orders", 4).config.retention_ms == LogConfig().retention_ms  # type: ignore[union-attr]
    with pytest.raises(InvalidConfigError):
        mgr.set_topic_configs("orders", {"segment.bytes": "x"})
    mgr.close()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    raw = json.loads((tmp_path / CATALOG_FILE).read_text())
    assert raw["cluster_id"] == cid

    mgr = LogManager.open(tmp_path, LogConfig(), MockClock())
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists() and not mgr.recovered
    assert mgr.cluster_id == cid
    assert {t.name for t in mgr.topics()} == {"orders", "or_ders"}
    assert mgr.topic("orders").num_partitions == 5 and mgr.topic("orders").topic_id == info.topic_id
    assert mgr.topic("orders").configs == {"segment.bytes": "100000"}
    assert mgr.get_log("orders", 1).log_end_offset == 3  # type: ignore[union-attr]
    mgr.delete_topic("orders")
    assert not list(tmp_path.glob("orders-*"))
    with pytest.raises(UnknownTopicError):
        mgr.delete_topic("orders")
    with pytest.raises(UnknownTopicError):
        mgr.topic("orders")
    mgr.create_topic("orders", 1)
    assert mgr.get_log("orders", 0).log_end_offset == 0  # type: ignore[union-attr]
    mgr.flush_all()
    assert mgr.apply_retention(0) == 0
    mgr.close()


def test_unclean_shutdown_detected_and_strays_removed(tmp_path: Path) -> None:
    mgr = LogManager.open(tmp_path, LogConfig(), MockClock())
    mgr.create_topic("a", 1)
    append(mgr.get_log("a", 0), batch(2))  # type: ignore[arg-type]
    mgr.flush_all()
    # crash: no close(); release the directory lock as process death would
    import os
    os.close(mgr._lock_fd)
    (tmp_path / "ghost-0").mkdir()
    (tmp_path / "a-7").mkdir()
    mgr = LogManager.open(tmp_path, LogConfig(), MockClock())
    assert mgr.recovered
    assert mgr.get_log("a", 0).log_end_offset == 2  # type: ignore[union-attr]
    assert not (tmp_path / "ghost-0").exists() and not (tmp_path / "a-7").exists()
    mgr.close()


def test_directory_lock(tmp_path: Path) -> None:
    mgr = LogManager.open(tmp_path, LogConfig(), MockClock())
    with pytest.raises(KafkaStorageError, match="in use"):
        LogManager.open(tmp_path, LogConfig(), MockClock())
    mgr.close()
    LogManager.open(tmp_path, LogConfig(), MockClock()).close()


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "with space", "slash/", "ünï"])
def test_invalid_topic_names(tmp_path: Path, name: str) -> None:
    with pytest.raises(InvalidTopicError):
        validate_topic_name(name)


def test_valid_names_and_bad_create_args(tmp_path: Path) -> None:
    for name in ["a", "A-b_c.d", "__consumer_offsets", "x" * 249]:
        validate_topic_name(name)
    mgr = LogManager.open(tmp_path, LogConfig(), MockClock())
    with pytest.raises(InvalidPartitionsError):
        mgr.create_topic("t", 0)
    with pytest.raises(InvalidConfigError):
        mgr.create_topic("t", 1, {"bogus": "1"})
    assert mgr.topics() == []
    mgr.close()


def test_a_replica_restarts_at_its_checkpointed_high_watermark(tmp_path: Path) -> None:
    """A cluster's replica checkpoints its high watermarks (periodically and at close); reopened, each log starts
    at its checkpointed value, 0 for a partition missing from the checkpoint, not at its log end. A single node
    (no checkpoint file) starts every log at its log end, as before."""
    from oncelog.storage.log_manager import HW_CHECKPOINT_FILE, read_hw_checkpoint
    from oncelog.storage.interface import HighWatermarkRule

    mgr = LogManager.open(tmp_path, LogConfig(), MockClock())
    mgr.create_topic("a", 2)
    for p in (0, 1):
        plog = mgr.get_log("a", p)
        assert plog is not None
        plog.high_watermark_rule = HighWatermarkRule.EXTERNAL
        append(plog, batch(5))
    mgr.get_log("a", 0).update_high_watermark(3)  # type: ignore[union-attr]
    mgr.get_log("a", 1).update_high_watermark(5)  # type: ignore[union-attr]
    mgr.write_hw_checkpoint()
    assert read_hw_checkpoint(tmp_path / HW_CHECKPOINT_FILE) == {("a", 0): 3, ("a", 1): 5}
    mgr.create_topic("b", 1)
    append(mgr.get_log("b", 0), batch(2))  # type: ignore[arg-type]
    mgr.close()  # not a replica's manager: no checkpoint written at close, the periodic one stands

    mgr = LogManager.open(tmp_path, LogConfig(), MockClock())
    hws = {(t, p): mgr.get_log(t, p).high_watermark for t, p in (("a", 0), ("a", 1), ("b", 0))}  # type: ignore[union-attr]
    assert hws == {("a", 0): 3, ("a", 1): 5, ("b", 0): 0}, hws
    mgr.checkpoint_high_watermarks = True
    mgr.get_log("b", 0).update_high_watermark(2)  # type: ignore[union-attr]
    mgr.close()  # a replica's manager checkpoints at close
    assert read_hw_checkpoint(tmp_path / HW_CHECKPOINT_FILE) == {("a", 0): 3, ("a", 1): 5, ("b", 0): 2}
    (tmp_path / HW_CHECKPOINT_FILE).write_text("a 0 3\ngarbage\n")
    assert read_hw_checkpoint(tmp_path / HW_CHECKPOINT_FILE) == {("a", 0): 3}

    (tmp_path / HW_CHECKPOINT_FILE).unlink()
    mgr = LogManager.open(tmp_path, LogConfig(), MockClock())
    assert mgr.get_log("a", 0).high_watermark == 5  # type: ignore[union-attr]
    mgr.close()


def test_a_new_topic_costs_no_fsync_per_partition_until_its_first_flush(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Creating thousands of partitions must not stall a broker on fsyncs (6 each: ~10 s per 1,000 here); a new
    partition's folder and files are made durable by its first flush, before any of its records counts as
    durable."""
    import os

    mgr = LogManager.open(tmp_path, LogConfig(), MockClock())
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    mgr.create_topic("many", 40)
    assert not [p for p in synced if "many-" in p]  # the catalog's own write is all
    plog = mgr.get_log("many", 7)
    assert plog is not None
    append(plog, batch(3))
    plog.flush()
    dirs = {p for p in synced if "many-" in p}
    assert str(tmp_path / "many-7") in dirs  # the folder (its files' entries), then the data
    assert not any("many-6" in p or "many-8" in p for p in synced)
    mgr.close()
    # a partition that was never flushed loads as an empty log
    again = LogManager.open(tmp_path, LogConfig(), MockClock())
    assert again.get_log("many", 6) is not None and again.get_log("many", 7).log_end_offset == 3  # type: ignore[union-attr]
    again.close()


def test_closing_with_threads_closes_every_log_cleanly(tmp_path: Path) -> None:
    """close(threads=4) (num.recovery.threads.per.data.dir) flushes every partition as close() does: the folder
    reopens clean, every record there, no recovery."""
    mgr = LogManager.open(tmp_path, LogConfig(), MockClock())
    mgr.create_topic("many", 12)
    for p in range(12):
        append(mgr.get_log("many", p), batch(p + 1))  # type: ignore[arg-type]
    mgr.close(threads=4)
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert all(plog.closed for plog in mgr.logs())
    mgr = LogManager.open(tmp_path, LogConfig(), MockClock())
    assert not mgr.recovered
    assert [mgr.get_log("many", p).log_end_offset for p in range(12)] == list(range(1, 13))  # type: ignore[union-attr]
    mgr.close()


def test_loading_with_threads_recovers_every_log_after_a_crash(tmp_path: Path) -> None:
    """open(threads=4) (num.recovery.threads.per.data.dir at start-up) recovers every partition's unflushed tail
    after a crash, and a torn tail is cut, as loading one log at a time does."""
    mgr = LogManager.open(tmp_path, LogConfig(), MockClock())
    mgr.create_topic("many", 12)
    for p in range(12):
        append(mgr.get_log("many", p), batch(p + 1))  # type: ignore[arg-type]
    torn = mgr.get_log("many", 5)
    assert torn is not None
    mgr.abandon()
    with torn.active_segment.log_path.open("r+b") as f:
        f.truncate(torn.active_segment.size - 3)
    mgr = LogManager.open(tmp_path, LogConfig(), MockClock(), threads=4)
    assert mgr.recovered
    ends = [mgr.get_log("many", p).log_end_offset for p in range(12)]  # type: ignore[union-attr]
    assert ends == [p + 1 if p != 5 else 0 for p in range(12)]
    mgr.close(threads=4)
