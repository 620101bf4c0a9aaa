"""Broker settings, with Kafka's names where Kafka has one.

Every setting can come from a TOML file (``oncelog serve --config broker.toml``), either flat with Kafka's dotted
names quoted (``"log.segment.bytes" = 1073741824``) or as nested tables (``[log] segment.bytes = ...``); command line
flags override the file.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

__all__ = ["BrokerConfig", "ConfigError", "SETTINGS"]


class ConfigError(ValueError):
    """A broker setting is unknown or has a bad value."""


def _bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("true", "1", "yes", "on"):
        return True
    if s in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"not a boolean: {v!r}")


def _int(v: Any) -> int:
    if isinstance(v, bool):
        raise ValueError(f"not an integer: {v!r}")
    return int(v)


@dataclass(frozen=True)
class Setting:
    key: str  # Kafka's name
    attr: str  # BrokerConfig attribute
    parse: Callable[[Any], Any]
    doc: str


@dataclass
class BrokerConfig:
    data_dir: Path = Path("./data")
    host: str = "127.0.0.1"
    port: int = 9092
    advertised_host: str | None = None
    advertised_port: int | None = None
    node_id: int = 0
    metrics_listen: str = ""  # "host:port" of the Prometheus endpoint; empty = off

    message_max_bytes: int = 1048588
    socket_request_max_bytes: int = 104857600
    auto_create_topics_enable: bool = True
    num_partitions: int = 1
    default_replication_factor: int = 1
    delete_topic_enable: bool = True

    log_segment_bytes: int = 1073741824
    log_roll_ms: int = 7 * 24 * 3600 * 1000
    log_index_interval_bytes: int = 4096
    log_retention_ms: int = 7 * 24 * 3600 * 1000
    log_retention_bytes: int = -1
    log_retention_check_interval_ms: int = 300_000
    log_cleanup_policy: str = "delete"
    # Durability: 1 = every acks=all produce is acknowledged only after fsync (group commit); N > 1 or
    # log.flush.interval.ms > 0 trades durability for speed (high watermark = log end, fsync in the background).
    log_flush_interval_messages: int = 1
    log_flush_interval_ms: int = 1000
    log_message_timestamp_type: str = "CreateTime"
    log_cleaner_enable: bool = True
    log_cleaner_backoff_ms: int = 15_000

    # Consumed by later subsystems (transactions, groups); defaults are Kafka's.
    transaction_state_log_num_partitions: int = 50
    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    transaction_two_phase_commit_enable: bool = False
    request_timeout_ms: int = 30_000
    producer_id_expiration_ms: int = 86_400_000
    offsets_topic_num_partitions: int = 50
    offsets_retention_minutes: int = 10080
    offsets_retention_check_interval_ms: int = 600_000
    offsets_commit_timeout_ms: int = 5_000
    group_initial_rebalance_delay_ms: int = 3000
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    group_max_size: int = 2147483647

    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def advertised(self) -> tuple[str, int]:
        return (self.advertised_host or self.host, self.advertised_port or self.port)

    def set(self, key: str, value: Any) -> None:
        """Set one setting by its Kafka name (``log.segment.bytes``) or attribute name."""
        setting = SETTINGS.get(key) or _BY_ATTR.get(key)
        if setting is None:
            raise ConfigError(f"unknown broker setting {key!r}; known settings: {', '.join(sorted(SETTINGS))}")
        try:
            setattr(self, setting.attr, setting.parse(value))
        except (TypeError, ValueError) as e:
            raise ConfigError(f"bad value {value!r} for broker setting {setting.key!r}: {e}") from None

    def apply(self, values: dict[str, Any]) -> None:
        for k, v in _flatten(values).items():
            self.set(k, v)

    @classmethod
    def load(cls, path: Path | None = None, overrides: dict[str, Any] | None = None) -> "BrokerConfig":
        cfg = cls()
        if path is not None:
            try:
                with open(path, "rb") as f:
                    data = tomllib.load(f)
            except FileNotFoundError:
                raise ConfigError(f"config file {path} does not exist") from None
            except tomllib.TOMLDecodeError as e:
                raise ConfigError(f"config file {path} is not valid TOML: {e}") from None
            cfg.apply(data)
        if overrides:
            cfg.apply(overrides)
        return cfg

    def describe(self) -> dict[str, Any]:
        """Kafka name -> current value, for DescribeConfigs on the broker resource."""
        return {s.key: getattr(self, s.attr) for s in SETTINGS.values()}


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict):
            out.update(_flatten(v, key))
        else:
            out[key] = v
    return out


def _listen(v: Any) -> str:
    s = str(v)
    if s and ":" not in s:
        raise ValueError("expected HOST:PORT")
    return s


_SPECS: list[tuple[str, str, Callable[[Any], Any], str]] = [
    ("log.dirs", "data_dir", lambda v: Path(str(v)), "folder holding all partition logs"),
    ("listener.host", "host", str, "address to listen on"),
    ("listener.port", "port", _int, "port to listen on"),
    ("advertised.host", "advertised_host", str, "host clients are told to connect to"),
    ("advertised.port", "advertised_port", _int, "port clients are told to connect to"),
    ("node.id", "node_id", _int, "this broker's id"),
    ("metrics.listen", "metrics_listen", _listen, "HOST:PORT of the Prometheus /metrics endpoint (empty: off)"),
    ("message.max.bytes", "message_max_bytes", _int, "largest record batch accepted"),
    ("socket.request.max.bytes", "socket_request_max_bytes", _int, "largest request frame; larger closes"),
    ("auto.create.topics.enable", "auto_create_topics_enable", _bool, "create unknown topics on metadata/produce"),
    ("num.partitions", "num_partitions", _int, "partitions of auto-created topics"),
    ("default.replication.factor", "default_replication_factor", _int, "accepted for compatibility; always 1"),
    ("delete.topic.enable", "delete_topic_enable", _bool, "allow DeleteTopics"),
    ("log.segment.bytes", "log_segment_bytes", _int, "segment size before roll"),
    ("log.roll.ms", "log_roll_ms", _int, "segment age before roll"),
    ("log.index.interval.bytes", "log_index_interval_bytes", _int, "bytes between offset index entries"),
    ("log.retention.ms", "log_retention_ms", _int, "age after which segments are deleted (-1: never)"),
    ("log.retention.bytes", "log_retention_bytes", _int, "partition size above which old segments go (-1: none)"),
    ("log.retention.check.interval.ms", "log_retention_check_interval_ms", _int, "how often retention runs"),
    ("log.cleanup.policy", "log_cleanup_policy", str, "delete or compact"),
    ("log.flush.interval.messages", "log_flush_interval_messages", _int,
     "1: fsync before acknowledging acks=all (group commit); larger: background flush"),
    ("log.flush.interval.ms", "log_flush_interval_ms", _int, "background flush period when not durable per append"),
    ("log.message.timestamp.type", "log_message_timestamp_type", str, "CreateTime or LogAppendTime"),
    ("log.cleaner.enable", "log_cleaner_enable", _bool, "compact topics whose cleanup.policy has compact"),
    ("log.cleaner.backoff.ms", "log_cleaner_backoff_ms", _int, "pause between log cleaner passes"),
    ("transaction.state.log.num.partitions", "transaction_state_log_num_partitions", _int, ""),
    ("transaction.max.timeout.ms", "transaction_max_timeout_ms", _int, ""),
    ("transactional.id.expiration.ms", "transactional_id_expiration_ms", _int, ""),
    ("transaction.abort.timed.out.transaction.cleanup.interval.ms",
     "transaction_abort_timed_out_transaction_cleanup_interval_ms", _int, ""),
    ("transaction.remove.expired.transaction.cleanup.interval.ms",
     "transaction_remove_expired_transaction_cleanup_interval_ms", _int, ""),
    ("transaction.two.phase.commit.enable", "transaction_two_phase_commit_enable", _bool, "KIP-939"),
    ("request.timeout.ms", "request_timeout_ms", _int,
     "a transaction coordinator write not durable within this answers COORDINATOR_NOT_AVAILABLE"),
    ("producer.id.expiration.ms", "producer_id_expiration_ms", _int, ""),
    ("offsets.topic.num.partitions", "offsets_topic_num_partitions", _int, ""),
    ("offsets.retention.minutes", "offsets_retention_minutes", _int, ""),
    ("offsets.retention.check.interval.ms", "offsets_retention_check_interval_ms", _int, ""),
    ("offsets.commit.timeout.ms", "offsets_commit_timeout_ms", _int,
     "a group coordinator write (offset commit, group metadata) not durable within this answers "
     "COORDINATOR_NOT_AVAILABLE"),
    ("group.initial.rebalance.delay.ms", "group_initial_rebalance_delay_ms", _int, ""),
    ("group.min.session.timeout.ms", "group_min_session_timeout_ms", _int, ""),
    ("group.max.session.timeout.ms", "group_max_session_timeout_ms", _int, ""),
    ("group.max.size", "group_max_size", _int, ""),
]

SETTINGS: dict[str, Setting] = {k: Setting(k, a, p, d) for k, a, p, d in _SPECS}
_BY_ATTR: dict[str, Setting] = {s.attr: s for s in SETTINGS.values()}
_ALIASES = {"log.retention.hours": ("log.retention.ms", 3600_000), "log.retention.minutes": ("log.retention.ms", 60_000),
            "log.roll.hours": ("log.roll.ms", 3600_000)}
for _alias, (_target, _mult) in _ALIASES.items():
    _t = SETTINGS[_target]
    SETTINGS[_alias] = Setting(_alias, _t.attr, (lambda m: lambda v: _int(v) * m)(_mult), f"{_target} in other units")

assert {s.attr for s in SETTINGS.values()} | {"extra"} == {f.name for f in fields(BrokerConfig)}, "setting table drift"
