"""The native client against a real broker, cross-checked with confluent-kafka (librdkafka)."""

from __future__ import annotations

import asyncio
import time

import confluent_kafka as ck
import pytest

from oncelog.client import (
    OFFSET_BEGINNING,
    Admin,
    AsyncConsumer,
    AsyncProducer,
    BrokerConnection,
    Consumer,
    KafkaError,
    Producer,
    UnsupportedVersionError,
)
from oncelog.protocol.api import API_KEYS
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.murmur2 import partition_for_key


@pytest.fixture
def admin(bootstrap: str):
    a = Admin({"bootstrap.servers": bootstrap})
    yield a
    a.close()


def _ck_consume_all(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 20) -> list:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                     "enable.partition.eof": False})
    try:
        c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < expected and time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                assert m.error() is None, m.error()
                out.append(m)
        return out
    finally:
        c.close()


def test_native_producer_to_confluent_consumer(bootstrap: str, admin: Admin, topic_name: str) -> None:
    admin.create_topics(topic_name, 4)
    reports: list = []
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, "compression.type": "lz4"}) as p:
        for i in range(300):
            key = f"user-{i % 37}" if i % 3 else None
            p.produce(topic_name, f"value-{i}", key=key, headers={"i": str(i), "n": None},
                      on_delivery=lambda e, m: reports.append((e, m)))
        assert p.flush(30) == 0
    assert len(reports) == 300 and all(e is None for e, _ in reports)
    assert all(m.offset() >= 0 for _, m in reports)
    offsets = {(m.partition(), m.offset()) for _, m in reports}
    assert len(offsets) == 300  # distinct positions

    got = _ck_consume_all(bootstrap, topic_name, 4, 300)
    assert len(got) == 300
    by_value = {m.value().decode(): m for m in got}
    for e, m in reports:
        c = by_value[m.value().decode()]
        assert (c.partition(), c.offset()) == (m.partition(), m.offset())
        assert c.key() == m.key()
        assert dict(c.headers()) == {"i": m.value().decode().split("-")[1].encode(), "n": None}
        if m.key() is not None:
            assert m.partition() == partition_for_key(m.key(), 4)
    # keys land where librdkafka's murmur2_random puts them
    other = topic_name + "-ck"
    admin.create_topics(other, 4)
    ckp = ck.Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random",
                       "enable.idempotence": False})
    ck_parts: dict[bytes, int] = {}
    for k in range(37):
        key = f"user-{k}".encode()
        ckp.produce(other, b"x", key=key, on_delivery=lambda e, m: ck_parts.__setitem__(m.key(), m.partition()))
    assert ckp.flush(20) == 0
    native_parts = {m.key(): m.partition() for _, m in reports if m.key() is not None}
    assert native_parts == {k: v for k, v in ck_parts.items() if k in native_parts}
    assert len(native_parts) == 37


def test_null_keys_are_sticky(bootstrap: str, admin: Admin, topic_name: str) -> None:
    admin.create_topics(topic_name, 6)
    parts: list[int] = []
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 1000, "batch.size": 100000}) as p:
        for i in range(50):
            p.produce(topic_name, b"x" * 10, on_delivery=lambda e, m: parts.append(m.partition()))
        p.flush(10)
    assert len(parts) == 50 and len(set(parts)) == 1  # one open batch takes them all


def test_confluent_producer_to_native_consumer(bootstrap: str, admin: Admin, topic_name: str) -> None:
    admin.create_topics(topic_name, 3)
    ckp = ck.Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random",
                       "enable.idempotence": False, "compression.type": "zstd", "linger.ms": 5})
    sent: dict[str, tuple[int, int]] = {}
    for i in range(250):
        ckp.produce(topic_name, f"v{i}".encode(), key=f"k{i % 11}".encode(), headers=[("h", b"x")],
                    on_delivery=lambda e, m: sent.__setitem__(m.value().decode(), (m.partition(), m.offset())))
    assert ckp.flush(20) == 0 and len(sent) == 250
    with Consumer({"bootstrap.servers": bootstrap}) as c:
        c.assign([(topic_name, p, OFFSET_BEGINNING) for p in range(3)])
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 250 and time.monotonic() < deadline:
            got += c.consume(100, 1.0)
        assert c.poll(0.3) is None  # nothing more
    assert len(got) == 250
    for m in got:
        assert sent[m.value().decode()] == (m.partition(), m.offset())
        assert m.partition() == partition_for_key(m.key(), 3)
        assert m.headers() == [("h", b"x")] and m.timestamp()[1] > 0
    per_part = {}
    for m in got:
        per_part.setdefault(m.partition(), []).append(m.offset())
    assert all(offs == sorted(offs) for offs in per_part.values())


def test_auto_offset_reset_and_async_api(bootstrap: str, admin: Admin, topic_name: str) -> None:
    admin.create_topics(topic_name, 1)

    async def main() -> None:
        async with AsyncProducer({"bootstrap.servers": bootstrap, "linger.ms": 0}) as p:
            futs = [await p.produce(topic_name, f"old{i}") for i in range(5)]
            msgs = await asyncio.gather(*futs)
            assert [m.offset() for m in msgs] == [0, 1, 2, 3, 4]
            async with AsyncConsumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "latest"}) as latest, \
                    AsyncConsumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"}) as earliest:
                latest.assign([(topic_name, 0)])
                earliest.assign([(topic_name, 0)])
                assert await latest.poll(0.3) is None
                assert latest.position(topic_name, 0) == 5
                await (await p.produce(topic_name, "new"))
                m = await latest.poll(5)
                assert m is not None and (m.value(), m.offset()) == (b"new", 5)
                first = await earliest.consume(10, 5)
                assert [x.value() for x in first][:1] == [b"old0"]

    asyncio.run(main())


