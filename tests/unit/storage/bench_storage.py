"""Storage micro-benchmarks (not collected by pytest). Run:

    PYTHONPATH=src python tests/unit/storage/bench_storage.py [data_dir]
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path

from oncelog.protocol.records import RecordBatchBuilder, iter_batch_headers
from oncelog.storage import LogConfig, PartitionLog
from oncelog.testing import MockClock


def make_batch(size: int) -> bytes:
    b = RecordBatchBuilder()
    rec = 1024
    for i in range(max(1, size // (rec + 20))):
        b.append(1_700_000_000_000, None, b"v" * rec)
    return b.build()


def main() -> None:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="oncelog-bench-"))
    batch = make_batch(16 * 1024)
    hdr_template = list(iter_batch_headers(batch))
    size = len(batch)
    print(f"batch: {size} bytes, {hdr_template[0].records_count} records; data dir {root}")

    # ---- append, no fsync
    plog = PartitionLog.open(root / "append-0", "append", 0, LogConfig(), MockClock(), clean_shutdown=True)
    n = 40_000
    t0 = time.perf_counter()
    for _ in range(n):
        payload = bytearray(batch)
        headers = list(iter_batch_headers(payload))
        plog.append(payload, headers)
    dt = time.perf_counter() - t0
    print(f"append (no fsync, incl. bytearray copy + header parse): {n / dt:,.0f} batches/s, "
          f"{n * size / dt / 1e6:,.0f} MB/s")
    payload = bytearray(batch)
    headers = list(iter_batch_headers(payload))
    t0 = time.perf_counter()
    for _ in range(n):
        plog.append(payload, headers)
    dt = time.perf_counter() - t0
    print(f"append only (same buffer re-appended):                {n / dt:,.0f} batches/s, "
          f"{n * size / dt / 1e6:,.0f} MB/s")

    # ---- read
    end = plog.log_end_offset
    for max_bytes in (1 << 20, 64 << 10):
        t0 = time.perf_counter()
        off, total, calls = 0, 0, 0
        while off < end:
            res = plog.read(off, max_bytes, end)
            total += res.size
            calls += 1
            last = list(iter_batch_headers(res.records[-1]))[-1]
            off = last.next_offset
        dt = time.perf_counter() - t0
        print(f"read sequential, max_bytes={max_bytes >> 10} KiB: {total / dt / 1e6:,.0f} MB/s, "
              f"{calls / dt:,.0f} reads/s")
    import random
    rnd = random.Random(1)
    t0 = time.perf_counter()
    k = 20_000
    for _ in range(k):
        plog.read(rnd.randrange(end), 64 << 10, end)
    dt = time.perf_counter() - t0
    print(f"read random offset, 64 KiB: {k / dt:,.0f} reads/s")
    plog.close()

    # ---- group commit: appends on this thread, flush loop on another
    plog = PartitionLog.open(root / "gc-0", "gc", 0, LogConfig(), MockClock(), clean_shutdown=True)
    stop = threading.Event()
    rounds = [0]

    def flusher() -> None:
        while not stop.is_set():
            plog.flush()
            rounds[0] += 1

    t = threading.Thread(target=flusher)
    t.start()
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 3.0:
        plog.append(bytearray(batch), [h for h in iter_batch_headers(batch)])
        n += 1
    stop.set()
    t.join()
    dt = time.perf_counter() - t0
    print(f"group commit (flush thread + appends): {n / dt:,.0f} batches/s, {n * size / dt / 1e6:,.0f} MB/s, "
          f"{rounds[0] / dt:,.0f} fsync rounds/s")

    # ---- flush after each append (acks=all, one producer, no batching)
    t0 = time.perf_counter()
    m = 0
    while time.perf_counter() - t0 < 2.0:
        plog.append(bytearray(batch), list(iter_batch_headers(batch)))
        plog.flush()
        m += 1
    dt = time.perf_counter() - t0
    print(f"append+flush serially: {m / dt:,.0f} commits/s")
    plog.close()


if __name__ == "__main__":
    main()
