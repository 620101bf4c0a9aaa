"""Dynamic broker configs (KIP-226): which settings may change at run time, how a value is checked, how the layers
resolve (this broker's own over the cluster-wide default over static over the default), what DescribeConfigs reports,
and the replica manager handing new topic defaults to every log without an override."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from oncelog.broker.settings.config import DEFAULT_CONFIG, STATIC_BROKER_CONFIG, BrokerConfig
from oncelog.broker.settings.dynamic import (
    DYNAMIC,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    DynamicBrokerConfig,
    DynamicConfigError,
    Layers,
    broker_entries,
    default_entries,
    effective,
    validate,
)
from oncelog.broker.handlers.incremental_alter_configs import APPEND, DELETE, SET, SUBTRACT, _apply_broker
from oncelog.broker.replication.manager import ReplicaManager
from oncelog.broker.topics import TopicRegistry
from oncelog.cluster.changes import diff
from oncelog.cluster.model import ClusterView, PartitionState, TopicMeta
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.incremental_alter_configs_request import AlterableConfig
from oncelog.storage import LogConfig, LogManager
from oncelog.testing import MockClock
from oncelog.testing.memory_store import MemoryMetadataStore

WEEK_MS = 7 * 24 * 3600 * 1000


def _refused(configs: dict[str, Any]) -> DynamicConfigError:
    with pytest.raises(DynamicConfigError) as e:
        validate(configs)
    return e.value


def test_only_the_settings_kafka_and_oncelog_change_at_run_time_are_accepted() -> None:
    assert validate({"log.retention.ms": " 3600000", "unclean.leader.election.enable": "TRUE",
                     "log.cleanup.policy": "compact,delete"}) == {
        "log.retention.ms": "3600000", "unclean.leader.election.enable": "true", "log.cleanup.policy": "compact,delete"}
    e = _refused({"log.dirs": "/tmp/x", "log.retention.hours": "1", "log.retention.ms": "1"})
    assert e.code == ErrorCode.INVALID_REQUEST
    assert str(e) == "Cannot update these configs dynamically: Set(log.dirs, log.retention.hours)"
    e = _refused({"listeners": "PLAINTEXT://127.0.0.1:1"})  # dynamic in Kafka, read at start by oncelog
    assert e.code == ErrorCode.INVALID_REQUEST and str(e).startswith(
        "Cannot update these configs dynamically: Set(listeners) (oncelog reads listeners only at start")
    e = _refused({"log.retention.ms": "soon"})
    assert e.code == ErrorCode.INVALID_REQUEST and "log.retention.ms" in str(e) and "integer" in str(e)
    assert _refused({"min.insync.replicas": "0"}).code == ErrorCode.INVALID_REQUEST
    assert _refused({"log.cleanup.policy": "forever"}).code == ErrorCode.INVALID_REQUEST
    e = _refused({"no.such.setting": "1"})
    assert e.code == ErrorCode.INVALID_CONFIG and str(e) == "Unknown config name: no.such.setting"
    assert validate({}) == {}


def test_connection_limits_change_at_run_time_as_in_kafka() -> None:
    """Kafka's DynamicConnectionQuota: the acceptor reads them from the live settings for each new connection."""
    assert validate({"max.connections": "100", "max.connections.per.ip": "10",
                     "max.connections.per.ip.overrides": "127.0.0.2:50", "max.connection.creation.rate": "20"}) == {
        "max.connections": "100", "max.connections.per.ip": "10", "max.connections.per.ip.overrides": "127.0.0.2:50",
        "max.connection.creation.rate": "20"}
    e = _refused({"max.connections.per.ip.overrides": "127.0.0.2"})
    assert e.code == ErrorCode.INVALID_REQUEST and "HOST:COUNT" in str(e)
    assert _refused({"quota.window.num": "3"}).code == ErrorCode.INVALID_REQUEST  # read-only in Kafka too
    live = BrokerConfig.load(None, {"node.id": 1})
    DynamicBrokerConfig(live).update({None: {"max.connections.per.ip": "7"}})
    assert live.max_connections_per_ip == 7


