#!/usr/bin/env python3
"""Rows/s of the oncelog Spark source (and sink, when present) next to Spark's own ceilings, in one run.

    .venv/bin/python bench/spark_bench.py                       # 2M x 100 B records, 3 rounds
    .venv/bin/python bench/spark_bench.py --records 500000 --rounds 2 --partitions 4

Scenarios (every round runs each once, in this order, so noise hits them alike):
- ``rate -> noop``: Spark's ``rate-micro-batch`` source into the ``noop`` sink, one micro-batch of N rows: the
  JVM engine's ceiling.
- ``python arrow -> noop``: a trivial Python data source yielding ready-made Arrow batches of the same shape as
  the oncelog source (100 B values): the ceiling of any Python source on this box.
- ``python arrow source -> noop`` again with the source's N rows: the source's like-for-like ceiling (the same
  query start-up in both); the table gives the source's ratio to it, round by round.
- ``oncelog batch read -> noop`` and ``oncelog stream read -> noop`` (availableNow, one micro-batch): the source.
- ``rate -> python arrow sink that drops the rows``: the sink's query (the same rate source and projection making
  the 100 B values) into a trivial Python streaming sink that receives the Arrow batches and drops them: the
  ceiling of any Python sink on this box (the JVM's rows-to-Arrow conversion and the Python workers included).
- ``rate -> oncelog exactly-once sink``: the same N x 100 B rows through the exactly-once streaming sink (only
  when ``oncelog.spark.sink`` exists); the table gives its ratio to the dropping sink, round by round. Its output
  topic is created before the clock starts (setting up where the rows go is not the sink's work).
A warm-up runs every scenario once at full size before the timed rounds (the JVM compiles and JITs each query's
generated code, Python workers start, the sink-commit topic is created): without it the first round of each
scenario pays that, and a scenario warmed less than the others is not compared like with like.
Each number is N / wall time of the whole query (planning and the ~0.5 s micro-batch floor included); for the
stream read also rows / time inside its micro-batches (Spark's triggerExecution: the query start-up left out).
The broker is a fresh ``oncelog serve`` child process; the topic is filled once with confluent-kafka.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)

from oncelog.client import Admin
from oncelog.spark import register
from oncelog.spark.reader import arrow_schema
from oncelog.testing.broker_process import BrokerProcess


SAME_ROWS = "python arrow source -> noop, the source's rows (Python ceiling, same rows)"
DROP_SINK = "rate -> python arrow sink that drops the rows (Python sink ceiling)"
SINK = "rate -> oncelog exactly-once sink"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class _ConstPartition(InputPartition):
    def __init__(self, rows: int) -> None:
        self.rows = rows


class ConstArrowSource(DataSource):
    """Python data source yielding pre-built Arrow batches shaped like oncelog's rows (the Python ceiling)."""

    @classmethod
    def name(cls) -> str:
        return "bench_const_arrow"

    def schema(self) -> str:
        return ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
                "timestampType int")

    def reader(self, schema: Any) -> DataSourceReader:
        return _ConstReader(int(self.options["rows"]), int(self.options["partitions"]))


