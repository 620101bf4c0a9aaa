"""Driver script of the sink crash tests: input topic -> transform -> output topic through the exactly-once sink.

Run as a child process (``start_new_session=True``) so a test, or the sink's fault hook, can SIGKILL the whole
driver (Python, the JVM with its in-process executors, every Python worker). Processes everything available
(``maxOffsetsPerTrigger`` rows per micro-batch) from the checkpoint on, stops the query once a finished batch
reached the input's end offsets, and exits 0; run it again
with the same checkpoint after a kill. Prints one ``batch <id> rows <n>`` line per finished micro-batch.

    python _sink_pipeline.py BOOTSTRAP INPUT OUTPUT CHECKPOINT TXN_ID_PREFIX [MAX_OFFSETS_PER_TRIGGER]
"""

from __future__ import annotations

import json
import os
import sys
import time


def _end_offsets(bootstrap: str, topic: str) -> dict[str, dict[str, int]]:
    from oncelog.client import Admin

    with Admin({"bootstrap.servers": bootstrap}) as a:
        parts = [p.partition for p in a.describe_topic(topic).partitions]
        ends = a.list_offsets({(topic, p): "latest" for p in parts}, isolation_level=1)
    return {topic: {str(p): ends[(topic, p)].offset for p in parts}}


def main(argv: list[str]) -> int:
    bootstrap, src, dst, checkpoint, prefix = argv[:5]
    per_trigger = argv[5] if len(argv) > 5 else "100"
    os.environ.setdefault("ONCELOG_SPARK_SINK_FAULT_PGID", str(os.getpgrp()))
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from conftest import new_spark_session

    spark = new_spark_session("oncelog-sink-crash")
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "200ms")
    df = (spark.readStream.format("oncelog").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", src).option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", per_trigger).load())
    out = df.selectExpr("key", "concat('out-', cast(value as string)) as value")
    q = (out.writeStream.format("oncelog").option("kafka.bootstrap.servers", bootstrap).option("topic", dst)
         .option("transactionalIdPrefix", prefix).option("kafka.transaction.timeout.ms", "1000")
         .option("checkpointLocation", checkpoint).start())
    print(f"query {q.id} started", flush=True)
    # run until a finished micro-batch (progress is reported after Spark's commit log) reached the input's end
    target = _end_offsets(bootstrap, src)
    seen = -1
    while q.isActive:
        p = q.lastProgress
        if p is not None and p["batchId"] != seen:
            seen = p["batchId"]
            print(f"batch {seen} rows {p['numInputRows']} ms {p['durationMs']}", flush=True)
        if p is not None and p["sources"] and json.loads(p["sources"][0]["endOffset"] or "{}") == target:
            q.stop()
            break
        time.sleep(0.1)
    q.awaitTermination()
    print("done", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