def test_admin_operations(bootstrap: str, admin: Admin, topic_name: str) -> None:
    admin.create_topics(topic_name, 2, {"retention.ms": "3600000"})
    assert any(t.name == topic_name and t.partitions == 2 for t in admin.list_topics())
    with pytest.raises(KafkaError) as exc:
        admin.create_topics(topic_name, 2)
    assert exc.value.code() == ErrorCode.TOPIC_ALREADY_EXISTS and not exc.value.retriable()

    cfg = admin.describe_configs(topic_name)
    assert cfg["retention.ms"].value == "3600000" and not cfg["retention.ms"].is_default
    admin.alter_configs(topic_name, {"cleanup.policy": "compact"}, delete=["retention.ms"])
    cfg = admin.describe_configs(topic_name)
    assert cfg["cleanup.policy"].value == "compact"
    assert cfg["retention.ms"].is_default

    admin.create_partitions(topic_name, 4)
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 0}) as p:
        for i in range(10):
            p.produce(topic_name, f"r{i}", key=f"k{i}", partition=3, timestamp=1_000_000 + i)  # compacted: keyed
        assert p.flush(10) == 0
    desc = admin.describe_topic(topic_name)
    assert [p.partition for p in desc.partitions] == [0, 1, 2, 3]
    p3 = desc.partitions[3]
    assert (p3.log_start_offset, p3.high_watermark, p3.last_stable_offset) == (0, 10, 10)

    offs = admin.list_offsets({(topic_name, 3): 1_000_004, (topic_name, 0): "latest"})
    assert offs[(topic_name, 3)].offset == 4 and offs[(topic_name, 0)].offset == 0
    assert admin.delete_records({(topic_name, 3): 6}) == {(topic_name, 3): 6}
    assert admin.describe_topic(topic_name).partitions[3].log_start_offset == 6
    with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"}) as c:
        c.assign([(topic_name, 3, 2)])  # deleted: out of range -> earliest
        m = c.poll(5)
        assert m is not None and (m.offset(), m.value()) == (6, b"r6")

    admin.delete_topics(topic_name)
    assert all(t.name != topic_name for t in admin.list_topics())
    with pytest.raises(KafkaError) as exc:
        admin.describe_topic(topic_name)
    assert exc.value.code() == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_connection_negotiates_and_pipelines(broker) -> None:
    from oncelog.protocol.messages.metadata_request import MetadataRequest

    async def main() -> None:
        conn = BrokerConnection("127.0.0.1", broker.port)
        await conn.connect()
        try:
            assert conn.versions[0] == min(12, conn.broker_versions[0][1])
            assert conn.finalized_features == {"group.version": 1, "transaction.version": 2}
            assert conn.versions[18] >= 3
            missing = next(k for k in API_KEYS if k not in conn.broker_versions)
            with pytest.raises(UnsupportedVersionError, match=f"{API_KEYS[missing].name}.*does not implement"):
                conn.version_for(missing)
            resps = await asyncio.gather(*(conn.send(MetadataRequest(topics=[])) for _ in range(20)))
            assert len(resps) == 20 and all(r.brokers for r in resps)
        finally:
            await conn.close()

    asyncio.run(main())


def test_producer_reports_unknown_partition_and_bad_broker(bootstrap: str, admin: Admin, topic_name: str) -> None:
    admin.create_topics(topic_name, 1)
    with Producer({"bootstrap.servers": bootstrap}) as p, pytest.raises(KafkaError, match="partition 5"):
        p.produce(topic_name, "x", partition=5)
    with pytest.raises(KafkaError) as exc:
        Producer({"bootstrap.servers": "127.0.0.1:1", "socket.connection.setup.timeout.ms": 1000})
    assert exc.value.retriable() and "127.0.0.1:1" in exc.value.message


@pytest.mark.parametrize("only_errors", [True, False])
def test_delivery_report_only_error_reports_failures_alone(bootstrap: str, admin: Admin, topic_name: str,
                                                          only_errors: bool) -> None:
    """confluent-kafka's ``delivery.report.only.error``: the configured callback hears of failed records only (a
    record over the topic's max.message.bytes, refused by the broker), and delivered records are still written."""
    admin.create_topics(topic_name, 1, {"max.message.bytes": "1000"})
    reports: list[tuple[str | None, bytes | None]] = []
    conf = {"bootstrap.servers": bootstrap, "delivery.report.only.error": only_errors, "linger.ms": 0,
            "on_delivery": lambda e, m: reports.append((None if e is None else e.name(), m.value()))}
    with Producer(conf) as p:
        for i in range(20):
            p.produce(topic_name, b"ok-%d" % i)
        p.flush(10)
        p.produce(topic_name, b"x" * 5000)
        p.flush(10)
    assert len(_ck_consume_all(bootstrap, topic_name, 1, 20)) == 20
    failed = [r for r in reports if r[0] is not None]
    assert failed == [("MSG_SIZE_TOO_LARGE", b"x" * 5000)]
    assert len(reports) == (1 if only_errors else 21)
