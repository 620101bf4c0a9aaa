"""Admin APIs through confluent_kafka.admin (and kafka-python where it adds evidence) against the shared broker."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)

from oncelog.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic

from helpers.rawclient import EARLIEST, LATEST, METADATA, RawClient, build_batch

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

TIMEOUT = 15


@pytest.fixture
def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def error_of(future: object) -> int:
    """The Kafka error code a confluent admin future fails with (0 if it succeeds)."""
    try:
        future.result(TIMEOUT)  # type: ignore[attr-defined]
    except KafkaException as e:
        return int(e.args[0].code())
    return 0


def create(admin: AdminClient, name: str, partitions: int = 3, config: dict[str, str] | None = None,
           rf: int = 1) -> int:
    fs = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=rf,
                                       config=config or {})], operation_timeout=TIMEOUT)
    return error_of(fs[name])


def partitions_of(admin: AdminClient, name: str) -> int | None:
    md = admin.list_topics(timeout=TIMEOUT)
    t = md.topics.get(name)
    if t is None or t.error is not None:
        return None
    return len(t.partitions)


def produce_n(bootstrap: str, topic: str, n: int, partition: int = 0) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": False, "acks": "all", "linger.ms": 2})
    errs: list[object] = []
    for i in range(n):
        p.produce(topic, value=f"v{i}".encode(), partition=partition,
                  on_delivery=lambda err, msg: errs.append(err) if err else None)
    assert p.flush(TIMEOUT) == 0
    assert not errs, errs


# -- topics ---------------------------------------------------------------------------------------------------------

def test_create_describe_delete_topic(admin: AdminClient, bootstrap: str, topic_name: str) -> None:
    assert create(admin, topic_name, 4, {"retention.ms": "3600000"}) == 0
    assert partitions_of(admin, topic_name) == 4
    md = admin.list_topics(topic_name, timeout=TIMEOUT).topics[topic_name]
    assert sorted(md.partitions) == [0, 1, 2, 3]
    assert all(p.leader == 0 and p.replicas == [0] and p.isrs == [0] for p in md.partitions.values())

    # duplicate
    assert create(admin, topic_name, 4) == KafkaError.TOPIC_ALREADY_EXISTS

    fs = admin.delete_topics([topic_name], operation_timeout=TIMEOUT)
    assert error_of(fs[topic_name]) == 0
    deadline = time.monotonic() + 5
    while partitions_of(admin, topic_name) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert partitions_of(admin, topic_name) is None, "deleted topic still listed"
    # deleting again: unknown
    fs = admin.delete_topics([topic_name], operation_timeout=TIMEOUT)
    assert error_of(fs[topic_name]) == KafkaError.UNKNOWN_TOPIC_OR_PART
    # and the name can be reused, starting empty
    assert create(admin, topic_name, 1) == 0
    with RawClient(bootstrap) as c:
        assert c.list_offset(topic_name, 0, LATEST)[:2] == (0, 0)


def test_deleted_topic_data_is_gone(admin: AdminClient, bootstrap: str, topic_name: str) -> None:
    assert create(admin, topic_name, 1) == 0
    produce_n(bootstrap, topic_name, 10)
    assert error_of(admin.delete_topics([topic_name], operation_timeout=TIMEOUT)[topic_name]) == 0
    assert create(admin, topic_name, 1) == 0
    with RawClient(bootstrap) as c:
        assert c.list_offset(topic_name, 0, LATEST)[:2] == (0, 0), "recreated topic kept the old records"
        assert c.fetch_all(topic_name, 0) == []


@pytest.mark.parametrize("bad_name", ["has space", "bad/slash", "", ".", "..", "x" * 250, "ünïcode"])
def test_create_invalid_topic_name(admin: AdminClient, bad_name: str) -> None:
    assert create(admin, bad_name, 1) == KafkaError.TOPIC_EXCEPTION  # 17 INVALID_TOPIC_EXCEPTION
    assert partitions_of(admin, bad_name) is None


@pytest.mark.parametrize("config,code", [
    ({"retention.ms": "not-a-number"}, KafkaError.INVALID_CONFIG),
    ({"no.such.config": "1"}, KafkaError.INVALID_CONFIG),
    ({"cleanup.policy": "sometimes"}, KafkaError.INVALID_CONFIG),
    ({"segment.bytes": "-5"}, KafkaError.INVALID_CONFIG),
])
def test_create_with_bad_config(admin: AdminClient, topic_name: str, config: dict[str, str], code: int) -> None:
    assert create(admin, topic_name, 1, config) == code
    assert partitions_of(admin, topic_name) is None, "a topic refused for its config was created anyway"


def test_create_bad_partitions_and_replication(admin: AdminClient, topic_name: str) -> None:
    assert create(admin, topic_name, 1, rf=3) == KafkaError.INVALID_REPLICATION_FACTOR
    assert partitions_of(admin, topic_name) is None
    with RawClient(admin_bootstrap(admin)) as c:
        from oncelog.protocol.messages.create_topics_request import CreatableTopic, CreateTopicsRequest

        resp = c.request(19, 5, CreateTopicsRequest(topics=[CreatableTopic(
            name=topic_name, num_partitions=0, replication_factor=1)], timeout_ms=5000))
        assert resp.topics[0].error_code == KafkaError.INVALID_PARTITIONS
    assert partitions_of(admin, topic_name) is None


def admin_bootstrap(admin: AdminClient) -> str:
    md = admin.list_topics(timeout=TIMEOUT)
    b = next(iter(md.brokers.values()))
    return f"{b.host}:{b.port}"


def test_validate_only_creates_nothing(admin: AdminClient, topic_name: str) -> None:
    fs = admin.create_topics([NewTopic(topic_name, num_partitions=2, replication_factor=1)], validate_only=True,
                             operation_timeout=TIMEOUT)
    assert error_of(fs[topic_name]) == 0
    assert partitions_of(admin, topic_name) is None


# -- configs --------------------------------------------------------------------------------------------------------

def describe(admin: AdminClient, name: str) -> dict[str, ConfigEntry]:
    res = ConfigResource(ConfigResource.Type.TOPIC, name)
    return admin.describe_configs([res], request_timeout=TIMEOUT)[res].result(TIMEOUT)


def test_describe_and_alter_configs(admin: AdminClient, topic_name: str) -> None:
    assert create(admin, topic_name, 1, {"retention.ms": "123456"}) == 0
    cfg = describe(admin, topic_name)
    assert cfg["retention.ms"].value == "123456"
    assert cfg["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert cfg["cleanup.policy"].value == "delete"
    assert cfg["cleanup.policy"].is_default
    assert "max.message.bytes" in cfg and "segment.bytes" in cfg

    # incremental SET + DELETE
    res = ConfigResource(ConfigResource.Type.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("retention.ms", "999000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("max.message.bytes", "2000000", incremental_operation=AlterConfigOpType.SET),
    ])
    assert error_of(admin.incremental_alter_configs([res])[res]) == 0
    cfg = describe(admin, topic_name)
    assert cfg["retention.ms"].value == "999000"
    assert cfg["max.message.bytes"].value == "2000000"

    res = ConfigResource(ConfigResource.Type.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
    assert error_of(admin.incremental_alter_configs([res])[res]) == 0
    cfg = describe(admin, topic_name)
    assert cfg["retention.ms"].value == str(7 * 24 * 3600 * 1000)
    assert cfg["retention.ms"].is_default
    assert cfg["max.message.bytes"].value == "2000000", "DELETE of one key touched another"

    # invalid value and unknown key are refused and change nothing
    for entry in (ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET),
                  ConfigEntry("no.such.key", "1", incremental_operation=AlterConfigOpType.SET)):
        res = ConfigResource(ConfigResource.Type.TOPIC, topic_name, incremental_configs=[entry])
        assert error_of(admin.incremental_alter_configs([res])[res]) == KafkaError.INVALID_CONFIG
    assert describe(admin, topic_name)["max.message.bytes"].value == "2000000"

    # legacy AlterConfigs replaces the whole set: keys not given return to their defaults
    res = ConfigResource(ConfigResource.Type.TOPIC, topic_name, set_config={"segment.ms": "600000"})
    assert error_of(admin.alter_configs([res])[res]) == 0
    cfg = describe(admin, topic_name)
    assert cfg["segment.ms"].value == "600000"
    assert cfg["max.message.bytes"].is_default


def test_describe_configs_unknown_topic(admin: AdminClient) -> None:
    res = ConfigResource(ConfigResource.Type.TOPIC, f"nope-{uuid.uuid4().hex[:8]}")
    assert error_of(admin.describe_configs([res])[res]) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_describe_broker_configs(admin: AdminClient) -> None:
    res = ConfigResource(ConfigResource.Type.BROKER, "0")
    cfg = admin.describe_configs([res])[res].result(TIMEOUT)
    assert cfg["num.partitions"].value == "3"  # the shared broker is started with num.partitions=3
    assert cfg["message.max.bytes"].value == "1048588"
    # Kafka's sources: what was given at start is STATIC_BROKER_CONFIG, the rest DEFAULT_CONFIG; a synonym in
    # other units is reported in its own unit
    assert cfg["num.partitions"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert cfg["message.max.bytes"].source == ConfigSource.DEFAULT_CONFIG.value and cfg["message.max.bytes"].is_default
    assert cfg["log.retention.hours"].value == "168" and cfg["log.retention.ms"].value == str(168 * 3600_000)
    assert cfg["listeners"].value.startswith("PLAINTEXT://127.0.0.1:")
    assert cfg["transaction.max.timeout.ms"].value == "900000"


def test_topic_defaults_say_what_the_broker_does(admin: AdminClient, topic_name: str) -> None:
    """flush.messages is the broker's log.flush.interval.messages (1: every acks=all write is fsynced), not
    Kafka's "never"; a default that comes from a broker setting given at start says STATIC_BROKER_CONFIG."""
    assert create(admin, topic_name, 1) == 0
    cfg = describe(admin, topic_name)
    assert cfg["flush.messages"].value == "1"
    assert cfg["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value


def test_altered_retention_applies_to_produce(admin: AdminClient, bootstrap: str, topic_name: str) -> None:
    """max.message.bytes altered on a live topic is enforced on the next produce."""
    assert create(admin, topic_name, 1) == 0
    with RawClient(bootstrap) as c:
        assert c.produce(topic_name, 0, build_batch([(b"k", b"x" * 5000)])).error_code == 0
        res = ConfigResource(ConfigResource.Type.TOPIC, topic_name, incremental_configs=[
            ConfigEntry("max.message.bytes", "1000", incremental_operation=AlterConfigOpType.SET)])
        assert error_of(admin.incremental_alter_configs([res])[res]) == 0
        assert c.produce(topic_name, 0, build_batch([(b"k", b"x" * 5000)])).error_code == \
            KafkaError.MSG_SIZE_TOO_LARGE


# -- partitions and records ----------------------------------------------------------------------------------------

def test_create_partitions(admin: AdminClient, bootstrap: str, topic_name: str) -> None:
    assert create(admin, topic_name, 2) == 0
    fs = admin.create_partitions([NewPartitions(topic_name, 5)], operation_timeout=TIMEOUT)
    assert error_of(fs[topic_name]) == 0
    assert partitions_of(admin, topic_name) == 5
    produce_n(bootstrap, topic_name, 3, partition=4)
    with RawClient(bootstrap) as c:
        assert [r.value for r in c.fetch_all(topic_name, 4)] == [b"v0", b"v1", b"v2"]
    # shrinking or same count is refused
    for n in (3, 5):
        fs = admin.create_partitions([NewPartitions(topic_name, n)], operation_timeout=TIMEOUT)
        assert error_of(fs[topic_name]) == KafkaError.INVALID_PARTITIONS
    assert partitions_of(admin, topic_name) == 5
    fs = admin.create_partitions([NewPartitions(f"nope-{uuid.uuid4().hex[:8]}", 5)], operation_timeout=TIMEOUT)
    assert error_of(next(iter(fs.values()))) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_delete_records_moves_log_start(admin: AdminClient, bootstrap: str, topic_name: str) -> None:
    assert create(admin, topic_name, 1) == 0
    produce_n(bootstrap, topic_name, 20)
    tp = TopicPartition(topic_name, 0, 7)
    res = admin.delete_records([tp], operation_timeout=TIMEOUT)
    got = next(iter(res.values())).result(TIMEOUT)
    assert got.low_watermark == 7, f"low watermark after delete_records is {got.low_watermark}"

    # ListOffsets earliest follows (raw and via confluent admin list_offsets)
    with RawClient(bootstrap) as c:
        assert c.list_offset(topic_name, 0, EARLIEST)[:2] == (0, 7)
        assert c.list_offset(topic_name, 0, LATEST)[:2] == (0, 20)
        recs = c.fetch_all(topic_name, 0, 7)
        assert [r.offset for r in recs] == list(range(7, 20))
        assert recs[0].value == b"v7"
        p = c.fetch(topic_name, 0, 3)
        assert p.error_code == KafkaError.OFFSET_OUT_OF_RANGE
        assert p.log_start_offset == 7
    lo = admin.list_offsets({TopicPartition(topic_name, 0): OffsetSpec.earliest()})
    assert next(iter(lo.values())).result(TIMEOUT).offset == 7

    # delete everything (-1 = high watermark), and beyond it is out of range
    res = admin.delete_records([TopicPartition(topic_name, 0, 25)], operation_timeout=TIMEOUT)
    assert error_of(next(iter(res.values()))) == KafkaError.OFFSET_OUT_OF_RANGE
    res = admin.delete_records([TopicPartition(topic_name, 0, -1)], operation_timeout=TIMEOUT)
    assert next(iter(res.values())).result(TIMEOUT).low_watermark == 20
    with RawClient(bootstrap) as c:
        assert c.list_offset(topic_name, 0, EARLIEST)[:2] == (0, 20)
        # appends continue at 20
        assert c.produce(topic_name, 0, build_batch([(None, b"after")])).base_offset == 20


def test_kafka_python_watermarks_follow_delete_records(admin: AdminClient, bootstrap: str,
                                                       topic_name: str) -> None:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    assert create(admin, topic_name, 1) == 0
    produce_n(bootstrap, topic_name, 10)
    next(iter(admin.delete_records([TopicPartition(topic_name, 0, 4)]).values())).result(TIMEOUT)
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    try:
        tp = KTP(topic_name, 0)
        assert c.beginning_offsets([tp]) == {tp: 4}
        assert c.end_offsets([tp]) == {tp: 10}
        c.assign([tp])
        c.seek_to_beginning(tp)
        got = []
        deadline = time.monotonic() + 10
        while len(got) < 6 and time.monotonic() < deadline:
            for msgs in c.poll(timeout_ms=500).values():
                got += [(m.offset, m.value) for m in msgs]
        assert got == [(i, f"v{i}".encode()) for i in range(4, 10)]
    finally:
        c.close()


# -- auto creation --------------------------------------------------------------------------------------------------

def test_auto_topic_creation_on_metadata(bootstrap: str, topic_name: str) -> None:
    with RawClient(bootstrap) as c:
        no = c.request(METADATA, 12, MetadataRequest(topics=[MetadataRequestTopic(name=topic_name)],
                                                     allow_auto_topic_creation=False))
        assert no.topics[0].error_code == KafkaError.UNKNOWN_TOPIC_OR_PART
        again = c.request(METADATA, 12, MetadataRequest(topics=[MetadataRequestTopic(name=topic_name)],
                                                        allow_auto_topic_creation=False))
        assert again.topics[0].error_code == KafkaError.UNKNOWN_TOPIC_OR_PART, "allow=False created the topic"
        yes = c.request(METADATA, 12, MetadataRequest(topics=[MetadataRequestTopic(name=topic_name)],
                                                      allow_auto_topic_creation=True))
        t = yes.topics[0]
        assert t.error_code in (0, KafkaError.LEADER_NOT_AVAILABLE)
        md = c.request(METADATA, 12, MetadataRequest(topics=[MetadataRequestTopic(name=topic_name)],
                                                     allow_auto_topic_creation=False))
        assert md.topics[0].error_code == 0
        assert len(md.topics[0].partitions) == 3  # num.partitions of the shared broker
        # invalid names are never auto-created
        bad = c.request(METADATA, 12, MetadataRequest(topics=[MetadataRequestTopic(name="bad name")],
                                                      allow_auto_topic_creation=True))
        assert bad.topics[0].error_code == KafkaError.TOPIC_EXCEPTION


def test_auto_create_by_producing_client(bootstrap: str, topic_name: str) -> None:
    """A kafka-python producer sending to an unknown topic gets it created (via Metadata) and delivered."""
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=False, acks="all")
    try:
        md = p.send(topic_name, key=b"k", value=b"hello").get(timeout=TIMEOUT)
    finally:
        p.close()
    with RawClient(bootstrap) as c:
        assert [r.value for r in c.fetch_all(topic_name, md.partition)] == [b"hello"]
        assert md.offset == 0
