"""Real clients against a real broker: every producer client x every codec, read back by another client.

Each case produces 30k keyed records (keys, values incl. null, headers, explicit timestamps) to a 3-partition
topic with the client's default (Java murmur2) partitioner, then a different client reads the whole topic from
offset 0 and everything must come back identical, in per-partition production order, on the murmur2 partition.
"""

from __future__ import annotations

import asyncio
import random
import time
import zlib
from dataclasses import dataclass

import pytest

from oncelog.protocol.murmur2 import partition_for_key
from oncelog.protocol.records import Compression, parse_batch_header

from helpers.rawclient import RawClient

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

N_RECORDS = 30_000
PARTITIONS = 3
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
CLIENTS = ["confluent", "kafka-python", "aiokafka"]
# The consumer of each case: always a different client than the producer.
READER = {"confluent": "kafka-python", "kafka-python": "aiokafka", "aiokafka": "confluent"}


@dataclass(frozen=True)
class Rec:
    key: bytes
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int


def make_records(seed: int, n: int = N_RECORDS) -> list[Rec]:
    rnd = random.Random(seed)
    base_ts = int(time.time() * 1000) - 3_600_000
    out = []
    for i in range(n):
        key = f"key-{rnd.randrange(5000)}".encode()
        if i % 997 == 13:
            value = None  # tombstone
        elif i % 10 == 0:
            value = rnd.randbytes(rnd.randrange(0, 300))  # incompressible
        else:
            value = (f"value {i} " * rnd.randrange(1, 12)).encode()
        headers: tuple[tuple[str, bytes], ...] = ()
        if i % 3 == 0:
            headers = (("idx", str(i).encode()), ("trace", rnd.randbytes(8)))
        elif i % 3 == 1:
            headers = (("empty", b""),)
        out.append(Rec(key, value, headers, base_ts + i * 7 + rnd.randrange(5)))
    return out


# -- producers ---------------------------------------------------------------------------------------------------

def produce_confluent(bootstrap: str, topic: str, codec: str, recs: list[Rec]) -> list[int]:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": False, "acks": "all",
                  "compression.type": codec, "partitioner": "murmur2_random", "linger.ms": 5,
                  "queue.buffering.max.messages": N_RECORDS * 2})
    parts: list[int] = [-1] * len(recs)
    errors: list[object] = []

    def cb(i: int):  # noqa: ANN202
        def done(err: object, msg: object) -> None:
            if err is not None:
                errors.append(err)
            else:
                parts[i] = msg.partition()  # type: ignore[attr-defined]
        return done

    for i, r in enumerate(recs):
        p.produce(topic, key=r.key, value=r.value, headers=list(r.headers), timestamp=r.timestamp,
                  on_delivery=cb(i))
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(60) == 0, "confluent producer could not deliver everything within 60 s"
    assert not errors, f"delivery errors: {errors[:5]}"
    return parts


def produce_kafka_python(bootstrap: str, topic: str, codec: str, recs: list[Rec]) -> list[int]:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=False, acks="all",
                      compression_type=None if codec == "none" else codec, linger_ms=5, batch_size=128 * 1024)
    try:
        futures = [p.send(topic, key=r.key, value=r.value, headers=list(r.headers), timestamp_ms=r.timestamp)
                   for r in recs]
        p.flush(60)
        return [f.get(timeout=30).partition for f in futures]
    finally:
        p.close(timeout=10)


def produce_aiokafka(bootstrap: str, topic: str, codec: str, recs: list[Rec]) -> list[int]:
    from aiokafka import AIOKafkaProducer

    async def run() -> list[int]:
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, max_batch_size=128 * 1024,
                             compression_type=None if codec == "none" else codec)
        await p.start()
        try:
            futures = [await p.send(topic, key=r.key, value=r.value, headers=list(r.headers),
                                    timestamp_ms=r.timestamp) for r in recs]
            metas = await asyncio.gather(*futures)
            return [m.partition for m in metas]
        finally:
            await p.stop()

    return asyncio.run(run())


PRODUCERS = {"confluent": produce_confluent, "kafka-python": produce_kafka_python, "aiokafka": produce_aiokafka}


# -- consumers: return {partition: [(offset, Rec), ...]} -----------------------------------------------------------

Consumed = dict[int, list[tuple[int, Rec]]]


