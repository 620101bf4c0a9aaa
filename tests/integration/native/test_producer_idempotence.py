"""The native producer's idempotence (on by default) against oncelog and Tansu: 20k records read back exactly
once in order, each batch stamped with the producer id, epoch and consecutive sequences."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from oncelog.client import Admin, Producer
from oncelog.client.connection import BrokerConnection
from oncelog.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from oncelog.protocol.records import iter_batch_headers
from oncelog.testing.pytest_plugin import KafkaBroker

N = 20_000
PARTITIONS = 3


def read_all(bootstrap: str, topic: str, partitions: int, want: int, timeout: float = 30.0,
             isolation: str = "read_uncommitted") -> list[tuple[int, bytes]]:
    """(partition, value) of every record of ``topic`` with confluent-kafka, until ``want`` arrived and no more
    come for a moment."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "isolation.level": isolation, "enable.partition.eof": False})
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + timeout
        quiet_until = None
        while time.monotonic() < deadline:
            msgs = c.consume(1000, 0.5)
            for m in msgs:
                assert m.error() is None, m.error()
                out.append((m.partition(), m.value()))
            if len(out) >= want:
                if msgs:
                    quiet_until = time.monotonic() + 1.0
                elif quiet_until is not None and time.monotonic() > quiet_until:
                    break
        return out
    finally:
        c.close()


@pytest.mark.timeout(180)
def test_idempotent_produce_20k_exactly_once_in_order(any_bootstrap: str, topic_name: str) -> None:
    with Admin({"bootstrap.servers": any_bootstrap}) as admin:
        admin.create_topics(topic_name, PARTITIONS)
    errors: list[object] = []
    with Producer({"bootstrap.servers": any_bootstrap, "linger.ms": 5, "batch.size": 4096}) as p:
        assert p.config.enable_idempotence
        for i in range(N):
            p.produce(topic_name, f"{i}", key=None, partition=i % PARTITIONS,
                      on_delivery=lambda err, msg: errors.append(err) if err else None)
            if i % 5000 == 0:
                p.poll(0)
        assert p.flush(60) == 0
        txn = p._async.txn
        assert txn is not None and txn.pid.valid
        pid = txn.pid
        next_seq = {p_: txn.sequences.next_sequence((topic_name, p_)) for p_ in range(PARTITIONS)}
    assert errors == []
    # every record exactly once, in order per partition
    got = read_all(any_bootstrap, topic_name, PARTITIONS, N)
    by_part: dict[int, list[int]] = defaultdict(list)
    for part, value in got:
        by_part[part].append(int(value))
    assert sorted(by_part) == list(range(PARTITIONS))
    for part, values in by_part.items():
        assert values == list(range(part, N, PARTITIONS)), f"partition {part} is not exactly once in order"
    # every sequence was used once: the next sequence of a partition is its record count
    assert next_seq == {p_: len(by_part[p_]) for p_ in range(PARTITIONS)}
    _check_batch_headers(any_bootstrap, topic_name, pid.producer_id, pid.epoch)