class _ConstReader(DataSourceReader):
    def __init__(self, rows: int, partitions: int) -> None:
        self.rows, self.n = rows, partitions

    def partitions(self) -> list[InputPartition]:
        return [_ConstPartition(self.rows // self.n) for _ in range(self.n)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _ConstPartition)
        size = 65536
        vals = pa.array([b"x" * 100] * size, pa.binary())
        cols = [pa.nulls(size, pa.binary()), vals, pa.array(["t"] * size), pa.array([0] * size, pa.int32()),
                pa.array(range(size), pa.int64()),
                pa.array([1_700_000_000_000_000] * size, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                pa.array([0] * size, pa.int32())]
        full = pa.RecordBatch.from_arrays(cols, schema=arrow_schema(False))
        left = partition.rows
        while left > 0:
            yield full if left >= size else full.slice(0, left)
            left -= size


class DropArrowSink(DataSource):
    """Python streaming sink that receives the rows as Arrow batches and drops them (the Python sink ceiling)."""

    @classmethod
    def name(cls) -> str:
        return "bench_drop_arrow"

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802 - Spark's name
        return _DropWriter()


class _DropWriter(DataSourceStreamArrowWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        for _ in iterator:  # the batches arrive (Spark's conversion and the transfer are paid) and are dropped
            pass
        return WriterCommitMessage()

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        pass


def fill_topic(bootstrap: str, topic: str, records: int, partitions: int) -> float:
    import confluent_kafka as ck

    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics(topic, partitions)
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                     "queue.buffering.max.messages": 1_000_000, "enable.idempotence": False})
    value = b"x" * 100
    t = time.perf_counter()
    for i in range(records):
        while True:
            try:
                p.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(120) == 0
    return records / (time.perf_counter() - t)


def count_committed(bootstrap: str, topic: str, partitions: int, expect: int) -> tuple[int, int]:
    """(records, distinct 20-byte value prefixes) a read_committed reader sees in ``topic``: the sink scenario's
    check that every input row came out exactly once (a benchmark of an exactly-once sink that loses rows is
    worse than none)."""
    import confluent_kafka as ck

    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-check-{uuid.uuid4().hex[:8]}",
                     "isolation.level": "read_committed", "enable.auto.commit": False,
                     "fetch.queue.backoff.ms": 10})
    c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
    seen: set[bytes] = set()
    n, idle_until = 0, time.monotonic() + 15
    try:
        while n < expect and time.monotonic() < idle_until:
            msgs = c.consume(10_000, 0.5)
            for m in msgs:
                if m.error() is None:
                    n += 1
                    seen.add((m.value() or b"")[:20])
            if msgs:
                idle_until = time.monotonic() + 15
        for m in c.consume(10_000, 1.0):  # anything beyond the expected count is a duplicate
            if m.error() is None:
                n += 1
                seen.add((m.value() or b"")[:20])
    finally:
        c.close()
    return n, len(seen)


