"""Helpers for the producer-state / transaction tests: idempotent and transactional batches."""

from __future__ import annotations

from oncelog.protocol.records import BatchHeader, RecordBatchBuilder, iter_batch_headers
from oncelog.storage import AppendResult, PartitionLog

T0 = 1_700_000_000_000


def pbatch(pid: int, epoch: int, seq: int, n: int = 1, *, txn: bool = False, ts: int = T0) -> bytes:
    """A batch of ``n`` records from producer ``pid`` starting at sequence ``seq``."""
    b = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=txn)
    for i in range(n):
        b.append(ts + i, f"k{i}".encode(), f"{pid}:{seq}:{i}".encode())
    return b.build()


def plain(n: int = 1, ts: int = T0) -> bytes:
    b = RecordBatchBuilder()
    for i in range(n):
        b.append(ts + i, None, b"v")
    return b.build()


def payload(*batches: bytes) -> tuple[bytearray, list[BatchHeader]]:
    buf = bytearray(b"".join(batches))
    return buf, list(iter_batch_headers(buf, check_crc=True))


def app(plog: PartitionLog, *batches: bytes, **kw: object) -> AppendResult:
    buf, headers = payload(*batches)
    return plog.append(buf, headers, **kw)  # type: ignore[arg-type]


def headers_for(*batches: bytes, base: int = 0) -> list[BatchHeader]:
    """Headers with offsets assigned from ``base`` (as PartitionLog.append does before validation)."""
    _, hs = payload(*batches)
    off = base
    for h in hs:
        h.base_offset = off
        off += h.last_offset_delta + 1
    return hs
