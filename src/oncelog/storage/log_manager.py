"""All partition logs of one data directory, plus the topic catalog.

Layout::

    <data_dir>/
        .lock                       flock'ed while a broker owns the directory
        .clean_shutdown             present only between a clean close and the next open
        __cluster_metadata.json     TopicCatalog
        <topic>-<partition>/        PartitionLog folders
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from oncelog.clock import Clock

from .catalog import CATALOG_FILE, TopicCatalog, TopicInfo
from .config import LogConfig
from .errors import (
    InvalidPartitionsError,
    InvalidTopicError,
    KafkaStorageError,
    TopicExistsError,
    UnknownTopicError,
)
from .files import fsync_dir, write_atomic

if TYPE_CHECKING:
    from .log import PartitionLog

__all__ = ["CLEAN_SHUTDOWN_FILE", "HW_CHECKPOINT_FILE", "MAX_TOPIC_NAME_LENGTH", "LogManager", "read_hw_checkpoint",
           "validate_topic_name"]

log = logging.getLogger("oncelog.storage")

CLEAN_SHUTDOWN_FILE = ".clean_shutdown"
LOCK_FILE = ".lock"
#: a replica's high watermarks (Kafka's ``replication-offset-checkpoint``): "topic partition offset" per line
HW_CHECKPOINT_FILE = "replication-offset-checkpoint"
MAX_TOPIC_NAME_LENGTH = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")
_DELETE_SUFFIX = "-delete"


def _partition_log() -> type[PartitionLog]:
    """The partition log class, imported with the first log (record batches, the loader and the cleaner come with
    it): a fresh data folder opens without them."""
    from .log import PartitionLog

    return PartitionLog


def validate_topic_name(name: str) -> None:
    """Raise InvalidTopicError unless ``name`` is a legal Kafka topic name."""
    if not name:
        raise InvalidTopicError("topic name is empty; use 1-249 characters from [a-zA-Z0-9._-]")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name {name!r} is not allowed; '.' and '..' are reserved")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"topic name of {len(name)} characters is too long; the limit is {MAX_TOPIC_NAME_LENGTH}"
        )
    if not _LEGAL.fullmatch(name):
        bad = sorted({c for c in name if not _LEGAL.fullmatch(c)})
        raise InvalidTopicError(
            f"topic name {name!r} contains illegal character(s) {''.join(bad)!r}; use only [a-zA-Z0-9._-]"
        )


def _collision_key(name: str) -> str:
    return name.replace(".", "_")


class LogManager:
    def __init__(self, data_dir: Path, defaults: LogConfig, clock: Clock, catalog: TopicCatalog,
                 lock_fd: int) -> None:
        self.data_dir = data_dir
        self.defaults = defaults
        self.clock = clock
        self.catalog = catalog
        self._lock_fd = lock_fd
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._lock = threading.RLock()
        self.closed = False
        self.recovered = False  # True when the last shutdown was not clean
        #: a cluster's replica keeps its high watermarks in HW_CHECKPOINT_FILE (written periodically and at close)
        self.checkpoint_high_watermarks = False

    # ---------------------------------------------------------------- open
    @classmethod
    def open(cls, data_dir: Path, defaults: LogConfig, clock: Clock, cluster_id: str | None = None,
             threads: int = 1) -> LogManager:
        """Open (or create) the data folder; a new one takes ``cluster_id`` when given (a broker of a cluster).
        ``threads``: how many partition logs are recovered at once after a crash (Kafka's
        ``num.recovery.threads.per.data.dir``, which LogManager.loadLogs uses): each log's unflushed tail is
        recovered and fsynced, and fsyncs of different files overlap (10,000 empty partitions on the 2-core box,
        medians of 3: 7.3 s with 1 thread, 5.9 s with 2). A clean load is one at a time: it is Python work that
        threads only slow down (2.2 s with 1 thread, 3.5 s with 2)."""
        data_dir = Path(data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        lock_fd = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(lock_fd)
            raise KafkaStorageError(
                f"data directory {data_dir} is in use by another broker process; stop it or use another directory"
            ) from None
        try:
            marker = data_dir / CLEAN_SHUTDOWN_FILE
            fresh = not (data_dir / CATALOG_FILE).exists()
            clean = marker.exists() or fresh
            if marker.exists():
                marker.unlink()
                fsync_dir(data_dir)
            catalog = TopicCatalog.open(data_dir, cluster_id)
            self = cls(data_dir, defaults, clock, catalog, lock_fd)
            self.recovered = not clean
            if not clean:
                log.info("data directory %s was not shut down cleanly; recovering partition logs", data_dir)
            self._remove_strays()
            hws = read_hw_checkpoint(data_dir / HW_CHECKPOINT_FILE)
            todo: list[tuple[str, int, LogConfig]] = []
            for info in catalog.topics():
                cfg = LogConfig.from_kafka(info.configs, defaults)
                todo += [(info.name, p, cfg) for p in range(info.num_partitions)]

            def load(item: tuple[str, int, LogConfig]) -> PartitionLog:
                name, p, cfg = item
                # a replica (the file exists only in a cluster) starts at its checkpointed high watermark, 0 when it
                # has none: what it has beyond is not known to be on every in-sync replica
                hw = None if hws is None else hws.get((name, p), 0)
                return _partition_log().open(self._dir_of(name, p), name, p, cfg, clock, clean_shutdown=clean,
                                             high_watermark=hw)

            if threads > 1 and not clean and len(todo) > 1:
                with ThreadPoolExecutor(min(threads, len(todo)), thread_name_prefix="log-load") as pool:
                    loaded = list(pool.map(load, todo))  # the first failure is raised
            else:
                loaded = [load(item) for item in todo]
            for (name, p, _), plog in zip(todo, loaded):
                self._logs[(name, p)] = plog
            return self
        except BaseException:
            fcntl.flock(lock_fd, fcntl.LOCK_UN)
            os.close(lock_fd)
            raise

    def _dir_of(self, topic: str, partition: int) -> Path:
        return self.data_dir / f"{topic}-{partition}"

    def _remove_strays(self) -> None:
        """Delete folders of deleted topics/partitions (a crash mid-delete leaves them behind)."""
        for p in self.data_dir.iterdir():
            if not p.is_dir():
                continue
            if p.name.endswith(_DELETE_SUFFIX):
                shutil.rmtree(p, ignore_errors=True)
                continue
            topic, dash, num = p.name.rpartition("-")
            if not dash or not num.isdigit():
                continue
            info = self.catalog.get(topic)
            if info is None or int(num) >= info.num_partitions:
                log.warning("removing %s: partition folder of a topic/partition that no longer exists", p)
                shutil.rmtree(p, ignore_errors=True)

    # ---------------------------------------------------------------- topics
    @property
    def cluster_id(self) -> str:
        return self.catalog.cluster_id

    def topics(self) -> list[TopicInfo]:
        return self.catalog.topics()

    def topic(self, name: str) -> TopicInfo:
        info = self.catalog.get(name)
        if info is None:
            raise UnknownTopicError(name)
        return info

    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def logs(self) -> list[PartitionLog]:
        return list(self._logs.values())

    def topic_config(self, name: str) -> LogConfig:
        return LogConfig.from_kafka(self.topic(name).configs, self.defaults)

    def create_topic(self, name: str, num_partitions: int, configs: dict[str, str] | None = None, *,
                     topic_id: uuid.UUID | None = None) -> TopicInfo:
        """``topic_id``: the cluster's id of the topic (a replica creating its log); a new one otherwise."""
        validate_topic_name(name)
        if num_partitions < 1:
            raise InvalidPartitionsError(f"topic {name!r} needs at least 1 partition, got {num_partitions}")
        overrides = LogConfig.validate_overrides(configs or {})
        cfg = LogConfig.from_kafka(overrides, self.defaults)
        with self._lock:
            if name in self.catalog:
                raise TopicExistsError(name)
            key = _collision_key(name)
            for t in self.catalog.topics():
                if _collision_key(t.name) == key:
                    raise InvalidTopicError(
                        f"topic {name!r} collides with existing topic {t.name!r} ('.' and '_' are equivalent in "
                        f"metric names); pick another name"
                    )
            for p in range(num_partitions):  # leftovers of an older topic of the same name
                shutil.rmtree(self._dir_of(name, p), ignore_errors=True)
            info = self.catalog.create(name, num_partitions, overrides, topic_id=topic_id)
            for p in range(num_partitions):
                self._logs[(name, p)] = _partition_log().open(self._dir_of(name, p), name, p, cfg, self.clock,
                                                          clean_shutdown=True, defer_sync=True)
            return info

    def delete_topic(self, name: str) -> None:
        with self._lock:
            info = self.topic(name)
            staged: list[Path] = []
            for p in range(info.num_partitions):
                plog = self._logs.pop((name, p), None)
                if plog is not None:
                    plog.close_without_flush()
                d = self._dir_of(name, p)
                if d.exists():
                    target = d.with_name(f"{d.name}.{info.topic_id.hex}{_DELETE_SUFFIX}")
                    os.replace(d, target)
                    staged.append(target)
            self.catalog.delete(name)
            for d in staged:
                shutil.rmtree(d, ignore_errors=True)

    def add_partitions(self, name: str, new_total: int) -> TopicInfo:
        with self._lock:
            info = self.topic(name)
            if new_total <= info.num_partitions:
                raise InvalidPartitionsError(
                    f"topic {name!r} has {info.num_partitions} partitions; the new count {new_total} must be larger"
                )
            cfg = LogConfig.from_kafka(info.configs, self.defaults)
            for p in range(info.num_partitions, new_total):
                shutil.rmtree(self._dir_of(name, p), ignore_errors=True)
                self._logs[(name, p)] = _partition_log().open(self._dir_of(name, p), name, p, cfg, self.clock,
                                                          clean_shutdown=True, defer_sync=True)
            return self.catalog.add_partitions(name, new_total)

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> TopicInfo:
        """Replace the topic's config overrides (AlterConfigs); validates first, applies to every partition."""
        with self._lock:
            info = self.topic(name)
            overrides = LogConfig.validate_overrides(configs)
            cfg = LogConfig.from_kafka(overrides, self.defaults)
            info = self.catalog.set_configs(name, overrides)
            for p in range(info.num_partitions):
                plog = self._logs.get((name, p))
                if plog is not None:
                    plog.update_config(cfg)
            return info

    set_configs = set_topic_configs

    def set_defaults(self, defaults: LogConfig) -> None:
        """New topic defaults (the broker's dynamic log.* settings changed): every log without an override of a
        setting takes the new value at once."""
        with self._lock:
            self.defaults = defaults
            for info in self.catalog.topics():
                cfg = LogConfig.from_kafka(info.configs, defaults)
                for p in range(info.num_partitions):
                    plog = self._logs.get((info.name, p))
                    if plog is not None:
                        plog.update_config(cfg)

    # ---------------------------------------------------------------- maintenance
    def flush_all(self) -> dict[tuple[str, int], int]:
        return {k: plog.flush() for k, plog in list(self._logs.items())}

    def apply_retention(self, now_ms: int) -> int:
        return sum(plog.apply_retention(now_ms) for plog in list(self._logs.values()))

    def write_hw_checkpoint(self) -> None:
        """Write every partition's high watermark to HW_CHECKPOINT_FILE (atomically, durably). A restarted replica
        starts from these, not from its log end (Kafka's ReplicaManager.checkpointHighWatermarks)."""
        with self._lock:
            lines = [f"{t} {p} {plog.high_watermark}\n" for (t, p), plog in sorted(self._logs.items())]
            write_atomic(self.data_dir / HW_CHECKPOINT_FILE, "".join(lines).encode())

    def close(self, threads: int = 1) -> None:
        """Flush and close every log (a replica: checkpoint its high watermarks), then write the clean-shutdown
        marker. ``threads``: how many logs close at once (Kafka's ``num.recovery.threads.per.data.dir``, which
        LogManager.shutdown flushes with): closing is a few fsyncs per partition, and fsyncs of different files
        overlap (5,000 partitions on the 2-core box: 38 s one at a time, 20 s with 2 threads, 7 s with 8)."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            try:
                if self.checkpoint_high_watermarks:
                    self.write_hw_checkpoint()
                logs = list(self._logs.values())
                if threads > 1 and len(logs) > 1:
                    with ThreadPoolExecutor(min(threads, len(logs)), thread_name_prefix="log-close") as pool:
                        for _ in pool.map(lambda plog: plog.close(), logs):  # the first failure is raised
                            pass
                else:
                    for plog in logs:
                        plog.close()
                write_atomic(self.data_dir / CLEAN_SHUTDOWN_FILE, b"")
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
                os.close(self._lock_fd)

    def abandon(self) -> None:
        """Close every file as a crash would leave them: no flush, no checkpoint, no clean-shutdown marker, so the
        next open recovers the logs as after a SIGKILL (what was written stays, as the page cache keeps it). For a
        test harness that crashes a broker inside its own process."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            try:
                for plog in self._logs.values():
                    plog.close_without_flush()
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
                os.close(self._lock_fd)

    def __repr__(self) -> str:
        return f"LogManager({self.data_dir}, {len(self.catalog.topics())} topic(s), {len(self._logs)} log(s))"


def read_hw_checkpoint(path: Path) -> dict[tuple[str, int], int] | None:
    """The checkpointed high watermarks (None when there is no file: a single node, or a replica never
    checkpointed). A line that does not parse is skipped with a warning (its partition starts at 0)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    out: dict[tuple[str, int], int] = {}
    for line in text.splitlines():
        try:
            topic, partition, offset = line.split(" ")  # topic names have no spaces
            out[(topic, int(partition))] = int(offset)
        except ValueError:
            log.warning("%s: line %r skipped (expected 'topic partition offset')", path, line)
    return out
