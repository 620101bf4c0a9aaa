"""Log cleaner throughput (not collected by pytest). Run:

    PYTHONPATH=src python tests/unit/storage/bench_cleaner.py [data_dir]

MB/s = bytes of the segments rewritten / wall time of LogCleaner.clean (map build + rewrite + fsync + swap).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from oncelog.protocol.records import Compression, RecordBatchBuilder, iter_batch_headers
from oncelog.storage import LogConfig, PartitionLog
from oncelog.storage.cleaner import LogCleaner
from oncelog.testing import MockClock


def run(root: Path, name: str, *, records: int, per_batch: int, keys: int, value_size: int,
        compression: int = Compression.NONE) -> None:
    clock = MockClock()
    cfg = LogConfig(cleanup_policy="compact", segment_bytes=16 << 20, min_cleanable_dirty_ratio=0.0)
    plog = PartitionLog.open(root / f"{name}-0", name, 0, cfg, clock, clean_shutdown=True)
    value = b"v" * value_size
    i = 0
    while i < records:
        b = RecordBatchBuilder(compression=compression)
        for _ in range(per_batch):
            b.append(clock.wall_ms(), f"key-{i % keys}".encode(), value)
            i += 1
        buf = bytearray(b.build())
        plog.append(buf, list(iter_batch_headers(buf)))
    plog.roll()
    plog.flush()
    t0 = time.perf_counter()
    stats = LogCleaner().clean(plog, clock.wall_ms())
    dt = time.perf_counter() - t0
    mb = stats.bytes_before / 1e6
    print(f"{name:28s} {mb:8.1f} MB -> {stats.bytes_after / 1e6:7.1f} MB in {dt:6.2f} s: {mb / dt:6.1f} MB/s, "
          f"{stats.records_read / dt / 1e3:7.0f} k records/s, {stats.records_removed} removed")
    plog.delete()


def main() -> None:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="oncelog-clean-"))
    run(root, "100B-values-10x-dupes", records=300_000, per_batch=20, keys=30_000, value_size=100)
    run(root, "1KiB-values-10x-dupes", records=100_000, per_batch=10, keys=10_000, value_size=1024)
    run(root, "100B-unique-keys(copy)", records=300_000, per_batch=20, keys=300_000, value_size=100)
    run(root, "100B-lz4-10x-dupes", records=300_000, per_batch=100, keys=30_000, value_size=100,
        compression=Compression.LZ4)


if __name__ == "__main__":
    main()