def _check_batch_headers(bootstrap: str, topic: str, producer_id: int, epoch: int) -> None:
    """Fetch partition 0 raw: its batches carry our producer id/epoch and consecutive base sequences."""

    async def fetch() -> bytes:
        host, port = bootstrap.split(",")[0].rsplit(":", 1)
        conn = BrokerConnection(host, int(port))
        await conn.connect()
        try:
            req = FetchRequest(max_wait_ms=100, min_bytes=1, max_bytes=50 << 20, topics=[FetchTopic(
                topic=topic, partitions=[FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=50 << 20)])])
            resp = await conn.send(req, version=12)  # by topic name
            part = resp.responses[0].partitions[0]
            assert part.error_code == 0 and part.records, part
            return bytes(part.records)
        finally:
            await conn.close()

    data = asyncio.run(fetch())
    expected_seq = 0
    for h in iter_batch_headers(data):
        assert (h.producer_id, h.producer_epoch, h.base_sequence) == (producer_id, epoch, expected_seq)
        expected_seq += h.last_offset_delta + 1
    assert expected_seq == -(-N // PARTITIONS)


@pytest.mark.timeout(240)
def test_broker_sigkill_mid_stream_retries_keep_exactly_once_in_order(
        kafka_broker_factory: Callable[..., KafkaBroker], topic_name: str, caplog: pytest.LogCaptureFixture) -> None:
    """Batches in flight when the broker is SIGKILLed are retried with their sequences after it restarts: no
    duplicate, no gap, no reordering (against oncelog, which restores producer state from its log)."""
    caplog.set_level(logging.DEBUG, logger="oncelog.client.producer.sender")
    broker = kafka_broker_factory({"num.partitions": PARTITIONS}, in_process=False)  # a real SIGKILL
    try:
        with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
            admin.create_topics(topic_name, PARTITIONS)
        errors: list[object] = []
        n = 12_000
        with Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.size": 2048,
                       "request.timeout.ms": 5000, "retry.backoff.ms": 50}) as p:
            for i in range(n):
                p.produce(topic_name, f"{i}", partition=i % PARTITIONS,
                          on_delivery=lambda err, msg: errors.append(err) if err else None)
                if i == n // 2:
                    broker.kill()  # records queued and in flight
                    broker.start()
            assert p.flush(90) == 0
        if errors:  # the first distinct errors say what started it; the broker log says what it saw
            distinct = list(dict.fromkeys(str(e) for e in errors))
            pytest.fail(f"{len(errors)} record(s) failed; first distinct errors:\n  " + "\n  ".join(distinct[:5])
                        + f"\nbroker log:\n{broker.log_tail(40)}")
        assert any("retrying" in r.getMessage() for r in caplog.records), "no batch was retried"
        got = read_all(broker.bootstrap, topic_name, PARTITIONS, n)
        by_part: dict[int, list[int]] = defaultdict(list)
        for part, value in got:
            by_part[part].append(int(value))
        for part, values in by_part.items():
            assert values == list(range(part, n, PARTITIONS)), f"partition {part}: not exactly once in order"
    finally:
        broker.stop()


def test_records_queued_while_no_broker_answers_fail_at_their_delivery_timeout(
        kafka_broker_factory: Callable[..., KafkaBroker], topic_name: str) -> None:
    """delivery.timeout.ms bounds the wait for every record's report, even when the broker is gone: the first
    batch gives up after its retries, and the idempotent producer then waits for a new epoch (KIP-360), sending
    nothing; the batches queued behind it expire at their own delivery timeout (Kafka's
    RecordAccumulator.expiredBatches), not at flush()'s timeout. A cancelled epoch bump ends at close()."""
    broker = kafka_broker_factory()
    timeout_ms = 2000
    p = Producer({"bootstrap.servers": broker.bootstrap, "delivery.timeout.ms": timeout_ms, "linger.ms": 5})
    try:
        p.produce(topic_name, b"before")
        assert p.flush(10) == 0
        broker.kill()
        t0 = time.monotonic()
        reports: list[tuple[float, float, str]] = []  # (produced at, reported at, error)
        for i in range(10):
            p.produce(topic_name, b"%d" % i, on_delivery=lambda err, msg, at=time.monotonic() - t0: reports.append(
                (at, time.monotonic() - t0, err.name() if err else "ok")))
            time.sleep(0.3)
        assert p.flush(20) == 0
        assert time.monotonic() - t0 < 3 + timeout_ms / 1000 + 2, "flush() waited past the delivery timeouts"
        assert [r[2] for r in reports] == ["_TIMED_OUT"] * 10, reports
        # a record's batch may be older than the record (the timeout counts from the batch's creation)
        assert all(reported - at <= timeout_ms / 1000 + 1.5 for at, reported, _ in reports), reports
    finally:
        t1 = time.monotonic()
        p.close(5)
        assert time.monotonic() - t1 < 5
