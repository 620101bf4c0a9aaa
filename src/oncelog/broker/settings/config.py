"""Broker settings: Kafka's names, Kafka's defaults where Kafka has one, checked when the broker starts.

Every setting is one row of ``_SETTINGS`` (name, type, default, unit, check, description); the settings reference
(``docs/settings.md``) is generated from that table (``make docs``; ``tests/unit/broker/test_broker_settings.py``
fails when they differ). A setting can come from a TOML file (``oncelog serve --config broker.toml``), flat with Kafka's
dotted names quoted (``"log.segment.bytes" = 1073741824``) or as nested tables (``[log] segment.bytes = ...``), and
from ``--set KEY=VALUE``, which wins over the file.

Kafka's names are the primary ones (``listeners``, ``advertised.listeners``, ``log.dirs``, ``node.id``); Kafka's
synonyms (``log.dir``, ``broker.id``, ``log.retention.hours`` ...) and oncelog's older names (``listener.host``,
``listener.port``, ``advertised.host``, ``advertised.port``) are aliases. When both a setting and an alias of it
are given, the setting wins (as ``log.retention.ms`` wins over ``log.retention.hours`` in Kafka's
``KafkaConfig``). A bad value fails the start with one line naming the setting as it was given.

DescribeConfigs on the broker reports every setting with its source: ``STATIC_BROKER_CONFIG`` for settings given
at start (by any of their names), ``DEFAULT_CONFIG`` otherwise; an alias in other units
(``log.retention.hours``) is reported in its own unit.

A cluster: ``metadata`` names the etcd endpoints (``etcd://HOST:PORT[,HOST:PORT]``, ``--metadata``) and ``node.id``
must be given; without ``metadata`` the broker is a single node and the cluster settings (replication, sessions,
the controller) are not used.
"""

from __future__ import annotations

import socket
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .values import (Check, _assignors, _authorizer, _bool, _cluster_name, _int, _listen, _metadata, _overrides, _path,
                     _policy, _rack, _str, _super_users, at_least, consumer_group_problem, one_of)
from .listeners import Endpoint, Listeners, parse_listeners, parse_port
from .security_checks import check_inter_broker, check_listeners
from .security import SECURITY_ROWS, SecuritySettings, listener_key, parse_protocol_map

__all__ = ["ALIASES", "BrokerConfig", "ConfigEntry", "ConfigError", "DEFAULT_CONFIG", "Endpoint", "Listeners",
           "SETTINGS", "STATIC_BROKER_CONFIG", "Setting", "TOPIC_DEFAULTS", "reference_markdown"]


class ConfigError(ValueError):
    """A broker setting is unknown or has a bad value (the message names it as the user gave it)."""


# ---------------------------------------------------------------------------------------------- table
@dataclass(frozen=True)
class Setting:
    """One broker setting. ``type`` is Kafka's ConfigDef type (DescribeConfigs' config_type)."""

    key: str
    attr: str
    type: str
    parse: Callable[[Any], Any]
    doc: str
    check: Check | None = None
    unit: str = ""  # "ms", "bytes": shown in the reference


@dataclass(frozen=True)
class Alias:
    """Another name of a setting. ``scale``: the alias is in units of ``scale`` of the setting (hours -> ms);
    ``part``: the alias sets one part of a listener (``"host"`` or ``"port"``)."""

    name: str
    target: str
    scale: int = 1
    part: str = ""
    kafka: bool = False  # a Kafka synonym (reported by DescribeConfigs), not one of oncelog's older names


_HOUR_MS = 3_600_000
_WEEK_MS = 7 * 24 * _HOUR_MS


