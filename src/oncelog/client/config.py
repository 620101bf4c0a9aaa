"""Client configuration with Kafka's key names (``bootstrap.servers``, ``linger.ms``...), validated up front."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from oncelog.protocol.batch_codes import Compression

from .errors import ConfigError
from .security import SECURITY_KEYS, ClientSecurity, parse_security

__all__ = [
    "AdminConfig",
    "ConsumerConfig",
    "ProducerConfig",
    "parse_admin_config",
    "parse_consumer_config",
    "parse_producer_config",
]


def _int(lo: int, hi: int = 2**31 - 1) -> Callable[[str, Any], int]:
    def parse(key: str, v: Any) -> int:
        try:
            n = int(v)
        except (TypeError, ValueError):
            raise ConfigError(f"{key} must be an integer, got {v!r}") from None
        if isinstance(v, bool) or not lo <= n <= hi:
            raise ConfigError(f"{key} must be between {lo} and {hi}, got {v!r}")
        return n
    return parse


def _bool(key: str, v: Any) -> bool:
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("true", "1", "yes"):
        return True
    if s in ("false", "0", "no"):
        return False
    raise ConfigError(f"{key} must be true or false, got {v!r}")


def _str(key: str, v: Any) -> str:
    if not isinstance(v, str):
        raise ConfigError(f"{key} must be a string, got {v!r}")
    return v


def _choice(mapping: dict[str, Any]) -> Callable[[str, Any], Any]:
    def parse(key: str, v: Any) -> Any:
        s = str(v).strip().lower()
        if s not in mapping:
            raise ConfigError(f"{key} must be one of {', '.join(mapping)}; got {v!r}")
        return mapping[s]
    return parse


def _acks(key: str, v: Any) -> int:
    s = str(v).strip().lower()
    if s in ("all", "-1"):
        return -1
    if s in ("0", "1"):
        return int(s)
    raise ConfigError(f"{key} must be 0, 1, -1 or all; got {v!r}")


def _idempotence(key: str, v: Any) -> bool:
    """An explicit ``enable.idempotence``; the default (None = not set) is resolved in ProducerConfig."""
    return _bool(key, v)


def _callback(key: str, v: Any) -> Any:
    if v is not None and not callable(v):
        raise ConfigError(f"{key} must be a callable, got {v!r}")
    return v


def _false_only(key: str, v: Any) -> bool:
    if _bool(key, v):
        raise ConfigError(f"{key}=true is not supported by oncelog.client (no end-of-partition events)")
    return False


def _optional_str(key: str, v: Any) -> str | None:
    if v is None:
        return None
    s = _str(key, v)
    if not s:
        raise ConfigError(f"{key} must not be empty (leave it unset for a non-transactional producer)")
    return s


_COMMON: dict[str, tuple[str, Callable[[str, Any], Any], Any]] = {
    "bootstrap.servers": ("bootstrap_servers", _str, None),
    "client.id": ("client_id", _str, "oncelog"),
    "request.timeout.ms": ("request_timeout_ms", _int(1), 30000),
    "socket.connection.setup.timeout.ms": ("connect_timeout_ms", _int(1), 10000),
    "metadata.max.age.ms": ("metadata_max_age_ms", _int(1), 300000),
}

_PRODUCER: dict[str, tuple[str, Callable[[str, Any], Any], Any]] = {
    **_COMMON,
    "acks": ("acks", _acks, -1),
    # librdkafka's defaults (the client speaks confluent-kafka's configuration): 5 ms linger, 1,000,000-byte batches
    "linger.ms": ("linger_ms", _int(0, 900000), 5),
    "batch.size": ("batch_size", _int(1, 2**31 - 1), 1_000_000),
    "compression.type": ("compression", _choice(dict(Compression.BY_NAME)), Compression.NONE),
    "delivery.timeout.ms": ("delivery_timeout_ms", _int(1), 120000),
    "retries": ("retries", _int(0), 2**31 - 1),
    "retry.backoff.ms": ("retry_backoff_ms", _int(0), 100),
    "partitioner": ("partitioner", _choice({"murmur2_random": "murmur2_random"}), "murmur2_random"),
    "enable.idempotence": ("enable_idempotence", _idempotence, None),
    "max.in.flight.requests.per.connection": ("max_in_flight", _int(1), 5),
    "transactional.id": ("transactional_id", _optional_str, None),
    "transaction.timeout.ms": ("transaction_timeout_ms", _int(1), 60000),
    "transaction.two.phase.commit.enable": ("transaction_two_phase_commit_enable", _bool, False),
    "max.block.ms": ("max_block_ms", _int(0), 60000),
    "topic.metadata.propagation.max.ms": ("topic_metadata_propagation_max_ms", _int(0), 30000),
    "allow.auto.create.topics": ("allow_auto_create_topics", _bool, True),
    "message.max.bytes": ("message_max_bytes", _int(1), 1048576),
    #: confluent-kafka's: the default delivery callback of produce(), and whether it runs for failures only
    "on_delivery": ("on_delivery", _callback, None),
    #: librdkafka's names of the same settings
    "message.timeout.ms": ("delivery_timeout_ms", _int(1), 120000),
    "queue.buffering.max.ms": ("linger_ms", _int(0, 900000), 5),
    "compression.codec": ("compression", _choice(dict(Compression.BY_NAME)), Compression.NONE),
    "delivery.report.only.error": ("delivery_report_only_error", _bool, False),
}

#: assignor names (``partition.assignment.strategy``); Java class names map to them
ASSIGNOR_ALIASES = {
    "range": "range", "org.apache.kafka.clients.consumer.rangeassignor": "range",
    "roundrobin": "roundrobin", "org.apache.kafka.clients.consumer.roundrobinassignor": "roundrobin",
    "sticky": "sticky", "org.apache.kafka.clients.consumer.stickyassignor": "sticky",
    "cooperative-sticky": "cooperative-sticky",
    "org.apache.kafka.clients.consumer.cooperativestickyassignor": "cooperative-sticky",
}
#: Kafka's Java consumer default (``[RangeAssignor, CooperativeStickyAssignor]`` since 3.0): range is chosen by
#: the group; a later rolling bounce dropping "range" switches to cooperative rebalancing.
DEFAULT_ASSIGNORS = ("range", "cooperative-sticky")


def _assignors(key: str, v: Any) -> tuple[str, ...]:
    items = v.split(",") if isinstance(v, str) else list(v) if isinstance(v, (list, tuple)) else None
    if items is None:
        raise ConfigError(f"{key} must be a comma-separated list of assignors, got {v!r}")
    out: list[str] = []
    for item in (str(i).strip() for i in items):
        if not item:
            continue
        name = ASSIGNOR_ALIASES.get(item.lower())
        if name is None:
            raise ConfigError(f"{key}: unknown assignor {item!r}; use range, roundrobin, sticky or "
                              "cooperative-sticky")
        if name not in out:
            out.append(name)
    if not out:
        raise ConfigError(f"{key} names no assignor; use e.g. 'range,cooperative-sticky'")
    return tuple(out)


def _opt_str(key: str, v: Any) -> str | None:
    if v is None:
        return None
    s = _str(key, v)
    if not s:
        raise ConfigError(f"{key} must not be empty (leave it unset instead)")
    return s


def _opt_bool(key: str, v: Any) -> bool | None:
    return None if v is None else _bool(key, v)


_CONSUMER: dict[str, tuple[str, Callable[[str, Any], Any], Any]] = {
    **_COMMON,
    "group.id": ("group_id", _opt_str, None),
    "group.instance.id": ("group_instance_id", _opt_str, None),
    "partition.assignment.strategy": ("assignors", _assignors, DEFAULT_ASSIGNORS),
    "group.protocol": ("group_protocol", _choice({"classic": "classic", "consumer": "consumer"}), "classic"),
    "group.remote.assignor": ("group_remote_assignor", _opt_str, None),
    "session.timeout.ms": ("session_timeout_ms", _int(1), 45000),
    "heartbeat.interval.ms": ("heartbeat_interval_ms", _int(1), 3000),
    "max.poll.interval.ms": ("max_poll_interval_ms", _int(1), 300000),
    "auto.offset.reset": ("auto_offset_reset", _choice(
        {"earliest": "earliest", "smallest": "earliest", "beginning": "earliest",
         "latest": "latest", "largest": "latest", "end": "latest", "error": "error"}), "latest"),
    "isolation.level": ("isolation_level", _choice({"read_uncommitted": 0, "read_committed": 1}), 0),
    "fetch.min.bytes": ("fetch_min_bytes", _int(1), 1),
    "fetch.max.bytes": ("fetch_max_bytes", _int(1), 52428800),
    "max.partition.fetch.bytes": ("max_partition_fetch_bytes", _int(1), 1048576),
    "fetch.max.wait.ms": ("fetch_max_wait_ms", _int(0), 500),
    "fetch.wait.max.ms": ("fetch_max_wait_ms", _int(0), 500),
    "check.crcs": ("check_crcs", _bool, True),
    #: unset: true when group.id is set (Kafka's default), false otherwise
    "enable.auto.commit": ("enable_auto_commit", _opt_bool, None),
    "auto.commit.interval.ms": ("auto_commit_interval_ms", _int(0), 5000),
    "enable.auto.offset.store": ("enable_auto_offset_store", _bool, True),
    "retry.backoff.ms": ("retry_backoff_ms", _int(0), 100),
    #: librdkafka's default (false); end-of-partition events are not emitted
    "enable.partition.eof": ("enable_partition_eof", _false_only, False),
}

_ADMIN = dict(_COMMON)


def _parse(kind: str, schema: dict[str, tuple[str, Callable[[str, Any], Any], Any]],
           conf: Mapping[str, Any]) -> dict[str, Any]:
    out = {attr: default for attr, _, default in schema.values()}
    security: dict[str, Any] = {}
    for key, value in conf.items():
        if key in SECURITY_KEYS:  # TLS and SASL: client/security.py
            security[key] = value
            continue
        entry = schema.get(key)
        if entry is None:
            near = difflib.get_close_matches(key, [*schema, *SECURITY_KEYS], 1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise ConfigError(f"unknown {kind} configuration key {key!r}{hint}")
        attr, parse, _ = entry
        out[attr] = parse(key, value)
    if not out["bootstrap_servers"]:
        raise ConfigError(f"{kind} configuration needs bootstrap.servers (e.g. '127.0.0.1:9092')")
    out["security"] = parse_security(security)
    return out


@dataclass(frozen=True, slots=True)
class AdminConfig:
    bootstrap_servers: str
    client_id: str
    request_timeout_ms: int
    connect_timeout_ms: int
    metadata_max_age_ms: int
    security: ClientSecurity  # security.protocol, ssl.*, sasl.* (client/security.py)


@dataclass(frozen=True, slots=True)
class ProducerConfig(AdminConfig):
    acks: int
    linger_ms: int
    batch_size: int
    compression: int
    delivery_timeout_ms: int
    retries: int
    retry_backoff_ms: int
    partitioner: str
    enable_idempotence: bool  # None at construction = not set: on unless a setting conflicts (Kafka 3+)
    allow_auto_create_topics: bool
    message_max_bytes: int
    max_in_flight: int = 5
    transactional_id: str | None = None
    transaction_timeout_ms: int = 60000
    transaction_two_phase_commit_enable: bool = False
    on_delivery: Any = None
    delivery_report_only_error: bool = False
    max_block_ms: int = 60000  # default timeout of init_transactions/commit/abort/send_offsets_to_transaction
    #: librdkafka's: how long records of a topic that does not exist (yet) wait for it before failing
    topic_metadata_propagation_max_ms: int = 30000

    def __post_init__(self) -> None:
        explicit: bool | None = self.enable_idempotence
        conflicts = []
        if self.acks != -1:
            conflicts.append(f"acks must be all (got {self.acks})")
        if self.retries == 0:
            conflicts.append("retries must be greater than 0")
        if self.max_in_flight > 5:
            conflicts.append(f"max.in.flight.requests.per.connection must be at most 5 (got {self.max_in_flight})")
        if self.transactional_id is not None and explicit is False:
            raise ConfigError(f"transactional.id={self.transactional_id!r} needs enable.idempotence=true; "
                              "remove enable.idempotence=false")
        if conflicts and (explicit or self.transactional_id is not None):
            why = "transactional.id is set" if explicit is None else "enable.idempotence=true"
            raise ConfigError(f"{why}, so {'; '.join(conflicts)}: change those settings or disable idempotence")
        if self.transaction_two_phase_commit_enable and self.transactional_id is None:
            raise ConfigError("transaction.two.phase.commit.enable=true needs a transactional.id")
        resolved = (not conflicts) if explicit is None else explicit
        object.__setattr__(self, "enable_idempotence", resolved)


@dataclass(frozen=True, slots=True)
class ConsumerConfig(AdminConfig):
    group_id: str | None
    auto_offset_reset: str
    isolation_level: int
    fetch_min_bytes: int
    fetch_max_bytes: int
    max_partition_fetch_bytes: int
    fetch_max_wait_ms: int
    check_crcs: bool
    enable_auto_commit: bool
    retry_backoff_ms: int
    group_instance_id: str | None = None
    assignors: tuple[str, ...] = DEFAULT_ASSIGNORS
    session_timeout_ms: int = 45000
    heartbeat_interval_ms: int = 3000
    max_poll_interval_ms: int = 300000
    auto_commit_interval_ms: int = 5000
    enable_auto_offset_store: bool = True
    enable_partition_eof: bool = False
    group_protocol: str = "classic"  # "consumer": KIP-848, the broker assigns
    group_remote_assignor: str | None = None


def parse_admin_config(conf: Mapping[str, Any]) -> AdminConfig:
    return AdminConfig(**_parse("admin", _ADMIN, conf))


def parse_producer_config(conf: Mapping[str, Any]) -> ProducerConfig:
    return ProducerConfig(**_parse("producer", _PRODUCER, conf))


def parse_consumer_config(conf: Mapping[str, Any]) -> ConsumerConfig:
    out = _parse("consumer", _CONSUMER, conf)
    if out["enable_auto_commit"] is None:
        out["enable_auto_commit"] = out["group_id"] is not None
    if out["group_id"] is None:
        for key, attr in (("group.instance.id", "group_instance_id"), ("enable.auto.commit", "enable_auto_commit")):
            if out[attr]:
                raise ConfigError(f"{key} needs group.id: set group.id, or remove {key}")
    if out["group_protocol"] == "consumer":  # librdkafka's checks: the broker owns these with KIP-848
        for key in ("session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy"):
            if key in conf:
                raise ConfigError(f"{key} is not supported with group.protocol=consumer: the broker sets it "
                                  f"(group.consumer.* settings{'; use group.remote.assignor' if 'strategy' in key else ''})")
    if out["heartbeat_interval_ms"] >= out["session_timeout_ms"]:
        raise ConfigError(f"heartbeat.interval.ms ({out['heartbeat_interval_ms']}) must be lower than "
                          f"session.timeout.ms ({out['session_timeout_ms']}); Kafka advises at most a third of it")
    return ConsumerConfig(**out)
