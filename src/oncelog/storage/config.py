"""Per-topic log configuration with Kafka's topic-config names, defaults and validation.

``TOPIC_CONFIG_KEYS`` is the table DescribeConfigs lists and AlterConfigs/CreateTopics validate against:
Kafka config name -> :class:`ConfigKey` (dataclass field, type, validator, doc). Keys that oncelog accepts
and stores but whose behaviour lives elsewhere (compaction, min.insync.replicas on a single node, ...) are in
the table too, so clients and tools that set them are not refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import InvalidConfigError

__all__ = ["LONG_MAX", "TOPIC_CONFIG_KEYS", "ConfigKey", "LogConfig"]

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
DAY_MS = 24 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * DAY_MS
    segment_jitter_ms: int = 0
    index_interval_bytes: int = 4096
    segment_index_bytes: int = 10 * 1024 * 1024
    retention_ms: int = 7 * DAY_MS
    retention_bytes: int = -1
    cleanup_policy: str = "delete"
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    compression_type: str = "producer"
    min_insync_replicas: int = 1
    delete_retention_ms: int = DAY_MS
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    file_delete_delay_ms: int = 60000
    preallocate: bool = False
    unclean_leader_election_enable: bool = False

    # ---------------------------------------------------------------- conversions
    @classmethod
    def from_kafka(cls, overrides: Mapping[str, str | None], defaults: LogConfig | None = None) -> LogConfig:
        """``defaults`` with the Kafka-named ``overrides`` applied; raises InvalidConfigError on any bad entry.

        A value of None removes nothing (the default stays); use it to express "reset to default" in callers.
        """
        base = defaults if defaults is not None else cls()
        changes: dict[str, Any] = {}
        for name, raw in overrides.items():
            key = TOPIC_CONFIG_KEYS.get(name)
            if key is None:
                raise InvalidConfigError(
                    f"unknown topic config {name!r}; supported keys: {', '.join(sorted(TOPIC_CONFIG_KEYS))}", name
                )
            if raw is None:
                continue
            changes[key.field] = key.parse(raw)
        return dataclasses.replace(base, **changes) if changes else base

    @staticmethod
    def validate_overrides(overrides: Mapping[str, str | None]) -> dict[str, str]:
        """Check every override and return them normalised to Kafka's string form (None entries dropped)."""
        out: dict[str, str] = {}
        for name, raw in overrides.items():
            key = TOPIC_CONFIG_KEYS.get(name)
            if key is None:
                raise InvalidConfigError(
                    f"unknown topic config {name!r}; supported keys: {', '.join(sorted(TOPIC_CONFIG_KEYS))}", name
                )
            if raw is None:
                continue
            out[name] = key.format(key.parse(raw))
        return out

    def to_kafka(self) -> dict[str, str]:
        """Every supported key with its value in Kafka's string form (for DescribeConfigs)."""
        return {name: key.format(getattr(self, key.field)) for name, key in TOPIC_CONFIG_KEYS.items()}

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete_enabled(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"


# -------------------------------------------------------------------- the key table
@dataclass(frozen=True, slots=True)
class ConfigKey:
    name: str
    field: str
    type: str  # Kafka ConfigType name: LONG, INT, STRING, LIST, BOOLEAN, DOUBLE
    validate: Callable[[Any], str | None]  # returns an error text or None
    doc: str

    @property
    def default(self) -> Any:
        return getattr(LogConfig(), self.field)

    def parse(self, raw: str) -> Any:
        s = str(raw).strip()
        value: Any
        try:
            if self.type in ("LONG", "INT"):
                value = int(s)
                lo, hi = (-(2**63), LONG_MAX) if self.type == "LONG" else (-(2**31), INT_MAX)
                if not lo <= value <= hi:
                    raise ValueError
            elif self.type == "DOUBLE":
                value = float(s)
            elif self.type == "BOOLEAN":
                if s.lower() not in ("true", "false"):
                    raise ValueError
                value = s.lower() == "true"
            elif self.type == "LIST":
                value = ",".join(p.strip() for p in s.split(",") if p.strip())
            else:
                value = s
        except ValueError:
            raise InvalidConfigError(
                f"invalid value {raw!r} for topic config {self.name!r}: expected a {self.type.lower()}", self.name
            ) from None
        err = self.validate(value)
        if err is not None:
            raise InvalidConfigError(f"invalid value {raw!r} for topic config {self.name!r}: {err}", self.name)
        return value

    def format(self, value: Any) -> str:
        if self.type == "BOOLEAN":
            return "true" if value else "false"
        return str(value)


def _at_least(n: int) -> Callable[[Any], str | None]:
    return lambda v: None if v >= n else f"must be at least {n}"


def _one_of(*options: str) -> Callable[[Any], str | None]:
    return lambda v: None if v in options else f"must be one of {', '.join(options)}"


def _subset_of(*options: str) -> Callable[[Any], str | None]:
    def check(v: str) -> str | None:
        parts = v.split(",") if v else []
        if not parts:
            return f"must list at least one of {', '.join(options)}"
        bad = [p for p in parts if p not in options]
        return f"{', '.join(bad)} not allowed; use {', '.join(options)}" if bad else None

    return check


def _ratio(v: float) -> str | None:
    return None if 0.0 <= v <= 1.0 else "must be between 0 and 1"


def _any(_v: Any) -> str | None:
    return None


_KEYS = [
    ConfigKey("segment.bytes", "segment_bytes", "INT", _at_least(14), "Roll a new segment when this size is reached."),
    ConfigKey("segment.ms", "segment_ms", "LONG", _at_least(1), "Roll a new segment after this time."),
    ConfigKey("segment.jitter.ms", "segment_jitter_ms", "LONG", _at_least(0), "Maximum random jitter on segment.ms."),
    ConfigKey("segment.index.bytes", "segment_index_bytes", "INT", _at_least(4),
              "Maximum size of an offset index; a full index rolls the segment."),
    ConfigKey("index.interval.bytes", "index_interval_bytes", "INT", _at_least(0),
              "Bytes of log between two offset index entries."),
    ConfigKey("retention.ms", "retention_ms", "LONG", _at_least(-1),
              "Delete segments whose newest record is older than this; -1 keeps them forever."),
    ConfigKey("retention.bytes", "retention_bytes", "LONG", _any,
              "Delete oldest segments while the partition is larger than this; -1 means no limit."),
    ConfigKey("cleanup.policy", "cleanup_policy", "LIST", _subset_of("delete", "compact"),
              "delete (retention) and/or compact."),
    ConfigKey("max.message.bytes", "max_message_bytes", "INT", _at_least(0),
              "Largest record batch size accepted."),
    ConfigKey("message.timestamp.type", "message_timestamp_type", "STRING", _one_of("CreateTime", "LogAppendTime"),
              "Whether record timestamps come from the producer or the broker."),
    ConfigKey("message.timestamp.before.max.ms", "message_timestamp_before_max_ms", "LONG", _at_least(0),
              "Maximum amount a CreateTime timestamp may be in the past."),
    ConfigKey("message.timestamp.after.max.ms", "message_timestamp_after_max_ms", "LONG", _at_least(0),
              "Maximum amount a CreateTime timestamp may be in the future."),
    ConfigKey("flush.messages", "flush_messages", "LONG", _at_least(1),
              "fsync after this many unflushed messages."),
    ConfigKey("flush.ms", "flush_ms", "LONG", _at_least(0), "fsync when data has been unflushed this long."),
    ConfigKey("compression.type", "compression_type", "STRING",
              _one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
              "Final compression of the topic; producer keeps the producer's codec."),
    ConfigKey("min.insync.replicas", "min_insync_replicas", "INT", _at_least(1),
              "Minimum replicas acknowledging acks=all writes (always 1 on a single node)."),
    ConfigKey("delete.retention.ms", "delete_retention_ms", "LONG", _at_least(0),
              "How long tombstones are kept by compaction."),
    ConfigKey("min.compaction.lag.ms", "min_compaction_lag_ms", "LONG", _at_least(0),
              "Minimum age before a record may be compacted."),
    ConfigKey("max.compaction.lag.ms", "max_compaction_lag_ms", "LONG", _at_least(1),
              "Maximum time a record stays ineligible for compaction."),
    ConfigKey("min.cleanable.dirty.ratio", "min_cleanable_dirty_ratio", "DOUBLE", _ratio,
              "Dirty ratio that triggers compaction."),
    ConfigKey("file.delete.delay.ms", "file_delete_delay_ms", "LONG", _at_least(0),
              "Delay before deleting a file from the file system."),
    ConfigKey("preallocate", "preallocate", "BOOLEAN", _any, "Preallocate segment files (ignored)."),
    ConfigKey("unclean.leader.election.enable", "unclean_leader_election_enable", "BOOLEAN", _any,
              "Ignored on a single node."),
]

TOPIC_CONFIG_KEYS: dict[str, ConfigKey] = {k.name: k for k in _KEYS}
