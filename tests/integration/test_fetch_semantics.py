"""Offsets by time, long-poll fetch, acks levels and size limits, with real clients against the shared broker."""

from __future__ import annotations

import os
import threading
import time

import pytest
from confluent_kafka import OFFSET_END, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from helpers.rawclient import EARLIEST, LATEST, MAX_TIMESTAMP, RawClient, build_batch, decode_all
from helpers.topics import make_topic

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

TIMEOUT = 15
T0 = 1_700_000_000_000  # fixed CreateTime base for timestamp lookups


def producer(bootstrap: str, **extra: object) -> Producer:
    conf: dict[str, object] = {"bootstrap.servers": bootstrap, "enable.idempotence": False, "acks": "all",
                               "linger.ms": 0}
    conf.update(extra)
    return Producer(conf)


# Timestamps of the 10 records of the timestamp topic: rising but with one out-of-order maximum at offset 6.
STAMPS = [T0 + 1000 * i for i in range(10)]
STAMPS[6] = T0 + 50_000


@pytest.fixture
def ts_topic(bootstrap: str, topic_name: str) -> str:
    make_topic(bootstrap, topic_name, 1)
    p = producer(bootstrap, **{"linger.ms": 50})
    for i, ts in enumerate(STAMPS):
        p.produce(topic_name, value=f"r{i}".encode(), partition=0, timestamp=ts)
        if i == 4:
            p.flush(TIMEOUT)  # two batches, so lookups cross a batch boundary
    assert p.flush(TIMEOUT) == 0
    return topic_name


def test_list_offsets_raw(bootstrap: str, ts_topic: str) -> None:
    with RawClient(bootstrap) as c:
        assert c.list_offset(ts_topic, 0, EARLIEST)[:2] == (0, 0)
        assert c.list_offset(ts_topic, 0, LATEST)[:2] == (0, 10)
        assert c.list_offset(ts_topic, 0, MAX_TIMESTAMP) == (0, 6, T0 + 50_000)
        # first offset whose timestamp >= target
        assert c.list_offset(ts_topic, 0, T0) == (0, 0, T0)
        assert c.list_offset(ts_topic, 0, T0 + 2500) == (0, 3, T0 + 3000)
        assert c.list_offset(ts_topic, 0, T0 + 5001) == (0, 6, T0 + 50_000)
        assert c.list_offset(ts_topic, 0, T0 + 9000) == (0, 6, T0 + 50_000)
        assert c.list_offset(ts_topic, 0, T0 - 10**6) == (0, 0, T0)
        assert c.list_offset(ts_topic, 0, T0 + 50_001) == (0, -1, -1)
        # unknown partition
        assert c.list_offset(ts_topic, 7, LATEST)[0] == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_offsets_for_times_confluent(bootstrap: str, ts_topic: str) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    try:
        got = c.offsets_for_times([TopicPartition(ts_topic, 0, T0 + 2500)], timeout=TIMEOUT)
        assert got[0].error is None and got[0].offset == 3
        got = c.offsets_for_times([TopicPartition(ts_topic, 0, T0 + 60_000)], timeout=TIMEOUT)
        assert got[0].offset == OFFSET_END  # -1: no such record
        assert c.get_watermark_offsets(TopicPartition(ts_topic, 0), timeout=TIMEOUT) == (0, 10)
    finally:
        c.close()
    a = AdminClient({"bootstrap.servers": bootstrap})
    tp = TopicPartition(ts_topic, 0)
    for spec, want in ((OffsetSpec.earliest(), 0), (OffsetSpec.latest(), 10), (OffsetSpec.max_timestamp(), 6),
                       (OffsetSpec.for_timestamp(T0 + 1500), 2)):
        res = next(iter(a.list_offsets({tp: spec}).values())).result(TIMEOUT)
        assert res.offset == want, f"{spec}: got {res.offset}, want {want}"
    res = next(iter(a.list_offsets({tp: OffsetSpec.max_timestamp()}).values())).result(TIMEOUT)
    assert res.timestamp == T0 + 50_000