@dataclass
class BrokerConfig(SecuritySettings):
    """Every broker setting as a typed attribute; :data:`SETTINGS` maps Kafka's names onto these (the security
    settings' attributes are :class:`~oncelog.broker.settings.security.SecuritySettings`')."""

    data_dir: Path = Path("./data")
    listeners: Listeners = Listeners((Endpoint("127.0.0.1", 9092),))
    advertised_listeners: Listeners | None = None
    node_id: int = 0
    metrics_listen: str = ""

    message_max_bytes: int = 1048588
    socket_request_max_bytes: int = 104857600
    max_connections: int = 2147483647
    max_connections_per_ip: int = 2147483647
    max_connections_per_ip_overrides: str = ""
    max_connection_creation_rate: int = 2147483647
    quota_window_num: int = 11
    quota_window_size_seconds: int = 1
    auto_create_topics_enable: bool = True
    num_partitions: int = 1
    default_replication_factor: int = 1
    delete_topic_enable: bool = True

    log_segment_bytes: int = 1073741824
    log_roll_ms: int = _WEEK_MS
    log_index_interval_bytes: int = 4096
    log_retention_ms: int = _WEEK_MS
    log_retention_bytes: int = -1
    log_retention_check_interval_ms: int = 300_000
    log_cleanup_policy: str = "delete"
    log_flush_interval_messages: int = 1
    log_flush_interval_ms: int = 1000
    log_message_timestamp_type: str = "CreateTime"
    log_cleaner_enable: bool = True
    log_cleaner_backoff_ms: int = 15_000
    num_recovery_threads_per_data_dir: int = 2

    transaction_state_log_num_partitions: int = 50
    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = _WEEK_MS
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    transaction_two_phase_commit_enable: bool = False
    transaction_version: int = 2
    request_timeout_ms: int = 30_000
    producer_id_expiration_ms: int = 86_400_000

    offsets_topic_num_partitions: int = 50
    offsets_retention_minutes: int = 10080
    offsets_retention_check_interval_ms: int = 600_000
    offsets_commit_timeout_ms: int = 5_000
    offset_metadata_max_bytes: int = 4096
    group_initial_rebalance_delay_ms: int = 3000
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    group_max_size: int = 2147483647
    group_consumer_session_timeout_ms: int = 45_000
    group_consumer_min_session_timeout_ms: int = 45_000
    group_consumer_max_session_timeout_ms: int = 60_000
    group_consumer_heartbeat_interval_ms: int = 5_000
    group_consumer_min_heartbeat_interval_ms: int = 5_000
    group_consumer_max_heartbeat_interval_ms: int = 15_000
    group_consumer_max_size: int = 2147483647
    group_consumer_assignors: str = "uniform,range"
    group_consumer_migration_policy: str = "bidirectional"

    metadata: str = ""  # etcd endpoints of a cluster; empty: a single node
    cluster_name: str = "oncelog"
    broker_rack: str | None = None
    broker_session_timeout_ms: int = 9000
    broker_heartbeat_interval_ms: int = 2000
    min_insync_replicas: int = 1
    offsets_topic_replication_factor: int = 3
    transaction_state_log_replication_factor: int = 3
    transaction_state_log_min_isr: int = 2
    replica_lag_time_max_ms: int = 30_000
    replica_fetch_wait_max_ms: int = 500
    max_incremental_fetch_session_cache_slots: int = 1000
    replica_fetch_max_bytes: int = 1048576
    replica_fetch_min_bytes: int = 1
    replica_fetch_backoff_ms: int = 1000
    replica_socket_timeout_ms: int = 30_000
    unclean_leader_election_enable: bool = False
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    leader_imbalance_per_broker_percentage: int = 10
    controlled_shutdown_enable: bool = True

    authorizer_class_name: str = ""  # empty: no authorization (Kafka's default)
    super_users: str = ""
    allow_everyone_if_no_acl_found: bool = False

    #: Kafka names of the settings given at start (by any of their names): DescribeConfigs' STATIC_BROKER_CONFIG
    given: set[str] = field(default_factory=set)

    @property
    def cluster_mode(self) -> bool:
        """True when the broker is one of a cluster whose metadata lives in etcd (``metadata`` is set)."""
        return bool(self.metadata)

    # -------------------------------------------------------------- the listeners, as the rest of the broker uses them
    @property
    def listener(self) -> Endpoint:
        """The first listener (``--listen`` sets it; the one a single node's clients are told of by default)."""
        return self.listeners[0]

    @property
    def host(self) -> str:
        return self.listener.host

    @property
    def port(self) -> int:
        return self.listener.port

    @port.setter
    def port(self, value: int) -> None:
        """The port actually bound (a listener on port 0 gets one from the kernel)."""
        self.bound(self.listener.name, value)

    def bound(self, name: str, port: int) -> None:
        """Listener ``name`` is bound to ``port`` (port 0 in the settings: the kernel chose it)."""
        self.listeners = Listeners(Endpoint(e.host, port, e.name) if e.name == name else e for e in self.listeners)

    @property
    def advertised(self) -> tuple[str, int]:
        """(host, port) clients are told to connect to: ``advertised.listeners``, else ``listeners``."""
        return self.advertised_for(self.listener.name)

    def advertised_for(self, name: str) -> tuple[str, int]:
        """(host, port) of listener ``name`` as clients and other brokers are told: its entry of
        ``advertised.listeners``, else of ``listeners``."""
        bound = self.listeners.named(name) or self.listener
        ep = (self.advertised_listeners.named(name) if self.advertised_listeners else None) or bound
        return ep.host or socket.gethostname(), ep.port or bound.port

    def protocol_of(self, name: str) -> str:
        """The security protocol of listener ``name`` (``listener.security.protocol.map``)."""
        return parse_protocol_map(self.listener_security_protocol_map).get(name, name)

    @property
    def inter_broker_listener(self) -> str:
        """The listener other brokers connect to: ``inter.broker.listener.name``, else the one named as
        ``security.inter.broker.protocol`` (Kafka's ``KafkaConfig.interBrokerListenerName``)."""
        return self.inter_broker_listener_name or self.security_inter_broker_protocol

    def topic_defaults(self) -> dict[str, str]:
        """Topic config defaults from the broker's settings (``segment.bytes`` from ``log.segment.bytes`` ...)."""
        return {topic_key: _kafka_str(getattr(self, SETTINGS[key].attr)) for topic_key, key in TOPIC_DEFAULTS.items()}

    # -------------------------------------------------------------- setting values
    def set(self, key: str, value: Any) -> None:
        """Set one setting by any of its names (``log.segment.bytes``, ``log.retention.hours``, ``broker.id``)."""
        alias = ALIASES.get(key)
        setting = SETTINGS.get(alias.target if alias else key)
        if setting is None and listener_key(key) is not None:
            self._set_listener_setting(key, value)
            return
        if setting is None:
            raise ConfigError(f"unknown broker setting {key!r}{_did_you_mean(key)}; docs/settings.md lists "
                              f"every setting")
        try:
            if alias is not None and alias.part:
                parsed: Any = self._with_part(setting, alias.part, value)
            else:
                parsed = setting.parse(value)
                if alias is not None and alias.scale != 1:
                    parsed = parsed * alias.scale if parsed >= 0 else parsed
            if setting.check is not None:
                err = setting.check(parsed)
                if err is not None:
                    raise ValueError(err)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"bad value {_show(value)} for broker setting {key!r}: {e}") from None
        setattr(self, setting.attr, parsed)
        self.given.add(setting.key)

    def _set_listener_setting(self, key: str, value: Any) -> None:
        """``listener.name.<l>.[<mech>.]<setting>``: checked as ``<setting>`` is, kept in ``listener_settings``."""
        _, base, _ = listener_key(key) or ("", key, None)
        setting = SETTINGS[base]
        try:
            parsed = setting.parse(value)
            if setting.check is not None and (err := setting.check(parsed)) is not None:
                raise ValueError(err)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"bad value {_show(value) if setting.type != 'PASSWORD' else '(hidden)'} for broker "
                              f"setting {key!r}: {e}") from None
        self.listener_settings = {**self.listener_settings, key: _kafka_str(parsed)}
        self.given.add(key)

    def _with_part(self, setting: Setting, part: str, value: Any) -> Listeners:
        current = getattr(self, setting.attr) or self.listeners
        first = current[0]
        if part == "host":
            first = Endpoint(_str(value), first.port, first.name)
        else:
            first = Endpoint(first.host, parse_port(value), first.name)
        return Listeners((first, *current[1:]))

    def apply(self, values: Mapping[str, Any]) -> None:
        """Set many settings; aliases first, so a setting given under its own name wins over an alias of it."""
        flat = _flatten(values)
        for k in sorted(flat, key=lambda k: k not in ALIASES):
            self.set(k, flat[k])

    def validate(self) -> None:
        """Checks across settings, once all are set (raises :class:`ConfigError`)."""
        if self.max_connections_per_ip == 0 and not self.max_connections_per_ip_overrides.strip():
            raise ConfigError("max.connections.per.ip can be set to zero only if max.connections.per.ip.overrides "
                              "is set (the addresses that may connect)")
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ConfigError(f"group.min.session.timeout.ms ({self.group_min_session_timeout_ms}) is above "
                              f"group.max.session.timeout.ms ({self.group_max_session_timeout_ms})")
        if (err := consumer_group_problem(self.group_consumer_min_session_timeout_ms,
                                          self.group_consumer_session_timeout_ms,
                                          self.group_consumer_max_session_timeout_ms,
                                          self.group_consumer_min_heartbeat_interval_ms,
                                          self.group_consumer_heartbeat_interval_ms,
                                          self.group_consumer_max_heartbeat_interval_ms)) is not None:
            raise ConfigError(err)
        if (err := check_listeners(self)) is not None:
            raise ConfigError(err)
        for ep in self.listeners:
            adv = self.advertised_listeners.named(ep.name) if self.advertised_listeners else None
            if (adv or ep).host in ("0.0.0.0", "::") and (adv is not None or "listeners" in self.given):
                raise ConfigError(
                    f"{'advertised.listeners' if adv else 'listeners'} binds {(adv or ep).host}, which clients "
                    f"cannot connect to; set advertised.listeners to an address they can reach, e.g. "
                    f"{ep.name}://broker1.example.com:{ep.port}")
        if not self.cluster_mode:
            if self.default_replication_factor != 1:
                raise ConfigError(
                    f"default.replication.factor is {self.default_replication_factor}, but this broker is a single "
                    f"node (no metadata setting): it must be 1; start a cluster with --metadata etcd://HOST:PORT")
            return
        if "node.id" not in self.given:
            raise ConfigError("a broker of a cluster needs its own id: set --node-id N (node.id), unique in the "
                              "cluster")
        if self.broker_heartbeat_interval_ms >= self.broker_session_timeout_ms:
            raise ConfigError(
                f"broker.heartbeat.interval.ms ({self.broker_heartbeat_interval_ms}) must be below "
                f"broker.session.timeout.ms ({self.broker_session_timeout_ms}), or the session expires between two "
                f"heartbeats")
        if self.replica_socket_timeout_ms < self.replica_fetch_wait_max_ms:
            raise ConfigError(
                f"replica.socket.timeout.ms ({self.replica_socket_timeout_ms}) must be at least "
                f"replica.fetch.wait.max.ms ({self.replica_fetch_wait_max_ms}), or every idle replica fetch times out")
        if (err := check_inter_broker(self)) is not None:
            raise ConfigError(err)
        for ep in self.listeners:
            if self.advertised_for(ep.name)[0] in ("0.0.0.0", "::"):
                raise ConfigError(
                    f"the other brokers and clients cannot connect to {self.advertised_for(ep.name)[0]}: set "
                    f"advertised.listeners to an address of this machine they can reach, e.g. "
                    f"{ep.name}://broker1.example.com:{ep.port}")

    @classmethod
    def load(cls, path: Path | None = None, overrides: Mapping[str, Any] | None = None) -> BrokerConfig:
        """Settings from a TOML file, then ``overrides`` (``--set``) on top; validated."""
        cfg = cls()
        if path is not None:
            try:
                with open(path, "rb") as f:
                    data = tomllib.load(f)
            except FileNotFoundError:
                raise ConfigError(f"config file {path} does not exist") from None
            except IsADirectoryError:
                raise ConfigError(f"config file {path} is a folder, not a TOML file") from None
            except PermissionError:
                raise ConfigError(f"config file {path} cannot be read (permission denied)") from None
            except tomllib.TOMLDecodeError as e:
                raise ConfigError(f"config file {path} is not valid TOML: {e}") from None
            cfg.apply(data)
        if overrides:
            cfg.apply(overrides)
        cfg.validate()
        return cfg

    def entries(self) -> list[ConfigEntry]:
        """Every setting with Kafka's name (and Kafka's synonyms in their own units), for DescribeConfigs."""
        out = []
        for s in SETTINGS.values():
            value = getattr(self, s.attr)
            source = STATIC_BROKER_CONFIG if s.key in self.given else DEFAULT_CONFIG
            out.append(ConfigEntry(s.key, _kafka_str(value), source, s.type, s.doc))
            for a in _SYNONYMS.get(s.key, ()):
                scaled = value if not isinstance(value, int) or value < 0 else value // a.scale
                out.append(ConfigEntry(a.name, _kafka_str(scaled), source, s.type,
                                       f"{s.key} in {'hours' if a.scale == _HOUR_MS else 'minutes'}"
                                       if a.scale != 1 else s.doc))
        for key, value in sorted(self.listener_settings.items()):  # listener.name.<l>.<setting>, as given
            base = SETTINGS[(listener_key(key) or ("", key, None))[1]]
            out.append(ConfigEntry(key, value, STATIC_BROKER_CONFIG, base.type, base.doc))
        return out

    def describe(self) -> dict[str, Any]:
        """Kafka name -> value (Kafka's string form)."""
        return {e.key: e.value for e in self.entries()}


