"""Helpers for storage tests: build v2 batches, open logs, pick batches apart."""

from __future__ import annotations

from pathlib import Path

from oncelog.protocol.records import BatchHeader, RecordBatchBuilder, iter_batch_headers
from oncelog.storage import LogConfig, PartitionLog
from oncelog.testing import MockClock


def batch(n: int = 1, *, ts: int = 1_700_000_000_000, value_size: int = 10, tag: int = 0,
          compression: int = 0, ts_step: int = 0) -> bytes:
    """One v2 batch of ``n`` records; values are recognisable (tag, index) and padded to ``value_size``."""
    b = RecordBatchBuilder(compression=compression)
    for i in range(n):
        v = f"{tag}:{i}:".encode()
        b.append(ts + i * ts_step, f"k{i}".encode(), v + b"x" * max(0, value_size - len(v)))
    return b.build()


def payload_of(*batches: bytes) -> tuple[bytearray, list[BatchHeader]]:
    buf = bytearray(b"".join(batches))
    return buf, list(iter_batch_headers(buf, check_crc=True))


def append(plog: PartitionLog, *batches: bytes, **kw: int):  # type: ignore[no-untyped-def]
    buf, headers = payload_of(*batches)
    return plog.append(buf, headers, **kw)


def headers_of(res_records: list) -> list[BatchHeader]:  # type: ignore[type-arg]
    data = b"".join(bytes(r) for r in res_records)
    return list(iter_batch_headers(data, check_crc=True))


def open_log(path: Path, config: LogConfig | None = None, clock: MockClock | None = None, *,
             clean: bool = False) -> PartitionLog:
    return PartitionLog.open(path / "t-0", "t", 0, config or LogConfig(), clock or MockClock(),
                             clean_shutdown=clean)