def test_offsets_for_times_kafka_python(bootstrap: str, ts_topic: str) -> None:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    try:
        tp = KTP(ts_topic, 0)
        got = c.offsets_for_times({tp: T0 + 2500})
        assert got[tp] is not None and (got[tp].offset, got[tp].timestamp) == (3, T0 + 3000)
        assert c.offsets_for_times({tp: T0 + 60_000})[tp] is None
        assert c.beginning_offsets([tp]) == {tp: 0}
        assert c.end_offsets([tp]) == {tp: 10}
        # seek to the looked-up offset and read from there
        c.assign([tp])
        c.seek(tp, got[tp].offset)
        values = []
        deadline = time.monotonic() + 10
        while len(values) < 7 and time.monotonic() < deadline:
            for msgs in c.poll(timeout_ms=500).values():
                values += [(m.value, m.timestamp) for m in msgs]
        assert values == [(f"r{i}".encode(), STAMPS[i]) for i in range(3, 10)]
    finally:
        c.close()


def test_log_append_time_topic(bootstrap: str, topic_name: str) -> None:
    make_topic(bootstrap, topic_name, 1, {"message.timestamp.type": "LogAppendTime"})
    with RawClient(bootstrap) as c:
        before = int(time.time() * 1000)
        resp = c.produce(topic_name, 0, build_batch([(b"k", b"v")] * 3, timestamp_ms=T0))
        after = int(time.time() * 1000)
        assert resp.error_code == 0
        assert before - 5 <= resp.log_append_time_ms <= after + 5
        recs = c.fetch_all(topic_name, 0)
        assert [r.timestamp for r in recs] == [resp.log_append_time_ms] * 3


# -- long poll -----------------------------------------------------------------------------------------------------

def test_long_poll_raw_waits_then_wakes_on_append(bootstrap: str, topic_name: str) -> None:
    make_topic(bootstrap, topic_name, 1)
    with RawClient(bootstrap) as waiter:
        # nothing arrives: the broker holds the fetch for max_wait_ms
        t0 = time.monotonic()
        p = waiter.fetch(topic_name, 0, 0, max_wait_ms=600)
        held = time.monotonic() - t0
        assert p.error_code == 0 and not p.records
        assert 0.5 <= held < 3, f"empty long-poll returned after {held:.2f}s instead of ~0.6 s"

        def produce_later() -> None:
            time.sleep(0.2)
            with RawClient(bootstrap) as c:
                assert c.produce(topic_name, 0, build_batch([(b"k", b"wake")])).error_code == 0

        th = threading.Thread(target=produce_later)
        t0 = time.monotonic()
        th.start()
        p = waiter.fetch(topic_name, 0, 0, max_wait_ms=5000)
        took = time.monotonic() - t0
        th.join()
        assert p.error_code == 0 and p.records, "long-poll returned without the appended record"
        assert took < 1.5, f"long-poll fetch took {took:.2f}s; it should wake on the append at ~0.2 s"


def test_long_poll_confluent_consumer_wakes(bootstrap: str, topic_name: str) -> None:
    make_topic(bootstrap, topic_name, 1)
    p = producer(bootstrap)
    p.produce(topic_name, value=b"first", partition=0)
    assert p.flush(TIMEOUT) == 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 5000, "fetch.min.bytes": 1})
    try:
        c.assign([TopicPartition(topic_name, 0, 0)])
        m = c.poll(TIMEOUT)
        assert m is not None and not m.error() and m.value() == b"first"
        time.sleep(0.5)  # the consumer is now parked in a 5 s long-poll fetch at offset 1
        sent = time.monotonic()

        def later() -> None:
            time.sleep(0.2)
            p.produce(topic_name, value=b"second", partition=0)
            p.flush(TIMEOUT)

        th = threading.Thread(target=later)
        th.start()
        m = c.poll(10)
        got_at = time.monotonic() - sent
        th.join()
        assert m is not None and not m.error() and m.value() == b"second"
        assert got_at < 2.0, f"record produced at 0.2 s reached the consumer after {got_at:.2f}s"
    finally:
        c.close()


