"""Dynamic broker configs on a real cluster (KIP-226): IncrementalAlterConfigs / AlterConfigs on BROKER resources
(cluster-wide with the empty name, one broker with its node id) go to etcd, every broker applies them without a
restart (a topic without an override takes the new default at once, ``min.insync.replicas`` reaches ``acks=all``),
DescribeConfigs names the source, an illegal change is refused with Kafka's error, and a restarted broker reads them
back from etcd. On the shared cluster: every test removes what it set."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError as CKafkaError
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)
from kafka.admin import ConfigResource as KPConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.describe_configs_request import DescribeConfigsRequest, DescribeConfigsResource
from oncelog.protocol.messages.incremental_alter_configs_request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from oncelog.testing.cluster import ClusterProcess

from helpers.rawclient import RawClient, build_batch

TIMEOUT = 30
BROKER, TOPIC = ConfigResource.Type.BROKER, ConfigResource.Type.TOPIC


def _admin(cluster: ClusterProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap})


def _raw_set(cluster: ClusterProcess, broker: str, validate_only: bool = False, via: int | None = None,
             **configs: str | None) -> tuple[int, str | None]:
    """IncrementalAlterConfigs SET (a value) or DELETE (None) of a broker's dynamic configs ("": cluster-wide, which
    librdkafka cannot name), sent to that broker (any for ""); (error code, message)."""
    node = via if via is not None else int(broker) if broker else cluster.node_ids[0]
    ops = [AlterableConfig(name=k.replace("_", "."), config_operation=0 if v is not None else 1, value=v)
           for k, v in configs.items()]
    with RawClient(cluster.brokers[node].bootstrap) as c:
        resp = c.request(44, 1, IncrementalAlterConfigsRequest(resources=[AlterConfigsResource(
            resource_type=4, resource_name=broker, configs=ops)], validate_only=validate_only))
    (r,) = resp.responses
    return r.error_code, r.error_message


def _set(cluster: ClusterProcess, broker: str, **configs: str | None) -> None:
    code, message = _raw_set(cluster, broker, **configs)
    assert code == 0, message


def _confluent_set(admin: AdminClient, broker: str, **configs: str) -> None:
    res = ConfigResource(BROKER, broker, incremental_configs=[
        ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    admin.incremental_alter_configs([res])[res].result(TIMEOUT)


def _describe_topic(cluster: ClusterProcess, node: int, topic: str, key: str) -> tuple[str, int, list[Any]]:
    """(value, source, synonyms) of one topic config, asked of one broker."""
    with RawClient(cluster.brokers[node].bootstrap) as c:
        resp = c.request(32, 4, DescribeConfigsRequest(resources=[DescribeConfigsResource(
            resource_type=2, resource_name=topic, configuration_keys=[key])], include_synonyms=True))
    result = resp.results[0]
    assert result.error_code == 0, result.error_message
    (entry,) = result.configs
    return entry.value, entry.config_source, [(s.name, s.value, s.source) for s in entry.synonyms]


def _until(cond: Callable[[], bool], what: str, timeout: float = TIMEOUT) -> None:
    """Poll ``cond`` (an AssertionError in it counts as not yet: a broker whose view has not caught up)."""
    deadline = time.monotonic() + timeout
    while True:
        last: AssertionError | None = None
        try:
            if cond():
                return
        except AssertionError as e:
            last = e
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s" + (f" ({last})" if last else "")
        time.sleep(0.1)


def _topic(admin: AdminClient, cluster: ClusterProcess, rf: int = 3, **configs: str) -> str:
    name = f"dyn-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, 1, rf, config={k.replace("_", "."): v for k, v in configs.items()})],
                        operation_timeout=TIMEOUT)[name].result(TIMEOUT)
    cluster.wait_for_topic(name, rf)
    return name


@pytest.fixture
def admin(cluster: ClusterProcess) -> Iterator[AdminClient]:
    """An admin client; the dynamic configs this test may set are removed after it."""
    yield _admin(cluster)
    for name in ("", *map(str, cluster.node_ids)):
        _set(cluster, name, log_retention_ms=None, min_insync_replicas=None)
    cluster.wait_for(lambda v: not any(v.broker_configs.values()), TIMEOUT, "the dynamic configs removed")


def test_retention_default_cluster_wide_then_per_broker(cluster: ClusterProcess, admin: AdminClient) -> None:
    plain = _topic(admin, cluster)
    own = _topic(admin, cluster, retention_ms="99000")
    week = str(7 * 24 * 3600 * 1000)
    assert _describe_topic(cluster, 1, plain, "retention.ms")[:2] == (week, ConfigSource.DEFAULT_CONFIG.value)

    _set(cluster, "", log_retention_ms="123456789")
    assert cluster.view().broker_configs[None] == {"log.retention.ms": "123456789"}
    for node in cluster.node_ids:  # every broker, without a restart
        _until(lambda node=node: _describe_topic(cluster, node, plain, "retention.ms")[:2] ==
               ("123456789", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value), f"broker {node} took the default")
        assert _describe_topic(cluster, node, own, "retention.ms")[:2] == ("99000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    value, source, synonyms = _describe_topic(cluster, 2, own, "retention.ms")
    assert synonyms[:2] == [("retention.ms", "99000", 1), ("log.retention.ms", "123456789", 3)]

    with RawClient(cluster.brokers[3].bootstrap) as c:  # the cluster-wide default: the dynamic defaults set
        resp = c.request(32, 4, DescribeConfigsRequest(resources=[DescribeConfigsResource(
            resource_type=4, resource_name="", configuration_keys=None)]))
    assert [(e.name, e.value, e.config_source) for e in resp.results[0].configs] == [
        ("log.retention.ms", "123456789", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)]

    _confluent_set(admin, "2", log_retention_ms="222000")  # one broker's own value wins over the cluster-wide one
    _until(lambda: _describe_topic(cluster, 2, plain, "retention.ms")[:2] ==
           ("222000", ConfigSource.DYNAMIC_BROKER_CONFIG.value), "broker 2 took its own value")
    for node in (1, 3):
        assert _describe_topic(cluster, node, plain, "retention.ms")[0] == "123456789"
    res = ConfigResource(BROKER, "2")
    entry = admin.describe_configs([res])[res].result(TIMEOUT)["log.retention.ms"]
    assert (entry.value, entry.source, entry.is_read_only) == ("222000", ConfigSource.DYNAMIC_BROKER_CONFIG.value,
                                                              False)
    assert "log.retention.ms" in entry.synonyms  # (a dict by name in confluent-kafka: one per name)
    assert admin.describe_configs([res])[res].result(TIMEOUT)["log.dirs"].is_read_only

    _set(cluster, "", log_retention_ms=None)  # DELETE: broker 1 falls back to its static value
    _until(lambda: _describe_topic(cluster, 1, plain, "retention.ms")[:2] == (week, ConfigSource.DEFAULT_CONFIG.value),
           "broker 1 back to the static default")


def test_illegal_changes_are_refused_and_validate_only_stores_nothing(cluster: ClusterProcess,
                                                                     admin: AdminClient) -> None:
    code, message = _raw_set(cluster, "", log_dirs="/tmp/elsewhere")
    assert code == ErrorCode.INVALID_REQUEST and message == "Cannot update these configs dynamically: Set(log.dirs)"
    with pytest.raises(KafkaException) as e:  # not the highest-priority synonym: not dynamic, as in Kafka
        _confluent_set(admin, "1", log_retention_hours="1")
    err = e.value.args[0]
    assert err.code() == CKafkaError.INVALID_REQUEST and "log.retention.hours" in err.str()
    assert _raw_set(cluster, "", min_insync_replicas="zero")[0] == ErrorCode.INVALID_REQUEST
    assert _raw_set(cluster, "", no_such_setting="1")[0] == ErrorCode.INVALID_CONFIG
    assert _raw_set(cluster, "2", via=1, log_retention_ms="1")[0] == ErrorCode.INVALID_REQUEST  # not broker 1's

    assert _raw_set(cluster, "", validate_only=True, log_retention_ms="5000") == (0, None)
    assert None not in cluster.view().broker_configs


def test_kafka_python_alter_configs_sets_one_brokers_configs(cluster: ClusterProcess, admin: AdminClient) -> None:
    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:  # the legacy AlterConfigs: the whole set of broker 3's dynamic configs
        kp.alter_configs([KPConfigResource(ConfigResourceType.BROKER, "3", configs={"log.retention.ms": "7777000"})],
                         incremental=False)
        cluster.wait_for(lambda v: v.broker_configs.get(3) == {"log.retention.ms": "7777000"}, TIMEOUT,
                         "broker 3's dynamic config in etcd")
    finally:
        kp.close()
    res = ConfigResource(BROKER, "3")
    _until(lambda: admin.describe_configs([res])[res].result(TIMEOUT)["log.retention.ms"].value == "7777000",
           "broker 3 reports it")


def test_min_insync_replicas_default_reaches_acks_all(cluster: ClusterProcess, admin: AdminClient) -> None:
    plain = _topic(admin, cluster, rf=2)
    own = _topic(admin, cluster, rf=2, min_insync_replicas="1")
    leaders = {t: cluster.view().partition(t, 0).leader for t in (plain, own)}  # type: ignore[union-attr]

    def produce(topic: str) -> int:
        with RawClient(cluster.brokers[leaders[topic]].bootstrap) as c:
            return int(c.produce(topic, 0, build_batch([(b"k", b"v")]), acks=-1).error_code)

    assert produce(plain) == 0
    _set(cluster, "", min_insync_replicas="3")  # above the topic's two replicas
    _until(lambda: produce(plain) == ErrorCode.NOT_ENOUGH_REPLICAS, "acks=all refused under the new default")
    assert produce(own) == 0  # its own min.insync.replicas wins
    _set(cluster, "", min_insync_replicas=None)
    _until(lambda: produce(plain) == 0, "acks=all accepted again")


def test_dynamic_configs_survive_a_broker_restart(cluster: ClusterProcess, admin: AdminClient) -> None:
    plain = _topic(admin, cluster)
    _confluent_set(admin, "3", log_retention_ms="4444000")
    _until(lambda: _describe_topic(cluster, 3, plain, "retention.ms")[0] == "4444000", "broker 3 took it")
    cluster.restart(3)
    assert _describe_topic(cluster, 3, plain, "retention.ms")[:2] == ("4444000",
                                                                       ConfigSource.DYNAMIC_BROKER_CONFIG.value)


def test_topic_configs_are_cluster_wide(cluster: ClusterProcess, admin: AdminClient) -> None:
    """A topic's config change goes to etcd and reaches every replica (the change asked of a broker that holds no
    replica of the topic); every broker describes the topic, replica or not."""
    name = f"dyn-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, 1, replica_assignment=[[1]])], operation_timeout=TIMEOUT)[name].result(TIMEOUT)
    cluster.wait_for_topic(name, 1)
    _until(lambda: _describe_topic(cluster, 2, name, "retention.ms") is not None, "broker 2's view has the topic")
    with RawClient(cluster.brokers[2].bootstrap) as c:  # broker 2 has no replica of it
        resp = c.request(44, 1, IncrementalAlterConfigsRequest(resources=[AlterConfigsResource(
            resource_type=2, resource_name=name, configs=[AlterableConfig(name="retention.ms", config_operation=0,
                                                                           value="424242")])]))
    assert resp.responses[0].error_code == 0, resp.responses[0].error_message
    assert dict(cluster.view().topics[name].configs) == {"retention.ms": "424242"}
    for node in cluster.node_ids:
        _until(lambda node=node: _describe_topic(cluster, node, name, "retention.ms")[:2] ==
               ("424242", ConfigSource.DYNAMIC_TOPIC_CONFIG.value), f"broker {node} describes the new value")
    res = ConfigResource(TOPIC, name, set_config={"retention.ms": "515151", "cleanup.policy": "delete"})
    admin.alter_configs([res])[res].result(TIMEOUT)  # the legacy API replaces the whole set
    _until(lambda: dict(cluster.view().topics[name].configs) == {"retention.ms": "515151",
                                                                  "cleanup.policy": "delete"}, "the view has it")
    _until(lambda: _describe_topic(cluster, 1, name, "retention.ms")[0] == "515151", "the replica took it")
    with RawClient(cluster.brokers[3].bootstrap) as c:
        resp = c.request(44, 1, IncrementalAlterConfigsRequest(resources=[AlterConfigsResource(
            resource_type=2, resource_name=name, configs=[AlterableConfig(name="retention.ms", config_operation=0,
                                                                           value="not-a-number")])]))
    assert resp.responses[0].error_code == ErrorCode.INVALID_CONFIG, resp.responses[0]
    assert dict(cluster.view().topics[name].configs)["retention.ms"] == "515151"
