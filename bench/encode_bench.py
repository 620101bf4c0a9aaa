#!/usr/bin/env python3
"""Micro-benchmark: records/s of building one v2 record batch, per-record RecordBatchBuilder vs the columnar
encoder (oncelog.protocol.record_batch_columnar), in this process, no broker.

    python bench/encode_bench.py                              # 100k x 100 B values, no keys, best of 5
    python bench/encode_bench.py --records 100000 --value-size 100 --rounds 5 --keys --compression lz4

Inputs (random bytes, one timestamp per record increasing by 1 ms) are made outside the timed region; both
encoders are checked to give the same bytes first. Columnar is timed from a Python list of bytes and from a
pyarrow binary array. The table gives the best round (least disturbed by other load) and the median.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from oncelog.protocol.record_batch_columnar import build_batch_columnar  # noqa: E402
from oncelog.protocol.records import Compression, RecordBatchBuilder  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--keys", action="store_true", help="16-byte keys as well")
    ap.add_argument("--compression", default="none", choices=sorted(Compression.BY_NAME))
    args = ap.parse_args()
    n, size = args.records, args.value_size
    codec = Compression.BY_NAME[args.compression]
    blob = os.urandom(n * size)
    values = [blob[i * size : (i + 1) * size] for i in range(n)]
    keys = [os.urandom(16) for _ in range(n)] if args.keys else None
    t0 = 1_700_000_000_000
    ts_list = [t0 + i for i in range(n)]
    ts_arr = np.arange(t0, t0 + n, dtype=np.int64)
    values_pa = pa.array(values, pa.binary())
    keys_pa = pa.array(keys, pa.binary()) if keys is not None else None
    common = dict(compression=codec, producer_id=1000, producer_epoch=0, base_sequence=0)

    def per_record() -> bytes:
        b = RecordBatchBuilder(**common)  # type: ignore[arg-type]
        append = b.append
        if keys is None:
            for t, v in zip(ts_list, values):
                append(t, None, v)
        else:
            for t, k, v in zip(ts_list, keys, values):
                append(t, k, v)
        return b.build()

    def columnar_list() -> bytes:
        return build_batch_columnar(values, keys, timestamps=ts_arr, **common)  # type: ignore[arg-type]

    def columnar_arrow() -> bytes:
        return build_batch_columnar(values_pa, keys_pa, timestamps=ts_arr, **common)  # type: ignore[arg-type]

    reference = per_record()
    assert columnar_list() == reference and columnar_arrow() == reference, "encoders disagree"
    cases: list[tuple[str, Callable[[], bytes]]] = [
        ("RecordBatchBuilder (per record)", per_record),
        ("columnar, list of bytes", columnar_list),
        ("columnar, pyarrow binary array", columnar_arrow),
    ]
    results: dict[str, list[float]] = {name: [] for name, _ in cases}
    for _ in range(args.rounds):
        for name, fn in cases:  # interleaved, so background load hits all alike
            start = time.perf_counter()
            fn()
            results[name].append(time.perf_counter() - start)
    print(
        f"{n} records x {size} B values, keys={'16 B' if keys else 'none'}, "
        f"compression={args.compression}, batch {len(reference)} B, {args.rounds} rounds"
    )
    print(f"| {'encoder':<32} | {'best rec/s':>12} | {'median rec/s':>12} | {'best ms':>8} |")
    print(f"|{'-' * 34}|{'-' * 14}|{'-' * 14}|{'-' * 10}|")
    base = min(results[cases[0][0]])
    for name, _ in cases:
        best, med = min(results[name]), statistics.median(results[name])
        print(f"| {name:<32} | {n / best:>12,.0f} | {n / med:>12,.0f} | {best * 1e3:>8.1f} |"
              + ("" if name == cases[0][0] else f"  x{base / best:.1f}"))


if __name__ == "__main__":
    main()
