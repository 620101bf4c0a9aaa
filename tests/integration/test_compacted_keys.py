"""A compacted topic refuses records without a key (Kafka's LogValidator.validateKey): the batch is rejected with
INVALID_RECORD and the keyless records are listed in the Produce response's per-record errors (KIP-467), so a
client fails exactly those records. Found by librdkafka's own test suite: 100 records to a compacted topic, 10 of
them without a key, were all accepted."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.protocol.records import BATCH_HEADER_SIZE, Compression, RecordBatchBuilder, compute_crc

from helpers.rawclient import LATEST, RawClient

CORRUPT_MESSAGE = 2
INVALID_RECORD = 87


def create(bootstrap: str, name: str, policy: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(name, 1, 1, config={"cleanup.policy": policy})])[name]
    fut.result(30)


def batch(keys: list[bytes | None], *, compression: int = 0) -> bytes:
    b = RecordBatchBuilder(compression=compression)
    for i, key in enumerate(keys):
        b.append(1_700_000_000_000 + i, key, b"value-%d" % i)
    return b.build()


def test_librdkafka_fails_exactly_the_records_without_a_key(bootstrap: str, topic_name: str) -> None:
    create(bootstrap, topic_name, "compact")
    results: dict[int, Any] = {}

    def report(i: int) -> Any:
        return lambda err, msg: results.__setitem__(i, err)

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 500, "batch.num.messages": 1000, "retries": 0})
    keyless = set(range(0, 100, 10))
    for i in range(100):
        p.produce(topic_name, value=b"v%d" % i, key=None if i in keyless else b"k%d" % i, partition=0,
                  on_delivery=report(i))
    assert p.flush(30) == 0
    failed = {i for i, err in results.items() if err is not None and err.code() == KafkaError.INVALID_RECORD}
    assert failed == keyless
    others = {i: err for i, err in results.items() if i not in keyless}
    assert all(err is not None and err.code() == KafkaError._INVALID_DIFFERENT_RECORD for err in others.values())
    with RawClient(bootstrap) as c:
        assert c.list_offset(topic_name, 0, LATEST)[1] == 0  # nothing of the batch was written
    for i in sorted(others):  # the application sends the others again: accepted
        p.produce(topic_name, value=b"v%d" % i, key=b"k%d" % i, partition=0, on_delivery=report(i))
    assert p.flush(30) == 0
    assert all(results[i] is None for i in others)
    with RawClient(bootstrap) as c:
        assert c.list_offset(topic_name, 0, LATEST)[1] == 90


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.GZIP, Compression.ZSTD])
def test_record_errors_list_the_keyless_records(bootstrap: str, topic_name: str, compression: int) -> None:
    create(bootstrap, topic_name, "compact")
    keys: list[bytes | None] = [None if i in (0, 3, 7) else b"k%d" % i for i in range(10)]
    with RawClient(bootstrap) as c:
        r = c.produce(topic_name, 0, batch(keys, compression=compression))
        assert r.error_code == INVALID_RECORD
        assert [e.batch_index for e in r.record_errors] == [0, 3, 7]
        assert all("without a key" in (e.batch_index_error_message or "") for e in r.record_errors)
        assert r.error_message and "3 record(s)" in r.error_message and "compact" in r.error_message
        # a payload of two batches: the second one's records are indexed within it, and neither is written
        r = c.produce(topic_name, 0, batch([b"a", b"b"]) + batch([b"c", None, b"e", None]))
        assert r.error_code == INVALID_RECORD and [e.batch_index for e in r.record_errors] == [1, 3]
        assert c.list_offset(topic_name, 0, LATEST)[1] == 0
        # keys everywhere (tombstones included) are fine
        b = RecordBatchBuilder(compression=compression)
        b.append(1_700_000_000_000, b"k", None)
        b.append(1_700_000_000_001, b"", b"empty key is a key")
        r = c.produce(topic_name, 0, b.build())
        assert r.error_code == 0 and not r.record_errors
        assert c.list_offset(topic_name, 0, LATEST)[1] == 2


def test_topics_that_are_not_compacted_take_records_without_a_key(bootstrap: str, topic_name: str) -> None:
    create(bootstrap, topic_name, "delete")
    with RawClient(bootstrap) as c:
        r = c.produce(topic_name, 0, batch([None, None, b"k"]))
        assert r.error_code == 0 and not r.record_errors


def test_undecodable_records_of_a_compacted_topic_are_a_corrupt_message(bootstrap: str, topic_name: str) -> None:
    """Walking the keys means reading the records section (decompressed): garbage there, under a valid CRC, is
    CORRUPT_MESSAGE, and the broker goes on serving."""
    create(bootstrap, topic_name, "compact")
    for compression, garbage in ((Compression.GZIP, b"not gzip at all"), (Compression.NONE, b"\x7f\x00\x01")):
        buf = bytearray(batch([b"k"] * 3, compression=compression))
        buf[BATCH_HEADER_SIZE:] = garbage
        buf[8:12] = (len(buf) - 12).to_bytes(4, "big")
        buf[17:21] = compute_crc(buf, 0, len(buf)).to_bytes(4, "big")
        with RawClient(bootstrap) as c:
            r = c.produce(topic_name, 0, bytes(buf))
            assert r.error_code == CORRUPT_MESSAGE, r
            assert c.produce(topic_name, 0, batch([b"k"])).error_code == 0