def test_long_poll_wakes_for_any_partition(bootstrap: str, topic_name: str) -> None:
    """A fetch over several partitions returns when any one of them gets data."""
    make_topic(bootstrap, topic_name, 3)
    from oncelog.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic

    with RawClient(bootstrap) as waiter:
        req = FetchRequest(replica_id=-1, max_wait_ms=5000, min_bytes=1, max_bytes=1 << 20, topics=[
            FetchTopic(topic=topic_name, partitions=[FetchPartition(partition=i, fetch_offset=0,
                                                                    partition_max_bytes=1 << 20)
                                                     for i in range(3)])])
        corr = waiter.send(1, 12, req)
        time.sleep(0.2)
        t0 = time.monotonic()
        with RawClient(bootstrap) as c:
            assert c.produce(topic_name, 2, build_batch([(b"k", b"p2")])).error_code == 0
        resp = waiter.recv(1, 12, corr)
        assert time.monotonic() - t0 < 1.5
        parts = {p.partition_index: p for p in resp.responses[0].partitions}
        assert parts[2].records and not parts[0].records and not parts[1].records


# -- acks ------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("acks", [0, 1, -1])
def test_acks_levels_confluent(bootstrap: str, topic_name: str, acks: int) -> None:
    make_topic(bootstrap, topic_name, 1)
    p = producer(bootstrap, acks=acks, **{"linger.ms": 5})
    reports: list[tuple[object, int]] = []
    for i in range(200):
        p.produce(topic_name, value=f"{i}".encode(), partition=0,
                  on_delivery=lambda err, msg: reports.append((err, msg.offset())))
    assert p.flush(TIMEOUT) == 0
    assert len(reports) == 200 and all(err is None for err, _ in reports), reports[:3]
    if acks == 0:
        assert all(off is None or off < 0 for _, off in reports), "acks=0 cannot know offsets"
    else:
        assert sorted(off for _, off in reports) == list(range(200))
    with RawClient(bootstrap) as c:
        deadline = time.monotonic() + 5
        while c.list_offset(topic_name, 0, LATEST)[1] < 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [r.value for r in c.fetch_all(topic_name, 0)] == [f"{i}".encode() for i in range(200)]


def test_acks0_sends_no_response_raw(bootstrap: str, topic_name: str) -> None:
    """acks=0 produce gets no answer: the next request's answer is the next frame on the connection."""
    make_topic(bootstrap, topic_name, 1)
    with RawClient(bootstrap) as c:
        for i in range(5):
            assert c.produce(topic_name, 0, build_batch([(None, f"{i}".encode())]), acks=0) is None
        corr = c.send(18, 3, __import__("oncelog.protocol.messages.api_versions_request",
                                        fromlist=["x"]).ApiVersionsRequest(client_software_name="x",
                                                                           client_software_version="1"))
        resp = c.recv(18, 3, corr)  # asserts the correlation id: no stray produce response before it
        assert resp.error_code == 0
        resp = c.produce(topic_name, 0, build_batch([(None, b"last")]), acks=-1)
        assert resp.error_code == 0 and resp.base_offset == 5
        assert [r.value for r in c.fetch_all(topic_name, 0)] == [b"0", b"1", b"2", b"3", b"4", b"last"]


def test_invalid_acks(bootstrap: str, topic_name: str) -> None:
    make_topic(bootstrap, topic_name, 1)
    with RawClient(bootstrap) as c:
        resp = c.produce(topic_name, 0, build_batch([(None, b"x")]), acks=2)
        assert resp.error_code == KafkaError.INVALID_REQUIRED_ACKS
        assert c.list_offset(topic_name, 0, LATEST)[1] == 0