def timed(fn: Callable[[], None]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--ceiling-records", type=int, default=20_000_000,
                    help="rows of the two ceiling scenarios (they need more rows to leave the start-up noise)")
    ap.add_argument("--partitions", type=int, default=4, help="topic partitions (Spark tasks)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--no-sink", action="store_true")
    args = ap.parse_args()
    n = args.records

    tmp = Path(tempfile.mkdtemp(prefix="oncelog-spark-bench-"))
    broker = BrokerProcess(tmp / "data", settings={"num.partitions": args.partitions,
                                                   "transaction.two.phase.commit.enable": "true"}).start()
    spark = None
    try:
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        log(f"filling {topic} with {n} x 100 B records ...")
        log(f"  confluent-kafka produce: {fill_topic(broker.bootstrap, topic, n, args.partitions):,.0f} msg/s")
        spark = (SparkSession.builder.master(args.master).appName("oncelog-spark-bench")
                 .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
                 .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        spark.dataSource.register(ConstArrowSource)
        spark.dataSource.register(DropArrowSink)
        bs = broker.bootstrap

        big = max(n, args.ceiling_records)
        in_batch: list[float] = []  # stream read rows/s inside its micro-batches (query start-up left out)

        def rate_noop() -> None:
            q = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", big)
                 .option("numPartitions", 2).load().writeStream.format("noop")
                 .option("checkpointLocation", str(tmp / f"cp-{uuid.uuid4().hex}"))
                 .trigger(availableNow=True).start())
            q.awaitTermination()

        def const_noop(rows: int = big) -> None:
            (spark.read.format("bench_const_arrow").option("rows", rows).option("partitions", args.partitions)
             .load().write.format("noop").mode("overwrite").save())

        def source_batch() -> None:
            (spark.read.format("oncelog").option("kafka.bootstrap.servers", bs).option("subscribe", topic)
             .load().write.format("noop").mode("overwrite").save())

        def source_stream() -> None:
            q = (spark.readStream.format("oncelog").option("kafka.bootstrap.servers", bs)
                 .option("subscribe", topic).option("startingOffsets", "earliest").load()
                 .writeStream.format("noop").option("checkpointLocation", str(tmp / f"cp-{uuid.uuid4().hex}"))
                 .trigger(availableNow=True).start())
            q.awaitTermination()
            rows = sum(p["numInputRows"] for p in q.recentProgress)
            ms = sum(p["durationMs"].get("triggerExecution", 0) for p in q.recentProgress)
            in_batch.append(rows / (ms / 1000) if ms else 0.0)

        def rate_values() -> Any:
            """The sink scenarios' input: N rows of a null key and a 100-byte value (20 digits, 80 x)."""
            return (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", n)
                    .option("numPartitions", 2).load()
                    .selectExpr("CAST(NULL AS BINARY) AS key",
                                "CAST(concat(lpad(CAST(value AS STRING), 20, '0'), repeat('x', 80)) AS BINARY)"
                                " AS value"))

        def drop_sink() -> None:
            q = (rate_values().writeStream.format("bench_drop_arrow")
                 .option("checkpointLocation", str(tmp / f"cp-{uuid.uuid4().hex}"))
                 .trigger(availableNow=True).start())
            q.awaitTermination()

        sink_fn: Callable[[], None] | None = None
        sink_topics: list[str] = []
        scenarios: list[tuple[str, int, Callable[[], None]]] = [
            ("rate -> noop (JVM ceiling)", big, rate_noop),
            ("python arrow source -> noop (Python ceiling)", big, const_noop),
            (SAME_ROWS, n, lambda: const_noop(n)),
            ("oncelog batch read -> noop", n, source_batch),
            ("oncelog stream read -> noop", n, source_stream),
        ]
        if not args.no_sink:
            try:
                import oncelog.spark.sink  # noqa: F401
            except ImportError:
                log("oncelog.spark.sink not present: sink scenarios skipped")
            else:
                def new_sink_topic() -> None:
                    out = f"bench-out-{uuid.uuid4().hex[:8]}"
                    with Admin({"bootstrap.servers": bs}) as admin:
                        admin.create_topics(out, args.partitions)
                    sink_topics.append(out)

                def sink_stream() -> None:
                    q = (rate_values().writeStream.format("oncelog").option("kafka.bootstrap.servers", bs)
                         .option("topic", sink_topics[-1])
                         .option("checkpointLocation", str(tmp / f"cp-{uuid.uuid4().hex}"))
                         .trigger(availableNow=True).start())
                    q.awaitTermination()
                scenarios.append((DROP_SINK, n, drop_sink))
                scenarios.append((SINK, n, sink_stream))
                sink_fn = sink_stream

        log("warm-up: every scenario once, at full size (the JVM compiles each query's generated code, the Python "
            "workers start, the sink-commit topic is created) ...")
        for _, _, fn in scenarios:
            if fn is sink_fn:
                new_sink_topic()
            fn()
        in_batch.clear()
        results: dict[str, list[float]] = {name: [] for name, _, _ in scenarios}
        rows_of = {name: rows for name, rows, _ in scenarios}
        for r in range(args.rounds):
            for name, rows, fn in scenarios:
                if fn is sink_fn:
                    new_sink_topic()  # before the clock: where the rows go is set up, not written
                secs = timed(fn)
                results[name].append(rows / secs)
                log(f"round {r + 1}: {name}: {rows / secs:,.0f} rows/s ({rows:,} rows in {secs:.2f} s)")
                if fn is sink_fn:
                    got, distinct = count_committed(bs, sink_topics[-1], args.partitions, rows)
                    if got != rows or distinct != rows:
                        raise SystemExit(f"the exactly-once sink wrote {got:,} records ({distinct:,} distinct) "
                                         f"for {rows:,} input rows: a correctness bug, not a benchmark result")
                    log(f"  checked: a read_committed reader sees each of the {rows:,} rows exactly once")
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    if in_batch:
        results["oncelog stream read, inside micro-batches"] = in_batch
        rows_of["oncelog stream read, inside micro-batches"] = n
    ceiling = statistics.median(results["rate -> noop (JVM ceiling)"])
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], check=False, capture_output=True, text=True,
                         cwd=Path(__file__).parent).stdout.strip()
    print(f"`{shlex.join(['bench/spark_bench.py', *sys.argv[1:]])}` ({n:,} x 100 B, {args.partitions} partitions, "
          f"{args.master}, git {rev}, {platform.node()}, {os.cpu_count()} cores, load average at the end "
          f"{os.getloadavg()[0]:.1f})\n")
    # the source against the Python ceiling over the same rows, round by round (both pay one query's start-up)
    same = results[SAME_ROWS]
    print("| scenario | rows | rows/s, median (min-max) | vs rate -> noop | vs Python ceiling, same rows (the "
          "sink: vs the dropping sink) |")
    print("|---|---|---|---|---|")
    for name, vals in results.items():
        med = statistics.median(vals)
        vs = ""
        base = same if name.startswith("oncelog") else results.get(DROP_SINK) if name == SINK else None
        if base is not None and len(vals) == len(base):
            ratios = [v / c for v, c in zip(vals, base, strict=True)]
            vs = f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
        print(f"| {name} | {rows_of[name]:,} | {med:,.0f} ({min(vals):,.0f}-{max(vals):,.0f}) | "
              f"{med / ceiling:.3f}x | {vs} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