#: DescribeConfigs config sources (Kafka's ``DescribeConfigsResponse.ConfigSource``)
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5


@dataclass(frozen=True)
class ConfigEntry:
    key: str
    value: str
    source: int
    type: str
    doc: str


def _kafka_str(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _show(v: Any) -> str:
    return repr(v) if isinstance(v, str) else str(v)


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict):
            out.update(_flatten(v, key))
        else:
            out[key] = v
    return out


def _did_you_mean(key: str) -> str:
    import difflib

    close = difflib.get_close_matches(key, [*SETTINGS, *ALIASES], n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close else ""


_MS, _B = "ms", "bytes"

_SETTINGS: list[Setting] = [
    # -- where and who
    Setting("log.dirs", "data_dir", "LIST", _path, "Folder holding every partition log and the broker's state "
            "(one folder; `--data-dir`)."),
    Setting("listeners", "listeners", "LIST", parse_listeners, "Where the broker accepts clients: "
            "`NAME://HOST:PORT,...`, one per listener (`--listen HOST:PORT`: one PLAINTEXT listener); port 0 takes "
            "a free one. docs/security.md: TLS and SASL listeners."),
    Setting("advertised.listeners", "advertised_listeners", "LIST", parse_listeners, "The address of each "
            "listener that clients and other brokers are told to connect to (Metadata, FindCoordinator); "
            "default: `listeners`."),
    Setting("node.id", "node_id", "INT", _int, "This broker's id (`--node-id`; must be given, and unique, in a "
            "cluster).", at_least(0)),
    Setting("metrics.listen", "metrics_listen", "STRING", _str, "`HOST:PORT` of the Prometheus `/metrics` "
            "endpoint; empty: off.", _listen),
    # -- requests and topics
    Setting("message.max.bytes", "message_max_bytes", "INT", _int, "Largest record batch a topic accepts "
            "(its default `max.message.bytes`).", at_least(0), _B),
    Setting("socket.request.max.bytes", "socket_request_max_bytes", "INT", _int, "Largest request; a larger one "
            "closes the connection.", at_least(1), _B),
    # -- connection limits and client quotas (docs/security.md)
    Setting("max.connections", "max_connections", "INT", _int, "Most connections the broker holds; past it a new "
            "one waits to be accepted until another closes.", at_least(0)),
    Setting("max.connections.per.ip", "max_connections_per_ip", "INT", _int, "Most connections from one address; "
            "one more is closed at once.", at_least(0)),
    Setting("max.connections.per.ip.overrides", "max_connections_per_ip_overrides", "STRING", _str, "Other "
            "maxima for some addresses: `HOST:COUNT,HOST:COUNT`.", _overrides),
    Setting("max.connection.creation.rate", "max_connection_creation_rate", "INT", _int, "Most new connections "
            "accepted per second; faster ones are accepted late.", at_least(0)),
    Setting("quota.window.num", "quota_window_num", "INT", _int, "Samples a client's rate is measured over "
            "(client quotas, connection rates).", at_least(1)),
    Setting("quota.window.size.seconds", "quota_window_size_seconds", "INT", _int, "Length of one sample of a "
            "rate.", at_least(1)),
    Setting("auto.create.topics.enable", "auto_create_topics_enable", "BOOLEAN", _bool, "Create a topic a "
            "producer or a metadata request names, if it does not exist."),
    Setting("num.partitions", "num_partitions", "INT", _int, "Partitions of an auto-created topic (and of "
            "CreateTopics asking for the default).", at_least(1)),
    Setting("default.replication.factor", "default_replication_factor", "INT", _int, "Replicas of a new topic "
            "(auto-created, or CreateTopics asking for the default); must be 1 on a single node.", at_least(1)),
    Setting("delete.topic.enable", "delete_topic_enable", "BOOLEAN", _bool, "Allow DeleteTopics."),
    # -- the log
    Setting("log.segment.bytes", "log_segment_bytes", "INT", _int, "A segment is rolled when it reaches this "
            "size (topic default `segment.bytes`).", at_least(14), _B),
    Setting("log.roll.ms", "log_roll_ms", "LONG", _int, "A segment is rolled when its first record is this old "
            "(topic default `segment.ms`).", at_least(1), _MS),
    Setting("log.index.interval.bytes", "log_index_interval_bytes", "INT", _int, "Bytes of log between two "
            "offset index entries.", at_least(0), _B),
    Setting("log.retention.ms", "log_retention_ms", "LONG", _int, "Segments whose newest record is older are "
            "deleted; -1: never (topic default `retention.ms`).", at_least(-1), _MS),
    Setting("log.retention.bytes", "log_retention_bytes", "LONG", _int, "Oldest segments are deleted while a "
            "partition is larger; -1: no limit (topic default `retention.bytes`).", at_least(-1), _B),
    Setting("log.retention.check.interval.ms", "log_retention_check_interval_ms", "LONG", _int,
            "How often retention runs.", at_least(1), _MS),
    Setting("log.cleanup.policy", "log_cleanup_policy", "LIST", _str, "`delete` (retention), `compact` or both "
            "(topic default `cleanup.policy`).", _policy),
    Setting("log.flush.interval.messages", "log_flush_interval_messages", "LONG", _int, "1: a produce with "
            "acks=all is answered once its batch is fsynced (group commit) and consumers see only durable "
            "records. Above 1: answered from the page cache, fsynced every `log.flush.interval.ms`.",
            at_least(1)),
    Setting("log.flush.interval.ms", "log_flush_interval_ms", "LONG", _int, "Background fsync period when "
            "`log.flush.interval.messages` is above 1.", at_least(0), _MS),
    Setting("log.message.timestamp.type", "log_message_timestamp_type", "STRING", _str, "`CreateTime` (the "
            "producer's) or `LogAppendTime` (the broker's).", one_of("CreateTime", "LogAppendTime")),
    Setting("log.cleaner.enable", "log_cleaner_enable", "BOOLEAN", _bool, "Compact the topics whose "
            "`cleanup.policy` includes `compact`."),
    Setting("log.cleaner.backoff.ms", "log_cleaner_backoff_ms", "LONG", _int, "Pause between log cleaner "
            "passes.", at_least(0), _MS),
    Setting("num.recovery.threads.per.data.dir", "num_recovery_threads_per_data_dir", "INT", _int, "Partition logs "
            "recovered at once at start-up after a crash, and flushed and closed at once at shutdown (a few fsyncs "
            "each).", at_least(1)),
    # -- transactions
    Setting("transaction.state.log.num.partitions", "transaction_state_log_num_partitions", "INT", _int,
            "Partitions of `__transaction_state` (fixed once the topic exists).", at_least(1)),
    Setting("transaction.max.timeout.ms", "transaction_max_timeout_ms", "INT", _int, "Largest "
            "`transaction.timeout.ms` a producer may ask for; InitProducerId above it fails.", at_least(1), _MS),
    Setting("transactional.id.expiration.ms", "transactional_id_expiration_ms", "INT", _int, "A transactional "
            "id with no transaction for this long is forgotten.", at_least(1), _MS),
    Setting("transaction.abort.timed.out.transaction.cleanup.interval.ms",
            "transaction_abort_timed_out_transaction_cleanup_interval_ms", "INT", _int, "Longest the coordinator "
            "goes without checking its timers (a transaction is aborted at its own timeout, not on this interval; "
            "the check catches a jump of the wall clock).", at_least(1), _MS),
    Setting("transaction.remove.expired.transaction.cleanup.interval.ms",
            "transaction_remove_expired_transaction_cleanup_interval_ms", "INT", _int, "Longest the coordinator "
            "goes without checking its timers (an idle transactional id is removed at its own expiry, not on this "
            "interval); the smaller of the two cleanup intervals counts.", at_least(1), _MS),
    Setting("transaction.two.phase.commit.enable", "transaction_two_phase_commit_enable", "BOOLEAN", _bool,
            "Allow KIP-939 two-phase-commit transactions (needed by the Spark exactly-once sink). A prepared "
            "transaction never times out: until its producer completes it, it holds back the last stable offset "
            "of its partitions (`oncelog txn find-hanging` / `abort` end it by hand)."),
    Setting("transaction.version", "transaction_version", "SHORT", _int, "The level of Kafka's `transaction.version` "
            "feature this broker finalizes (Kafka 4.0's default, 2, sets it with `kafka-storage format` / "
            "`kafka-features`; give every broker of a cluster the same). ApiVersions tells clients; 2 lets them use "
            "transactions V2 (KIP-890 part 2: EndTxn v5 bumps the epoch of every transaction, Produce v12 and "
            "TxnOffsetCommit v5 add their partition themselves). Requests are served by their version whatever the "
            "level, as Kafka does: transactions V1 clients (librdkafka, kafka-python, aiokafka) work either way. "
            "Timeouts and fencing abort with this level's epoch rules.", lambda v: None if v in (0, 1, 2) else
            "must be 0, 1 or 2"),
    Setting("request.timeout.ms", "request_timeout_ms", "INT", _int, "A transaction coordinator write that is not "
            "durable within this answers COORDINATOR_NOT_AVAILABLE (the client retries).", at_least(1), _MS),
    Setting("producer.id.expiration.ms", "producer_id_expiration_ms", "INT", _int, "A partition forgets an "
            "idempotent producer's state after this long without a write from it.", at_least(1), _MS),
    # -- consumer groups
    Setting("offsets.topic.num.partitions", "offsets_topic_num_partitions", "INT", _int, "Partitions of "
            "`__consumer_offsets` (fixed once the topic exists).", at_least(1)),
    Setting("offsets.retention.minutes", "offsets_retention_minutes", "INT", _int, "Committed offsets of a "
            "group with no members are deleted after this long.", at_least(1)),
    Setting("offsets.retention.check.interval.ms", "offsets_retention_check_interval_ms", "LONG", _int,
            "How often expired offsets are removed.", at_least(1), _MS),
    Setting("offsets.commit.timeout.ms", "offsets_commit_timeout_ms", "INT", _int, "A group coordinator write "
            "(offset commit, group metadata) that is not durable within this answers COORDINATOR_NOT_AVAILABLE.",
            at_least(1), _MS),
    Setting("offset.metadata.max.bytes", "offset_metadata_max_bytes", "INT", _int, "Largest metadata string of a "
            "committed offset; a larger one fails with OFFSET_METADATA_TOO_LARGE.", at_least(0), _B),
    Setting("group.initial.rebalance.delay.ms", "group_initial_rebalance_delay_ms", "INT", _int, "How long a new "
            "group waits for more members before its first rebalance.", at_least(0), _MS),
    Setting("group.min.session.timeout.ms", "group_min_session_timeout_ms", "INT", _int, "Smallest "
            "`session.timeout.ms` a member may ask for.", at_least(1), _MS),
    Setting("group.max.session.timeout.ms", "group_max_session_timeout_ms", "INT", _int, "Largest "
            "`session.timeout.ms` a member may ask for.", at_least(1), _MS),
    Setting("group.max.size", "group_max_size", "INT", _int, "Most members in one group; more are refused with "
            "GROUP_MAX_SIZE_REACHED.", at_least(1)),
    # -- consumer groups of the KIP-848 protocol (group.protocol=consumer)
    Setting("group.consumer.session.timeout.ms", "group_consumer_session_timeout_ms", "INT", _int, "A member of "
            "a consumer group that does not heartbeat for this long is removed (a group's own "
            "`consumer.session.timeout.ms` wins).", at_least(1), _MS),
    Setting("group.consumer.min.session.timeout.ms", "group_consumer_min_session_timeout_ms", "INT", _int,
            "Smallest session timeout a consumer group may be given.", at_least(1), _MS),
    Setting("group.consumer.max.session.timeout.ms", "group_consumer_max_session_timeout_ms", "INT", _int,
            "Largest session timeout a consumer group may be given.", at_least(1), _MS),
    Setting("group.consumer.heartbeat.interval.ms", "group_consumer_heartbeat_interval_ms", "INT", _int, "How "
            "often members of a consumer group heartbeat (a group's own `consumer.heartbeat.interval.ms` wins).",
            at_least(1), _MS),
    Setting("group.consumer.min.heartbeat.interval.ms", "group_consumer_min_heartbeat_interval_ms", "INT", _int,
            "Smallest heartbeat interval a consumer group may be given.", at_least(1), _MS),
    Setting("group.consumer.max.heartbeat.interval.ms", "group_consumer_max_heartbeat_interval_ms", "INT", _int,
            "Largest heartbeat interval a consumer group may be given.", at_least(1), _MS),
    Setting("group.consumer.max.size", "group_consumer_max_size", "INT", _int, "Most members in one consumer "
            "group; more are refused with GROUP_MAX_SIZE_REACHED.", at_least(1)),
    Setting("group.consumer.assignors", "group_consumer_assignors", "LIST", _str, "The server-side assignors a "
            "consumer group may use (`uniform`, `range`, or Kafka's class names), the first the default; a member "
            "asks for one with `group.remote.assignor`.", _assignors),
    Setting("group.consumer.migration.policy", "group_consumer_migration_policy", "STRING", _str, "Whether a "
            "group moves online between the classic and the consumer protocol: `upgrade` (classic to consumer "
            "when a member joins with the consumer protocol), `downgrade` (back when the last such member leaves), "
            "`bidirectional` or `disabled`.", one_of("disabled", "upgrade", "downgrade", "bidirectional")),
    # -- a cluster (``metadata`` set)
    Setting("metadata", "metadata", "STRING", _metadata, "etcd endpoints of the cluster's metadata, "
            "`etcd://HOST:PORT[,HOST:PORT]` (`--metadata`); empty: a single node."),
    Setting("cluster.name", "cluster_name", "STRING", _cluster_name, "The cluster's name in etcd (several "
            "clusters can share one etcd)."),
    Setting("broker.rack", "broker_rack", "STRING", _rack, "This broker's rack: a partition's replicas go to "
            "different racks."),
    Setting("broker.session.timeout.ms", "broker_session_timeout_ms", "INT", _int, "A broker whose etcd lease is "
            "not refreshed for this long is gone (a crashed process is noticed at once: its listener refuses).",
            lambda v: None if v >= 2000 else "must be at least 2000 (etcd's shortest lease is 2 s)", _MS),
    Setting("broker.heartbeat.interval.ms", "broker_heartbeat_interval_ms", "INT", _int, "How often a broker "
            "refreshes its etcd lease.", at_least(100), _MS),
    Setting("min.insync.replicas", "min_insync_replicas", "INT", _int, "An `acks=all` produce needs this many "
            "in-sync replicas (topic default).", at_least(1)),
    Setting("offsets.topic.replication.factor", "offsets_topic_replication_factor", "SHORT", _int, "Replicas of "
            "`__consumer_offsets`.", at_least(1)),
    Setting("transaction.state.log.replication.factor", "transaction_state_log_replication_factor", "SHORT", _int,
            "Replicas of `__transaction_state`.", at_least(1)),
    Setting("transaction.state.log.min.isr", "transaction_state_log_min_isr", "INT", _int,
            "`min.insync.replicas` of `__transaction_state`.", at_least(1)),
    Setting("replica.lag.time.max.ms", "replica_lag_time_max_ms", "LONG", _int, "A follower not caught up for "
            "this long leaves the ISR.", at_least(1), _MS),
    Setting("max.incremental.fetch.session.cache.slots", "max_incremental_fetch_session_cache_slots", "INT", _int,
            "Incremental fetch sessions (KIP-227) the broker keeps; 0 turns them off.", at_least(0)),
    Setting("replica.fetch.wait.max.ms", "replica_fetch_wait_max_ms", "INT", _int, "Longest wait of a "
            "follower's fetch for new records.", at_least(0), _MS),
    Setting("replica.fetch.max.bytes", "replica_fetch_max_bytes", "INT", _int, "Bytes a follower asks for per "
            "partition and fetch.", at_least(1), _B),
    Setting("replica.fetch.min.bytes", "replica_fetch_min_bytes", "INT", _int, "Bytes a follower's fetch waits "
            "for.", at_least(1), _B),
    Setting("replica.fetch.backoff.ms", "replica_fetch_backoff_ms", "INT", _int, "Pause of a follower after a "
            "failed fetch.", at_least(0), _MS),
    Setting("replica.socket.timeout.ms", "replica_socket_timeout_ms", "INT", _int, "A follower's fetch without an "
            "answer for this long is retried on a new connection.", at_least(1), _MS),
    Setting("unclean.leader.election.enable", "unclean_leader_election_enable", "BOOLEAN", _bool, "Elect a "
            "replica outside the ISR when no ISR member is alive (may lose acknowledged records)."),
    Setting("auto.leader.rebalance.enable", "auto_leader_rebalance_enable", "BOOLEAN", _bool, "Move leadership "
            "back to the preferred replicas."),
    Setting("leader.imbalance.check.interval.seconds", "leader_imbalance_check_interval_seconds", "LONG", _int,
            "How often the controller checks the leader balance.", at_least(1)),
    Setting("leader.imbalance.per.broker.percentage", "leader_imbalance_per_broker_percentage", "INT", _int,
            "Leader imbalance a broker may have before the controller rebalances.", at_least(0)),
    Setting("controlled.shutdown.enable", "controlled_shutdown_enable", "BOOLEAN", _bool, "A broker stopping "
            "cleanly first moves its leaderships to other brokers."),
    # -- authorization (docs/security.md)
    Setting("authorizer.class.name", "authorizer_class_name", "STRING", _str, "Empty: every request is allowed. "
            "`org.apache.kafka.metadata.authorizer.StandardAuthorizer` (or `kafka.security.authorizer.AclAuthorizer`):"
            " requests are checked against the ACLs.", _authorizer),
    Setting("super.users", "super_users", "LIST", _super_users, "Principals allowed everything, separated by `;` "
            "(`User:admin;User:broker`)."),
    Setting("allow.everyone.if.no.acl.found", "allow_everyone_if_no_acl_found", "BOOLEAN", _bool, "With an "
            "authorizer: allow a request on a resource that has no ACL at all (else deny)."),
    # -- security (docs/security.md)
    *(Setting(*row) for row in SECURITY_ROWS),
]

SETTINGS: dict[str, Setting] = {s.key: s for s in _SETTINGS}

_ALIAS_LIST = [
    Alias("log.dir", "log.dirs", kafka=True),
    Alias("broker.id", "node.id", kafka=True),
    Alias("log.retention.minutes", "log.retention.ms", 60_000, kafka=True),
    Alias("log.retention.hours", "log.retention.ms", _HOUR_MS, kafka=True),
    Alias("log.roll.hours", "log.roll.ms", _HOUR_MS, kafka=True),
    Alias("listener.host", "listeners", part="host"),
    Alias("listener.port", "listeners", part="port"),
    Alias("advertised.host", "advertised.listeners", part="host"),
    Alias("advertised.port", "advertised.listeners", part="port"),
]
ALIASES: dict[str, Alias] = {a.name: a for a in _ALIAS_LIST}
_SYNONYMS: dict[str, list[Alias]] = {}
for _a in _ALIAS_LIST:
    if _a.kafka:
        _SYNONYMS.setdefault(_a.target, []).append(_a)

#: topic config -> the broker setting that is its default (Kafka's ``LogConfig`` synonyms)
TOPIC_DEFAULTS: dict[str, str] = {
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "index.interval.bytes": "log.index.interval.bytes",
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "cleanup.policy": "log.cleanup.policy",
    "max.message.bytes": "message.max.bytes",
    "message.timestamp.type": "log.message.timestamp.type",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "min.insync.replicas": "min.insync.replicas",
}

assert {s.attr for s in _SETTINGS} | {"given", "listener_settings"} == {f.name for f in fields(BrokerConfig)}, \
    "setting table drift"
assert all(a.target in SETTINGS for a in _ALIAS_LIST)


def _default_text(s: Setting) -> str:
    value = getattr(BrokerConfig(), s.attr)
    if value is None:
        return "`listeners`" if s.key == "advertised.listeners" else "(none)"
    text = f"./{value}" if isinstance(value, Path) and not value.is_absolute() else _kafka_str(value)
    if not text:
        return "(empty: off)"
    out = f"`{text}`" + (f" {s.unit}" if s.unit else "")
    if isinstance(value, int) and s.unit == _MS and value >= 60_000 and value % 60_000 == 0:
        mins = value // 60_000
        out += f" ({mins // 1440} d)" if mins % 1440 == 0 else f" ({mins // 60} h)" if mins % 60 == 0 \
            else f" ({mins} min)"
    return out


def reference_markdown(settings: Iterable[Setting] = _SETTINGS) -> str:
    """The settings reference of ``docs/settings.md``: one row per setting with its other names, default (and unit), meaning."""
    aliases: dict[str, list[str]] = {}
    for a in _ALIAS_LIST:
        aliases.setdefault(a.target, []).append(a.name)
    rows = ["| setting (other names) | default | meaning |", "|---|---|---|"]
    for s in settings:
        names = f"`{s.key}`" + "".join(f"<br>`{a}`" for a in aliases.get(s.key, ()))
        rows.append(f"| {names} | {_default_text(s)} | {s.doc} |")
    return "\n".join(rows) + "\n"
