"""Batch write (``df.write.mode("append").format("oncelog")``) round trips through the real broker, read back by confluent-kafka."""

from __future__ import annotations

import time
import uuid
from typing import Any

import confluent_kafka as ck
import pytest

from oncelog.client import Admin
from oncelog.spark.commit_log import DEFAULT_COMMIT_TOPIC

from helpers.spark_sink import open_txns, read_committed

pytestmark = pytest.mark.timeout(180)


def _create(bs: str, *topics: str, partitions: int = 3) -> None:
    with Admin({"bootstrap.servers": bs}) as a:
        for t in topics:
            a.create_topics(t, partitions)


def test_batch_write_round_trip_exactly_the_rows(spark: Any, spark_bootstrap: str, spark_topic: str) -> None:
    _create(spark_bootstrap, spark_topic)
    n = 5000
    df = spark.range(n).selectExpr("cast(id % 97 as string) as key", "concat('row-', cast(id as string)) as value")
    (df.repartition(4).write.mode("append").format("oncelog").option("kafka.bootstrap.servers", spark_bootstrap)
     .option("topic", spark_topic).option("sinkId", "roundtrip").save())
    got = read_committed(spark_bootstrap, spark_topic, expect=n)
    assert sorted(got) == sorted(f"row-{i}".encode() for i in range(n))
    assert open_txns(spark_bootstrap, "oncelog-spark-roundtrip-") == []
    # the job's decision was recorded, then tombstoned once completed (a batch job is never re-run)
    latest = _latest_by_key(spark_bootstrap, DEFAULT_COMMIT_TOPIC, b"roundtrip-")
    assert len(latest) == 1 and list(latest.values()) == [None], latest


def _latest_by_key(bs: str, topic: str, prefix: bytes) -> dict[bytes, bytes | None]:
    c = ck.Consumer({"bootstrap.servers": bs, "group.id": f"g-{uuid.uuid4().hex}", "enable.auto.commit": False})
    try:
        lo, hi = c.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=10)
        c.assign([ck.TopicPartition(topic, 0, lo)])
        out: dict[bytes, bytes | None] = {}
        pos, deadline = lo, time.monotonic() + 30
        while pos < hi and time.monotonic() < deadline:
            for m in c.consume(1000, 1.0):
                key = m.key() or b""
                if m.error() is None:
                    pos = (m.offset() or 0) + 1
                    if key.startswith(prefix):
                        out[key] = m.value()
        return out
    finally:
        c.close()


def test_batch_write_routes_by_topic_partition_columns_and_keeps_headers(
        spark: Any, spark_bootstrap: str, spark_topic: str) -> None:
    a, b = f"{spark_topic}-a", f"{spark_topic}-b"
    _create(spark_bootstrap, a, b)
    rows = [(a if i % 2 else b, i % 3, f"k{i}".encode(), f"v{i}".encode(), [("h", f"{i}".encode())])
            for i in range(60)]
    df = spark.createDataFrame(rows, "topic string, partition int, key binary, value binary, "
                                     "headers array<struct<key: string, value: binary>>")
    df.write.mode("append").format("oncelog").option("kafka.bootstrap.servers", spark_bootstrap).save()
    c = ck.Consumer({"bootstrap.servers": spark_bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                     "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        c.assign([ck.TopicPartition(t, p, ck.OFFSET_BEGINNING) for t in (a, b) for p in range(3)])
        seen: dict[Any, tuple[Any, ...]] = {}
        for _ in range(100):
            for m in c.consume(100, 0.2):
                if m.error() is None:
                    seen[m.value()] = (m.topic(), m.partition(), m.key(), list(m.headers() or []))
            if len(seen) == 60:
                break
    finally:
        c.close()
    assert seen == {v: (t, p, k, [(h[0][0], h[0][1])]) for t, p, k, v, h in rows}


def test_batch_write_explains_a_missing_value_column_or_topic(spark: Any, spark_bootstrap: str) -> None:
    df = spark.range(3).selectExpr("cast(id as string) as v")
    with pytest.raises(Exception, match="needs a 'value' column"):
        df.write.mode("append").format("oncelog").option("kafka.bootstrap.servers", spark_bootstrap).option("topic", "t").save()
    with pytest.raises(Exception, match="option 'topic'"):
        df.selectExpr("v as value").write.mode("append").format("oncelog").option("kafka.bootstrap.servers", spark_bootstrap).save()


def test_batch_write_to_a_broker_without_two_phase_commit_says_how_to_enable_it(
        spark: Any, bootstrap: str, topic_name: str) -> None:
    _create(bootstrap, topic_name)
    df = spark.range(3).selectExpr("cast(id as string) as value")
    with pytest.raises(Exception, match="transaction.two.phase.commit.enable=true"):
        df.write.mode("append").format("oncelog").option("kafka.bootstrap.servers", bootstrap).option(
            "topic", topic_name).save()
    assert read_committed(bootstrap, topic_name, timeout=2, settle=0.1) == []


def test_default_save_mode_appends_and_overwrite_is_refused(spark: Any, spark_bootstrap: str,
                                                            spark_topic: str) -> None:
    """As spark-sql-kafka: save() without mode() (ErrorIfExists) and mode("errorifexists") append; Overwrite is
    refused with a message that says so (issue 17 finding 8: Spark refused the default mode for the oncelog format)."""
    _create(spark_bootstrap, spark_topic)
    df = spark.createDataFrame([("a",), ("b",)], "value string")
    df.write.format("oncelog").option("kafka.bootstrap.servers", spark_bootstrap).option("topic", spark_topic).save()
    (df.write.mode("errorifexists").format("oncelog").option("kafka.bootstrap.servers", spark_bootstrap)
     .option("topic", spark_topic).save())
    assert sorted(read_committed(spark_bootstrap, spark_topic, 4)) == [b"a", b"a", b"b", b"b"]
    with pytest.raises(Exception, match="Overwrite is not allowed for oncelog"):
        (df.write.mode("overwrite").format("oncelog").option("kafka.bootstrap.servers", spark_bootstrap)
         .option("topic", spark_topic).save())
