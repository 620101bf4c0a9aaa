"""Streaming writes through the exactly-once sink in the shared SparkSession (no kills: see test_sink_crash)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from oncelog.client import Admin, Producer

from helpers.spark_sink import duplicates_and_missing, open_txns, read_committed

pytestmark = pytest.mark.timeout(240)


def _fill(bs: str, topic: str, start: int, n: int) -> None:
    p = Producer({"bootstrap.servers": bs})
    for i in range(start, start + n):
        p.produce(topic, f"e{i:05d}".encode(), key=f"k{i % 7}".encode())
    assert p.flush(30) == 0
    p.close()


def _run(spark: Any, bs: str, src: str, dst: str, checkpoint: str, prefix: str) -> Any:
    q = (spark.readStream.format("oncelog").option("kafka.bootstrap.servers", bs).option("subscribe", src)
         .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "150").load()
         .selectExpr("key", "upper(cast(value as string)) as value", "array(named_struct('key', 'src', "
                     "'value', cast(concat(topic, ':', cast(offset as string)) as binary))) as headers")
         .writeStream.format("oncelog").option("kafka.bootstrap.servers", bs).option("topic", dst)
         .option("transactionalIdPrefix", prefix).option("checkpointLocation", checkpoint)
         .trigger(availableNow=True).start())
    q.awaitTermination(180)
    assert not q.isActive, "the availableNow query did not finish"
    return q


def test_stream_write_exactly_once_across_a_restart_with_new_input(
        spark: Any, spark_bootstrap: str, spark_topic: str, checkpoint_dir: str) -> None:
    bs, src, dst = spark_bootstrap, f"{spark_topic}-in", f"{spark_topic}-out"
    prefix = f"stream-{uuid.uuid4().hex[:8]}"
    with Admin({"bootstrap.servers": bs}) as a:
        a.create_topics([src, dst], 3)
    _fill(bs, src, 0, 400)
    q = _run(spark, bs, src, dst, checkpoint_dir, prefix)
    assert sum(p["numInputRows"] for p in q.recentProgress) == 400
    assert len(read_committed(bs, dst, expect=400)) == 400
    _fill(bs, src, 400, 200)  # the same query (same checkpoint, same query id) picks up only the new records
    q2 = _run(spark, bs, src, dst, checkpoint_dir, prefix)
    assert q2.id == q.id
    values = read_committed(bs, dst, expect=600)
    dups, missing = duplicates_and_missing(values, {f"E{i:05d}".encode() for i in range(600)})
    assert not dups and not missing and len(values) == 600
    assert open_txns(bs, prefix) == []