def test_acks_all_is_visible_immediately(bootstrap: str, topic_name: str) -> None:
    """Once acks=all is answered the record is below the high watermark: a fetch right after returns it."""
    make_topic(bootstrap, topic_name, 1)
    with RawClient(bootstrap) as c:
        for i in range(20):
            resp = c.produce(topic_name, 0, build_batch([(None, f"{i}".encode())]), acks=-1)
            p = c.fetch(topic_name, 0, resp.base_offset)
            assert p.high_watermark == resp.base_offset + 1
            assert [r.value for r in decode_all(p.records)] == [f"{i}".encode()]


# -- sizes -----------------------------------------------------------------------------------------------------------

def test_message_too_large_confluent(bootstrap: str, topic_name: str) -> None:
    make_topic(bootstrap, topic_name, 1)
    p = producer(bootstrap, **{"message.max.bytes": 20_000_000, "compression.type": "none"})
    errors: list[object] = []
    payload = os.urandom(15 * 1024 * 1024)
    p.produce(topic_name, value=payload, partition=0, on_delivery=lambda err, msg: errors.append(err))
    p.produce(topic_name, value=b"small", partition=0, on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(30) == 0
    assert len(errors) == 2
    assert errors[0] is not None and errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE, errors[0]
    assert errors[1] is None, f"the small record after the big one failed: {errors[1]}"
    with RawClient(bootstrap) as c:
        assert [r.value for r in c.fetch_all(topic_name, 0)] == [b"small"]


def test_message_too_large_raw_and_topic_override(bootstrap: str, topic_name: str) -> None:
    make_topic(bootstrap, topic_name, 1)
    big = build_batch([(None, os.urandom(1_100_000))])
    just_fits = build_batch([(None, os.urandom(1_048_588 - 61 - 20))])
    assert len(just_fits) - 12 <= 1_048_588
    with RawClient(bootstrap) as c:
        assert c.produce(topic_name, 0, big).error_code == KafkaError.MSG_SIZE_TOO_LARGE
        assert c.produce(topic_name, 0, just_fits).error_code == 0
        assert c.list_offset(topic_name, 0, LATEST)[1] == 1
    big_topic = topic_name + "-big"
    make_topic(bootstrap, big_topic, 1, {"max.message.bytes": "20000000"})
    with RawClient(bootstrap) as c:
        assert c.produce(big_topic, 0, big).error_code == 0
        recs = c.fetch_all(big_topic, 0)
        assert len(recs) == 1 and len(recs[0].value) == 1_100_000


def test_fetch_returns_oversized_first_batch(bootstrap: str, topic_name: str) -> None:
    """A batch larger than the fetch's max_bytes still comes back whole when it is the first (KIP-74)."""
    make_topic(bootstrap, topic_name, 1, {"max.message.bytes": "5000000"})
    with RawClient(bootstrap) as c:
        assert c.produce(topic_name, 0, build_batch([(None, b"z" * 300_000)])).error_code == 0
        p = c.fetch(topic_name, 0, 0, max_bytes=1000)
        recs = decode_all(p.records)
        assert len(recs) == 1 and recs[0].value == b"z" * 300_000


def test_fetch_out_of_range_and_at_end(bootstrap: str, topic_name: str) -> None:
    make_topic(bootstrap, topic_name, 1)
    with RawClient(bootstrap) as c:
        c.produce(topic_name, 0, build_batch([(None, b"a")] * 3))
        p = c.fetch(topic_name, 0, 3)
        assert p.error_code == 0 and not p.records and p.high_watermark == 3
        assert c.fetch(topic_name, 0, 4).error_code == KafkaError.OFFSET_OUT_OF_RANGE
        assert c.fetch(topic_name, 0, -5).error_code == KafkaError.OFFSET_OUT_OF_RANGE
        # a mid-batch offset returns the whole batch; the records before it are the client's to skip
        recs = decode_all(c.fetch(topic_name, 0, 1).records)
        assert [r.offset for r in recs][-2:] == [1, 2]
