"""The oncelog source against a real broker process and a real Spark: batch and streaming reads.

Data is written by confluent-kafka (librdkafka) and by our own client, read back through
``spark.read/readStream.format("oncelog")`` and compared column by column.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from typing import Any

import confluent_kafka as ck
import pytest

from oncelog.client import Admin, Producer

pytestmark = pytest.mark.timeout(240)


def _create(bootstrap: str, topic: str, partitions: int = 3) -> None:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics(topic, partitions)


def _read(spark: Any, bootstrap: str, **options: str) -> Any:
    r = spark.read.format("oncelog").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def test_batch_read_returns_every_column_as_written(spark: Any, spark_bootstrap: str, spark_topic: str) -> None:
    _create(spark_bootstrap, spark_topic)
    base_ts = 1_700_000_000_123
    sent: dict[tuple[int, int], tuple[bytes | None, bytes | None, int, list[tuple[str, bytes | None]]]] = {}
    p = ck.Producer({"bootstrap.servers": spark_bootstrap, "linger.ms": 5})

    def reporter(key: bytes | None, value: bytes | None, ts: int, headers: list[tuple[str, bytes | None]]
                 ) -> Any:
        def report(err: Any, msg: Any) -> None:
            assert err is None, err
            sent[(msg.partition(), msg.offset())] = (key, value, ts, headers)
        return report

    for i in range(300):
        key = None if i % 10 == 0 else f"k{i}".encode()
        value = None if i % 17 == 0 else bytes([i % 256]) * (i % 50)
        headers: list[tuple[str, bytes | None]] = [("n", str(i).encode()), ("empty", None)] if i % 3 == 0 else []
        p.produce(spark_topic, value=value, key=key, partition=i % 3, timestamp=base_ts + i,
                  headers=headers or None, on_delivery=reporter(key, value, base_ts + i, headers))
    assert p.flush(30) == 0
    # and a few from our own client, partition 0
    ours = Producer({"bootstrap.servers": spark_bootstrap})
    for i in range(5):
        ours.produce(spark_topic, value=b"own-%d" % i, key=b"own", partition=0, timestamp=base_ts + 1000 + i)
    ours.flush(30)
    ours.close()

    rows = _read(spark, spark_bootstrap, subscribe=spark_topic, includeHeaders="true").collect()
    assert len(rows) == 305
    by_pos = {(r.partition, r.offset): r for r in rows}
    assert set(sent) <= set(by_pos)
    for (part, off), (key, value, ts, headers) in sent.items():
        r = by_pos[(part, off)]
        assert (r.topic, r.key, r.value, r.timestampType) == (spark_topic, key, value, 0)
        assert r.timestamp == dt.datetime.fromtimestamp(ts / 1000, dt.UTC).replace(tzinfo=None)
        if headers:
            assert [(h.key, h.value) for h in r.headers] == headers
        else:
            assert r.headers is None  # as spark-sql-kafka
    own = sorted((r.offset, r.value) for r in rows if r.key == b"own")
    assert [v for _, v in own] == [b"own-%d" % i for i in range(5)]
    assert [o for o, _ in own] == list(range(100, 105))

    # without includeHeaders there is no headers column; with offsets the read is a slice
    df = _read(spark, spark_bootstrap, assign=json.dumps({spark_topic: [0, 2]}),
               startingOffsets=json.dumps({spark_topic: {"0": 10, "2": -2}}),
               endingOffsets=json.dumps({spark_topic: {"0": 20, "2": -1}}))
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert got == [(0, o) for o in range(10, 20)] + [(2, o) for o in range(100)]


def test_reading_an_empty_topic_gives_no_rows(spark: Any, spark_bootstrap: str, spark_topic: str) -> None:
    _create(spark_bootstrap, spark_topic)
    assert _read(spark, spark_bootstrap, subscribe=spark_topic).count() == 0
    assert _read(spark, spark_bootstrap, subscribe=f"{spark_topic}-never-created").count() == 0


def test_batch_read_splits_big_ranges_and_keeps_every_record(spark: Any, spark_bootstrap: str,
                                                             spark_topic: str) -> None:
    _create(spark_bootstrap, spark_topic, 1)
    p = ck.Producer({"bootstrap.servers": spark_bootstrap, "linger.ms": 5})
    for i in range(5000):
        p.produce(spark_topic, value=b"%d" % i, partition=0)
    assert p.flush(30) == 0
    df = _read(spark, spark_bootstrap, subscribe=spark_topic, maxRecordsPerPartition="700")
    assert df.rdd.getNumPartitions() == 8
    offsets = sorted(r.offset for r in df.select("offset").collect())
    assert offsets == list(range(5000))
    assert df.where("CAST(value AS STRING) = CAST(offset AS STRING)").count() == 5000


def test_streaming_read_bounds_micro_batches_and_delivers_each_record_once_in_order(
        spark: Any, spark_bootstrap: str, spark_topic: str, checkpoint_dir: str) -> None:
    _create(spark_bootstrap, spark_topic)
    p = ck.Producer({"bootstrap.servers": spark_bootstrap, "linger.ms": 5})
    for i in range(900):
        p.produce(spark_topic, value=b"%d" % i, key=b"%d" % (i % 3), partition=i % 3)
    assert p.flush(30) == 0
    batches: list[list[tuple[int, int, bytes]]] = []

    def collect(df: Any, batch_id: int) -> None:
        batches.append([(r.partition, r.offset, r.value) for r in df.collect()])

    def run() -> Any:
        q = (spark.readStream.format("oncelog").option("kafka.bootstrap.servers", spark_bootstrap)
             .option("subscribe", spark_topic).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "250").load()
             .writeStream.foreachBatch(collect).option("checkpointLocation", checkpoint_dir)
             .trigger(availableNow=True).start())
        q.awaitTermination(180)
        assert q.exception() is None
        return q

    q = run()
    sizes = [len(b) for b in batches]
    assert all(s <= 250 for s in sizes) and sum(sizes) == 900 and len(sizes) >= 4, sizes
    rows = [r for b in batches for r in b]
    assert sorted((part, off) for part, off, _ in rows) == [(part, o) for part in range(3) for o in range(300)]
    for part in range(3):  # in order per partition, across micro-batches
        offs = [off for pp, off, _ in rows if pp == part]
        assert offs == sorted(offs)
    assert all(v == b"%d" % (off * 3 + part) for part, off, v in rows)
    assert json.loads(q.lastProgress["sources"][0]["latestOffset"]) == {spark_topic: {"0": 300, "1": 300, "2": 300}}

    # restart from the checkpoint: only the new records, once
    for i in range(900, 960):
        p.produce(spark_topic, value=b"%d" % i, partition=i % 3)
    assert p.flush(30) == 0
    batches.clear()
    run()
    again = sorted((part, off) for b in batches for part, off, _ in b)
    assert again == [(part, o) for part in range(3) for o in range(300, 320)]


def _aborted_and_committed(bootstrap: str, topic: str) -> None:
    p = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}",
                     "transaction.timeout.ms": 30000})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(50):
        p.produce(topic, value=b"aborted-%d" % i, partition=i % 2)
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    for i in range(40):
        p.produce(topic, value=b"committed-%d" % i, partition=i % 2)
    p.commit_transaction(30)
    plain = ck.Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, value=b"plain", partition=0)
    assert plain.flush(30) == 0


def test_read_committed_hides_aborted_records(spark: Any, spark_bootstrap: str, spark_topic: str,
                                              checkpoint_dir: str) -> None:
    _create(spark_bootstrap, spark_topic, 2)
    _aborted_and_committed(spark_bootstrap, spark_topic)
    committed = sorted([b"committed-%d" % i for i in range(40)] + [b"plain"])
    everything = sorted(committed + [b"aborted-%d" % i for i in range(50)])

    rc = _read(spark, spark_bootstrap, subscribe=spark_topic)
    assert sorted(r.value for r in rc.select("value").collect()) == committed
    ru = _read(spark, spark_bootstrap, subscribe=spark_topic, **{"kafka.isolation.level": "read_uncommitted"})
    assert sorted(r.value for r in ru.select("value").collect()) == everything

    # streaming, tiny micro-batches that start and end among aborted records and markers
    got: list[bytes] = []
    q = (spark.readStream.format("oncelog").option("kafka.bootstrap.servers", spark_bootstrap)
         .option("subscribe", spark_topic).option("startingOffsets", "earliest")
         .option("maxOffsetsPerTrigger", "7").load()
         .writeStream.foreachBatch(lambda df, _id: got.extend(r.value for r in df.select("value").collect()))
         .option("checkpointLocation", checkpoint_dir).trigger(availableNow=True).start())
    q.awaitTermination(180)
    assert q.exception() is None
    assert sorted(got) == committed


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_read_back(spark: Any, spark_bootstrap: str, spark_topic: str, codec: str) -> None:
    _create(spark_bootstrap, spark_topic, 1)
    p = ck.Producer({"bootstrap.servers": spark_bootstrap, "linger.ms": 20, "compression.type": codec})
    for i in range(2000):
        p.produce(spark_topic, value=b"value-%d" % i * 5, key=b"%d" % i, partition=0)
    assert p.flush(30) == 0
    rows = _read(spark, spark_bootstrap, subscribe=spark_topic).select("key", "value", "offset").collect()
    assert sorted((r.offset, r.key, r.value) for r in rows) == [(i, b"%d" % i, b"value-%d" % i * 5)
                                                                for i in range(2000)]


def test_log_append_time_topic_reports_timestamp_type_1(spark: Any, spark_bootstrap: str,
                                                        spark_topic: str) -> None:
    with Admin({"bootstrap.servers": spark_bootstrap}) as admin:
        admin.create_topics(spark_topic, 1, {"message.timestamp.type": "LogAppendTime"})
    before = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    p = ck.Producer({"bootstrap.servers": spark_bootstrap})
    for i in range(10):
        p.produce(spark_topic, value=b"%d" % i, partition=0, timestamp=1_000_000 + i)
    assert p.flush(30) == 0
    rows = _read(spark, spark_bootstrap, subscribe=spark_topic).collect()
    assert len(rows) == 10 and {r.timestampType for r in rows} == {1}
    assert all(r.timestamp >= before - dt.timedelta(seconds=5) for r in rows)


def test_stream_picks_up_new_topics_and_partitions_from_their_start(spark: Any, spark_bootstrap: str,
                                                                    spark_topic: str, checkpoint_dir: str) -> None:
    first, second = f"{spark_topic}-a", f"{spark_topic}-b"
    _create(spark_bootstrap, first, 1)
    p = ck.Producer({"bootstrap.servers": spark_bootstrap, "linger.ms": 2})

    def send(topic: str, partition: int, n: int, tag: str, producer: Any = p) -> None:
        for i in range(n):
            producer.produce(topic, value=f"{tag}-{i}".encode(), partition=partition)
        assert producer.flush(30) == 0

    send(first, 0, 5, "before")  # startingOffsets=latest: never read
    got: list[tuple[str, int, bytes]] = []
    q = (spark.readStream.format("oncelog").option("kafka.bootstrap.servers", spark_bootstrap)
         .option("subscribePattern", f"{spark_topic}-.*").load()
         .writeStream.foreachBatch(lambda df, _id: got.extend(
             (r.topic, r.partition, r.value) for r in df.select("topic", "partition", "value").collect()))
         .option("checkpointLocation", checkpoint_dir).start())
    try:
        q.processAllAvailable()
        send(first, 0, 3, "a0")
        q.processAllAvailable()
        _create(spark_bootstrap, second, 2)
        send(second, 0, 4, "b0")
        send(second, 1, 2, "b1")
        with Admin({"bootstrap.servers": spark_bootstrap}) as admin:
            admin.create_partitions(first, 2)
        send(first, 1, 3, "a1", ck.Producer({"bootstrap.servers": spark_bootstrap}))  # fresh metadata
        deadline = time.monotonic() + 60
        while len(got) < 12 and time.monotonic() < deadline:
            q.processAllAvailable()
            time.sleep(0.5)
    finally:
        q.stop()
    assert q.exception() is None
    assert sorted(got) == sorted(
        [(first, 0, f"a0-{i}".encode()) for i in range(3)] + [(first, 1, f"a1-{i}".encode()) for i in range(3)]
        + [(second, 0, f"b0-{i}".encode()) for i in range(4)] + [(second, 1, f"b1-{i}".encode()) for i in range(2)])


def test_read_committed_stops_at_an_open_transaction_and_reads_on_once_it_commits(
        spark: Any, spark_bootstrap: str, spark_topic: str, checkpoint_dir: str) -> None:
    _create(spark_bootstrap, spark_topic, 1)
    plain = ck.Producer({"bootstrap.servers": spark_bootstrap})
    txn = ck.Producer({"bootstrap.servers": spark_bootstrap, "transactional.id": f"open-{spark_topic}"})
    txn.init_transactions(30)
    for i in range(3):
        plain.produce(spark_topic, value=b"before-%d" % i, partition=0)
    assert plain.flush(30) == 0
    txn.begin_transaction()
    txn.produce(spark_topic, value=b"in-txn", partition=0)
    txn.flush(30)
    plain.produce(spark_topic, value=b"after", partition=0)
    assert plain.flush(30) == 0

    def values(**opts: str) -> list[bytes]:
        return sorted(r.value for r in _read(spark, spark_bootstrap, subscribe=spark_topic, **opts).collect())

    # the last stable offset is the open transaction's first offset: nothing at or after it is read yet
    assert values() == [b"before-0", b"before-1", b"before-2"]
    assert values(**{"kafka.isolation.level": "read_uncommitted"}) == sorted(
        [b"before-0", b"before-1", b"before-2", b"in-txn", b"after"])
    got: list[bytes] = []
    q = (spark.readStream.format("oncelog").option("kafka.bootstrap.servers", spark_bootstrap)
         .option("subscribe", spark_topic).option("startingOffsets", "earliest").load()
         .writeStream.foreachBatch(lambda df, _id: got.extend(r.value for r in df.select("value").collect()))
         .option("checkpointLocation", checkpoint_dir).start())
    try:
        q.processAllAvailable()
        assert sorted(got) == [b"before-0", b"before-1", b"before-2"]
        txn.commit_transaction(30)
        deadline = time.monotonic() + 60
        while len(got) < 5 and time.monotonic() < deadline:
            q.processAllAvailable()
            time.sleep(0.3)
    finally:
        q.stop()
    assert got == [b"before-0", b"before-1", b"before-2", b"in-txn", b"after"]


def test_deleted_records_fail_the_read_unless_fail_on_data_loss_is_false(spark: Any, spark_bootstrap: str,
                                                                         spark_topic: str) -> None:
    _create(spark_bootstrap, spark_topic, 1)
    p = ck.Producer({"bootstrap.servers": spark_bootstrap})
    for i in range(20):
        p.produce(spark_topic, value=b"%d" % i, partition=0)
        p.flush(30)  # one batch per record, so DeleteRecords can cut anywhere
    with Admin({"bootstrap.servers": spark_bootstrap}) as admin:
        admin.delete_records({(spark_topic, 0): 12})
    start = json.dumps({spark_topic: {"0": 5}})
    with pytest.raises(Exception, match="failOnDataLoss=false"):
        _read(spark, spark_bootstrap, subscribe=spark_topic, startingOffsets=start).collect()
    rows = _read(spark, spark_bootstrap, subscribe=spark_topic, startingOffsets=start,
                 failOnDataLoss="false").select("offset").collect()
    assert sorted(r.offset for r in rows) == list(range(12, 20))