def consume_confluent(bootstrap: str, topic: str, total: int) -> Consumed:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "roundtrip-unused", "enable.auto.commit": False,
                  "auto.offset.reset": "error", "enable.partition.eof": False})
    out: Consumed = {p: [] for p in range(PARTITIONS)}
    n = 0
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 90
        while n < total and time.monotonic() < deadline:
            for m in c.consume(num_messages=5000, timeout=1.0):
                if m.error():
                    raise KafkaException(m.error())
                _, ts = m.timestamp()
                hdrs = tuple((k, v) for k, v in (m.headers() or []))
                out[m.partition()].append((m.offset(), Rec(m.key(), m.value(), hdrs, ts)))
                n += 1
    finally:
        c.close()
    return out


def consume_kafka_python(bootstrap: str, topic: str, total: int) -> Consumed:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      auto_offset_reset="none", max_poll_records=10000, fetch_max_bytes=16 * 1024 * 1024)
    out: Consumed = {p: [] for p in range(PARTITIONS)}
    n = 0
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        deadline = time.monotonic() + 90
        while n < total and time.monotonic() < deadline:
            for tp, msgs in c.poll(timeout_ms=1000).items():
                for m in msgs:
                    hdrs = tuple((k, v) for k, v in (m.headers or []))
                    out[tp.partition].append((m.offset, Rec(m.key, m.value, hdrs, m.timestamp)))
                    n += 1
    finally:
        c.close()
    return out


def consume_aiokafka(bootstrap: str, topic: str, total: int) -> Consumed:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> Consumed:
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="none", max_partition_fetch_bytes=4 * 1024 * 1024)
        await c.start()
        out: Consumed = {p: [] for p in range(PARTITIONS)}
        n = 0
        try:
            tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
            c.assign(tps)
            await c.seek_to_beginning(*tps)
            deadline = time.monotonic() + 90
            while n < total and time.monotonic() < deadline:
                for tp, msgs in (await c.getmany(timeout_ms=1000, max_records=10000)).items():
                    for m in msgs:
                        hdrs = tuple((k, bytes(v)) for k, v in (m.headers or ()))
                        out[tp.partition].append((m.offset, Rec(m.key, m.value, hdrs, m.timestamp)))
                        n += 1
        finally:
            await c.stop()
        return out

    return asyncio.run(run())


CONSUMERS = {"confluent": consume_confluent, "kafka-python": consume_kafka_python, "aiokafka": consume_aiokafka}


def first_batch_codec(bootstrap: str, topic: str, partition: int) -> int:
    with RawClient(bootstrap) as c:
        p = c.fetch(topic, partition, 0, max_bytes=1024 * 1024)
        assert p.error_code == 0 and p.records, f"raw fetch of {topic}-{partition} got error {p.error_code}"
        return parse_batch_header(bytes(p.records), 0).compression


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("producer", CLIENTS)
def test_roundtrip(bootstrap: str, topic_name: str, producer: str, codec: str) -> None:
    with RawClient(bootstrap) as c:
        assert c.create_topic(topic_name, PARTITIONS) == 0
    recs = make_records(seed=zlib.crc32(f"{producer}/{codec}".encode()))

    parts = PRODUCERS[producer](bootstrap, topic_name, codec, recs)

    # The client put each keyed record on Java's murmur2 partition.
    wrong = [(i, parts[i], partition_for_key(r.key, PARTITIONS)) for i, r in enumerate(recs)
             if parts[i] != partition_for_key(r.key, PARTITIONS)]
    assert not wrong, f"{len(wrong)} records on the wrong partition, e.g. (index, got, want) {wrong[:5]}"

    # The batches on disk really are compressed with the codec the producer was told to use.
    assert first_batch_codec(bootstrap, topic_name, 0) == Compression.BY_NAME[codec]

    reader = READER[producer]
    got = CONSUMERS[reader](bootstrap, topic_name, len(recs))

    expected: dict[int, list[Rec]] = {p: [] for p in range(PARTITIONS)}
    for r in recs:
        expected[partition_for_key(r.key, PARTITIONS)].append(r)
    assert all(expected.values()), "every partition must get records for the test to mean something"
    for p in range(PARTITIONS):
        offsets = [o for o, _ in got[p]]
        assert offsets == list(range(len(expected[p]))), (
            f"partition {p} read by {reader}: offsets not 0..{len(expected[p]) - 1} "
            f"(got {len(offsets)} records, first {offsets[:5]}, last {offsets[-5:]})")
        values = [r for _, r in got[p]]
        for i, (want, have) in enumerate(zip(expected[p], values)):
            assert have == want, f"partition {p} offset {i}: produced {want} but {reader} read {have}"
