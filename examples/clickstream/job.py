#!/usr/bin/env python3
"""Clickstream Spark job: clicks -> (enrichment, windowed page views) -> two output topics, exactly once.

    python examples/clickstream/job.py --bootstrap 127.0.0.1:9092 --checkpoints ./demo-checkpoints

Two streaming queries over the same input topic (each keeps its own offsets in its checkpoint):
* enrichment (stateless): parse the JSON, add the site section and a traffic class, write every click to
  ``clicks-enriched`` keyed by user;
* page views (stateful): 10-second event-time windows per page with a 20-second watermark, count and approximate
  distinct users, written in append mode (a window once, when the watermark passes it) to ``page-views``.
Both sinks are oncelog's exactly-once sink: kill the job at any moment and restart it with the same checkpoints;
a read_committed reader of the output topics sees every result exactly once.

On a cluster, submit the same file (see docs/spark.md): the executors need oncelog installed
(``pip install oncelog[spark]``) or shipped with ``--py-files``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

CLICK_SCHEMA = "id string, user string, page string, referrer string, ts long"


def build(spark: Any, bootstrap: str, checkpoints: str, *, input_topic: str = "clicks",
          enriched_topic: str = "clicks-enriched", views_topic: str = "page-views",
          max_offsets_per_trigger: int | None = 20000, trigger: dict[str, Any] | None = None) -> list[Any]:
    """Start both queries; ``trigger`` is passed to ``DataStreamWriter.trigger`` (default every 2 seconds)."""
    from pyspark.sql import functions as F

    trigger = trigger or {"processingTime": "2 seconds"}
    reader = (spark.readStream.format("oncelog")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", input_topic)
              .option("startingOffsets", "earliest"))
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", max_offsets_per_trigger)
    clicks = (reader.load()
              .select(F.from_json(F.col("value").cast("string"), CLICK_SCHEMA).alias("c"))
              .select("c.*")
              .where(F.col("id").isNotNull())  # drop what is not a click
              .withColumn("event_time", F.timestamp_millis("ts")))

    enriched = (clicks
                .withColumn("section", F.coalesce(F.nullif(F.split("page", "/")[1], F.lit("")), F.lit("home")))
                .withColumn("traffic", F.when(F.col("referrer") == "ads", "paid")
                            .when(F.col("referrer") == "direct", "direct").otherwise("organic"))
                .select(F.col("user").alias("key"),
                        F.to_json(F.struct("id", "user", "page", "section", "traffic", "ts")).alias("value")))

    views = (clicks
             .withWatermark("event_time", "20 seconds")
             .groupBy(F.window("event_time", "10 seconds"), "page")
             .agg(F.count(F.lit(1)).alias("views"), F.approx_count_distinct("user").alias("users"))
             .select(F.col("page").alias("key"),
                     F.to_json(F.struct(F.date_format("window.start", "yyyy-MM-dd'T'HH:mm:ss").alias("window"),
                                        "page", "views", "users")).alias("value")))

    def sink(df: Any, topic: str, name: str, mode: str) -> Any:
        return (df.writeStream.format("oncelog").outputMode(mode).queryName(name)
                .option("kafka.bootstrap.servers", bootstrap)
                .option("topic", topic)
                .option("checkpointLocation", os.path.join(checkpoints, name))
                .trigger(**trigger)
                .start())

    return [sink(enriched, enriched_topic, "enrich", "append"), sink(views, views_topic, "page_views", "append")]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def wait_for_previous_run(checkpoints: str, timeout: float = 120.0) -> None:
    """Wait until the previous run of this job on the same checkpoints has exited, JVM included.

    Spark refuses two runs of a query at once only inside one JVM. Killing the Python driver (kill -9 PID) leaves its
    JVM running the queries for a while (it stops when it sees its parent's pipe close); a restart that starts at once
    would run every query twice, on the same checkpoints. The pids of each run are kept in ``<checkpoints>/job.pids``.
    """
    pids_file = Path(checkpoints) / "job.pids"
    try:
        previous = [int(p) for p in json.loads(pids_file.read_text()).values()]
    except (OSError, ValueError, AttributeError):
        return
    deadline = time.monotonic() + timeout
    running = [p for p in previous if p != os.getpid() and _alive(p)]
    if running:
        print(f"waiting for the previous run of this job (pids {running}) to exit", flush=True)
    while running and time.monotonic() < deadline:
        time.sleep(0.2)
        running = [p for p in running if _alive(p)]
    if running:
        raise SystemExit(f"the previous run of this job (pids {running}) still runs on {checkpoints}; stop it first")


def record_run(spark: Any, checkpoints: str) -> None:
    proc = getattr(spark.sparkContext._gateway, "proc", None)  # the JVM PySpark started
    pids = {"driver": os.getpid(), **({"jvm": proc.pid} if proc is not None else {})}
    Path(checkpoints).mkdir(parents=True, exist_ok=True)
    (Path(checkpoints) / "job.pids").write_text(json.dumps(pids))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--checkpoints", default="./demo-checkpoints")
    ap.add_argument("--master", default=os.environ.get("SPARK_MASTER"),
                    help="e.g. local[2]; leave unset under spark-submit")
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    wait_for_previous_run(args.checkpoints)
    from oncelog.spark.checkpoints import remove_interrupted_writes

    for path in remove_interrupted_writes(args.checkpoints):  # a killed run's half-written checkpoint files
        print(f"removed {path}, left half-written by the previous run", flush=True)
    from pyspark.sql import SparkSession

    from oncelog.spark import register

    builder = SparkSession.builder.appName("oncelog-clickstream").config("spark.sql.shuffle.partitions", "2")
    if args.master:
        builder = builder.master(args.master).config("spark.ui.enabled", "false")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    record_run(spark, args.checkpoints)
    queries = build(spark, args.bootstrap, args.checkpoints)
    print("clickstream job running: " + ", ".join(q.name for q in queries), flush=True)
    spark.streams.awaitAnyTermination()
    for q in queries:
        if q.exception() is not None:
            print(f"query {q.name} failed: {q.exception()}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
