"""Rows/s of the exactly-once sink (batch write, 100-byte values) next to Spark's ``noop`` sink on the same cached
DataFrame, in one run, alternating; the first round includes the Python workers' start-up.

    .venv/bin/python tests/spark/_sink_bench.py [ROWS=1000000] [SPARK_PARTITIONS=2] [ROUNDS=3]

Run by hand; bench/spark_bench.py measures the streaming sink. Not collected by pytest.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    rows = int(argv[0]) if argv else 1_000_000
    parts = int(argv[1]) if len(argv) > 1 else 2
    rounds = int(argv[2]) if len(argv) > 2 else 3
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from conftest import new_spark_session

    from oncelog.client import Admin
    from oncelog.testing.broker_process import BrokerProcess

    tmp = Path(tempfile.mkdtemp(prefix="oncelog-sink-bench-"))
    with BrokerProcess(tmp / "data", settings={"num.partitions": 3,
                                               "transaction.two.phase.commit.enable": "true"}).start() as broker:
        with Admin({"bootstrap.servers": broker.bootstrap}) as a:
            a.create_topics("out", 3)
        spark = new_spark_session("oncelog-sink-bench", master="local[2]")
        df = (spark.range(rows).selectExpr("cast(lpad(cast(id as string), 100, 'x') as binary) as value")
              .repartition(parts).cache())
        df.count()
        for r in range(rounds):
            t0 = time.perf_counter()
            df.write.mode("append").format("noop").save()
            t1 = time.perf_counter()
            (df.write.mode("append").format("oncelog").option("kafka.bootstrap.servers", broker.bootstrap)
             .option("topic", "out").save())
            t2 = time.perf_counter()
            print(f"round {r}: noop {rows / (t1 - t0):,.0f} rows/s; oncelog exactly-once sink "
                  f"{rows / (t2 - t1):,.0f} rows/s ({t2 - t1:.2f} s for {rows:,} x 100 B)", flush=True)
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