def test_layers_resolve_own_over_cluster_over_static_over_default() -> None:
    static = BrokerConfig.load(None, {"node.id": 2, "log.retention.ms": 1000, "log.segment.bytes": 5000})
    layers = Layers({"log.retention.ms": "7", "bogus.key": "1"},
                    {"log.retention.ms": "8", "min.insync.replicas": "2", "num.partitions": "9",
                     "log.retention.bytes": "not a number"})
    config, sources = effective(static, layers)
    assert (config.log_retention_ms, sources["log.retention.ms"]) == (7, DYNAMIC_BROKER_CONFIG)
    assert (config.min_insync_replicas, sources["min.insync.replicas"]) == (2, DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert (config.log_segment_bytes, sources["log.segment.bytes"]) == (5000, STATIC_BROKER_CONFIG)
    assert (config.message_max_bytes, sources["message.max.bytes"]) == (1048588, DEFAULT_CONFIG)
    assert config.num_partitions == 1  # not a dynamic setting: ignored even if stored
    assert config.log_retention_bytes == -1  # a stored value that does not parse is skipped
    assert static.log_retention_ms == 1000  # the static config is not touched


def test_the_live_config_follows_the_view_and_falls_back_to_static() -> None:
    config = BrokerConfig.load(None, {"node.id": 1, "log.retention.ms": 1000})
    dyn = DynamicBrokerConfig(config)
    assert dyn.update({None: {"log.retention.ms": "5", "min.insync.replicas": "2"}, 2: {"log.retention.ms": "6"}}) \
        == ["log.retention.ms", "min.insync.replicas"]
    assert (config.log_retention_ms, config.min_insync_replicas) == (5, 2)
    assert config.topic_defaults()["retention.ms"] == "5"
    assert dyn.update({1: {"log.retention.ms": "4"}, None: {"log.retention.ms": "5"}}) == \
        ["log.retention.ms", "min.insync.replicas"]
    assert (config.log_retention_ms, config.min_insync_replicas) == (4, 1)
    assert dyn.update({}) == ["log.retention.ms"] and config.log_retention_ms == 1000
    assert dyn.update({}) == []


def test_describe_reports_sources_synonyms_and_what_may_change() -> None:
    static = BrokerConfig.load(None, {"node.id": 1, "log.retention.ms": 1000})
    entries = {e.key: e for e in broker_entries(static, Layers({"log.retention.ms": "7"},
                                                               {"log.retention.ms": "8"}))}
    e = entries["log.retention.ms"]
    assert (e.value, e.source, e.read_only) == ("7", DYNAMIC_BROKER_CONFIG, False)
    assert [(s.value, s.source) for s in e.synonyms] == [
        ("7", DYNAMIC_BROKER_CONFIG), ("8", DYNAMIC_DEFAULT_BROKER_CONFIG), ("1000", STATIC_BROKER_CONFIG),
        (str(WEEK_MS), DEFAULT_CONFIG)]
    assert entries["log.dirs"].read_only and not entries["min.insync.replicas"].read_only
    assert entries["min.insync.replicas"].source == DEFAULT_CONFIG
    assert entries["log.retention.hours"].read_only and entries["log.retention.hours"].value == "0"
    assert {e.key for e in broker_entries(static, Layers({}, {})) if not e.read_only} == DYNAMIC
    cluster = default_entries({"log.retention.ms": "8"})
    assert [(e.key, e.value, e.source) for e in cluster] == [("log.retention.ms", "8", DYNAMIC_DEFAULT_BROKER_CONFIG)]


def _op(name: str, op: int, value: str | None) -> AlterableConfig:
    return AlterableConfig(name=name, config_operation=op, value=value)


def test_incremental_operations_on_a_broker_resource() -> None:
    current = {"log.retention.ms": "5", "min.insync.replicas": "2"}
    assert _apply_broker(current, [_op("log.retention.ms", DELETE, None), _op("log.segment.bytes", SET, "100"),
                                   _op("log.cleanup.policy", APPEND, "compact")]) == {
        "min.insync.replicas": "2", "log.segment.bytes": "100", "log.cleanup.policy": "delete,compact"}
    assert _apply_broker({"log.cleanup.policy": "delete,compact"},
                         [_op("log.cleanup.policy", SUBTRACT, "delete")]) == {"log.cleanup.policy": "compact"}
    with pytest.raises(DynamicConfigError) as e:
        _apply_broker({}, [_op("log.retention.ms", APPEND, "1")])
    assert e.value.code == ErrorCode.INVALID_CONFIG
    with pytest.raises(DynamicConfigError) as e:
        _apply_broker({}, [_op("log.retention.ms", SET, "1"), _op("log.retention.ms", DELETE, None)])
    assert e.value.code == ErrorCode.INVALID_REQUEST


def test_new_topic_defaults_reach_every_log_without_an_override(tmp_path: Path) -> None:
    async def main() -> None:
        store = MemoryMetadataStore()
        for n in (1, 2):
            store.register_broker(n, port=1)
        logs = LogManager.open(tmp_path / "data", LogConfig(), MockClock())
        topics = TopicRegistry(logs, durable_per_append=False, mark_dirty=lambda p, n, lazy: None, replicated=True)
        await store.create_topic(TopicMeta("plain", uuid.uuid4(), 1),
                                 [PartitionState((1, 2), (1,), 1, leader_epoch=1, partition_epoch=1)])
        await store.create_topic(TopicMeta("own", uuid.uuid4(), 1, MappingProxyType({"retention.ms": "99"})),
                                 [PartitionState((1, 2), (1,), 1, leader_epoch=1, partition_epoch=1)])
        config = BrokerConfig.load(None, {"node.id": 1})
        dyn = DynamicBrokerConfig(config)
        rm = ReplicaManager(config, topics, store, lambda: 0, durable=False)
        seen = store.view
        rm.on_view(diff(ClusterView(), seen))
        plain, own = (topics.partition(t, 0) for t in ("plain", "own"))
        assert plain is not None and own is not None and plain.leader_replicas is not None
        assert plain.log.config.retention_ms == WEEK_MS and own.log.config.retention_ms == 99

        await store.set_broker_configs(None, {"log.retention.ms": "1234", "min.insync.replicas": "2"})
        change = diff(seen, store.view)
        assert change.broker_configs == {None}
        dyn.update(change.view.broker_configs)  # as ClusterNode does before delivering the view
        rm.on_view(change)
        assert plain.log.config.retention_ms == 1234 and own.log.config.retention_ms == 99
        assert plain.leader_replicas.min_isr == 2 and logs.defaults.min_insync_replicas == 2
        await rm.stop()
        logs.close()

    asyncio.run(main())


def test_security_settings_are_known_names_and_change_at_run_time_as_in_kafka() -> None:
    # librdkafka's admin test alters this Kerberos setting on a broker and expects success
    assert validate({"sasl.kerberos.min.time.before.relogin": "58000"}) == {
        "sasl.kerberos.min.time.before.relogin": "58000"}
    cert = {"listener.name.sasl_ssl.ssl.keystore.location": "/etc/kafka/new.pem",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": "M required;"}
    assert validate(cert) == cert  # per-listener certificates and SASL options are dynamic
    e = _refused({"ssl.keystore.location": "/etc/kafka/new.pem"})
    assert e.code == ErrorCode.INVALID_REQUEST and str(e) == ("These security configs can be dynamically updated "
                                                              "only per-listener using the listener prefix: "
                                                              "Set(ssl.keystore.location)")
    assert _refused({"listener.security.protocol.map": "A:SSL"}).code == ErrorCode.INVALID_REQUEST
    assert _refused({"ssl.client.auth": "sometimes"}).code == ErrorCode.INVALID_REQUEST
    static = BrokerConfig.load(None, {"node.id": 1})
    resolved, sources = effective(static, Layers(cert, {}))
    assert resolved.for_listener("SASL_SSL", "ssl.keystore.location") == "/etc/kafka/new.pem"
    assert sources["listener.name.sasl_ssl.ssl.keystore.location"] == DYNAMIC_BROKER_CONFIG
    entries = {e.key: e for e in broker_entries(static, Layers(cert, {}))}
    assert entries["sasl.jaas.config"].type == "PASSWORD" and not entries["sasl.kerberos.service.name"].read_only
