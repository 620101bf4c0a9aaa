#!/usr/bin/env python3
"""End-to-end: records/s of the native producer's ``produce()`` per record vs ``produce_batch()`` (columns), both
to one fresh oncelog broker (bench/brokers.py is not needed: oncelog.testing.BrokerProcess, fresh data dir).

    python bench/produce_batch_bench.py                          # 200k x 100 B, 3 rounds
    python bench/produce_batch_bench.py --messages 1000000 --rounds 3 --compression lz4

Each round and mode gets a fresh 1-partition topic and a fresh producer (idempotent, acks=all, linger 5 ms);
one record is sent and flushed outside the timed region (connection, metadata, producer id). Timed: queueing
every record (``produce()`` of each one, or one ``produce_batch()`` of a pyarrow binary array) until ``flush()``
returns with all of them acknowledged. The table gives the best and median round.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import pyarrow as pa  # noqa: E402

from oncelog.client import Admin, Producer  # noqa: E402
from oncelog.testing.broker_process import BrokerProcess  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--compression", default="none")
    args = ap.parse_args()
    n, size = args.messages, args.value_size
    blob = os.urandom(n * size)
    values = [blob[i * size : (i + 1) * size] for i in range(n)]
    column = pa.array(values, pa.binary())
    broker = BrokerProcess(Path(tempfile.mkdtemp(prefix="produce-batch-bench-")) / "data")
    broker.start()
    results: dict[str, list[float]] = {"produce() per record": [], "produce_batch() of a column": []}
    try:
        conf = {"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "compression.type": args.compression}
        for r in range(args.rounds):
            for mode in results:
                topic = f"bench-{r}-{'batch' if 'batch' in mode else 'single'}"
                with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
                    admin.create_topics(topic, 1)
                with Producer(conf) as p:
                    p.produce(topic, b"warm-up", partition=0)
                    assert p.flush(60) == 0
                    start = time.perf_counter()
                    if "batch" in mode:
                        p.produce_batch(topic, column, partition=0)
                    else:
                        for v in values:
                            p.produce(topic, v, partition=0)
                    left = p.flush(300)
                    elapsed = time.perf_counter() - start
                    assert left == 0, f"{left} records not delivered"
                results[mode].append(elapsed)
    finally:
        broker.stop()
    print(f"{n} records x {size} B, compression={args.compression}, idempotent, acks=all, {args.rounds} rounds")
    print(f"| {'mode':<28} | {'best rec/s':>12} | {'median rec/s':>12} |")
    print(f"|{'-' * 30}|{'-' * 14}|{'-' * 14}|")
    for mode, times in results.items():
        print(f"| {mode:<28} | {n / min(times):>12,.0f} | {n / statistics.median(times):>12,.0f} |")


if __name__ == "__main__":
    main()
