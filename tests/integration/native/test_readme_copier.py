"""The consume-transform-produce loop of docs/client.md, run as written (bounded), against the shared broker."""

from __future__ import annotations

import time
import uuid

import confluent_kafka as ck

import oncelog.client as sync_client
from oncelog.client import Admin, Consumer, Producer, aio


def test_aio_module_exports_the_async_twins() -> None:
    assert aio.AsyncProducer is sync_client.AsyncProducer
    assert aio.AsyncConsumer is sync_client.AsyncConsumer
    assert aio.AsyncAdmin is sync_client.AsyncAdmin


def _read_committed(bootstrap: str, topic: str, expected: int, timeout: float = 30) -> list[bytes]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4()}",
                     "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                     "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        out: list[bytes] = []
        deadline = time.monotonic() + timeout
        while len(out) < expected and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                out.append(m.value())
        # anything beyond `expected` would be a duplicate: look a little longer
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                out.append(m.value())
        return out
    finally:
        c.close()


def test_readme_copier_loop(bootstrap: str) -> None:
    suffix = uuid.uuid4().hex[:8]
    src, dst, group = f"input-{suffix}", f"output-{suffix}", f"copiers-{suffix}"
    admin = Admin({"bootstrap.servers": bootstrap})
    try:
        admin.create_topics([src, dst], 3)
    finally:
        admin.close()
    feeder = Producer({"bootstrap.servers": bootstrap})
    for i in range(1000):
        feeder.produce(src, f"rec-{i}".encode(), key=str(i % 17).encode())
    feeder.flush()
    feeder.close()

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"copier-{suffix}"})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest",
                         "partition.assignment.strategy": "cooperative-sticky"})
    copied = 0
    try:
        consumer.subscribe([src])
        producer.init_transactions()
        deadline = time.monotonic() + 60
        while copied < 1000 and time.monotonic() < deadline:
            batch = consumer.consume(500, timeout=1.0)
            if not batch:
                continue
            producer.begin_transaction()
            for m in batch:
                assert m.value() is not None
                producer.produce(dst, m.value().upper(), key=m.key())
            producer.send_offsets_to_transaction(
                {(m.topic(), m.partition()): m.offset() + 1 for m in batch}, consumer.consumer_group_metadata())
            producer.commit_transaction()
            copied += len(batch)
    finally:
        consumer.close()
        producer.close()
    assert copied == 1000
    out = _read_committed(bootstrap, dst, 1000)
    assert sorted(out) == sorted(f"REC-{i}".encode() for i in range(1000))

    check = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        committed = check.committed([ck.TopicPartition(src, p) for p in range(3)], timeout=10)
        assert sum(tp.offset for tp in committed) == 1000
    finally:
        check.close()
