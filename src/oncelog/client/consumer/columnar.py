"""The consumer's columnar path: ``consume_arrow()`` returns what one fetch round brought as Arrow record
batches, one per partition, decoded column-wise by :mod:`.arrow_decode` (the decoder the Spark source uses), with
no Python object per record (records with headers aside).

The fetch round is the consumer's own (group membership, auto commit, assignment, pause, positions): the
fetcher is asked for whole record batches instead of Messages (:func:`.batch_fetch.accepted_batches`: CRC
checked, decompressed, and with ``isolation.level=read_committed`` the batches of aborted transactions and the
control batches dropped by the same filter ``poll()`` uses). Records before the fetch position (a batch that
starts before it) are cut off. With ``enable.auto.offset.store`` the offset after each partition's last
returned record is stored for ``commit()``, as ``poll()`` does per record.

Records that ``poll()``/``consume()`` fetched and did not return yet come first (converted record by record).

Columns (:data:`ARROW_SCHEMA`): topic, partition, offset, timestamp (ms), timestamp_type (1 create time,
2 log append time: confluent-kafka's TIMESTAMP_CREATE_TIME / TIMESTAMP_LOG_APPEND_TIME), key, value, headers
(list<struct<key string, value binary>>, null for a record without headers).

Needs numpy and pyarrow (the ``spark`` extra); the consumer imports this module only when ``consume_arrow()``
is called.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from .arrow_decode import Section, decode_sections
from .batch_fetch import FetchedBatch, accepted_batches

if TYPE_CHECKING:
    from .consumer import AsyncConsumer
    from .fetcher import BatchFilter

__all__ = ["ARROW_SCHEMA", "consume_arrow"]

_HEADERS = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
ARROW_SCHEMA = pa.schema([
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.int64()),
    pa.field("timestamp_type", pa.int8()),
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("headers", _HEADERS),
])
_CREATE_TIME, _LOG_APPEND_TIME = 1, 2


@dataclass(frozen=True, slots=True)
class _Fetched:
    topic: str
    partition: int
    fetch_offset: int
    batches: list[FetchedBatch]


def _numeric(values: np.ndarray[Any, Any], dtype: Any, arrow_type: pa.DataType) -> pa.Array:
    """An Arrow array over a numpy array's buffer (``pa.array(ndarray)`` would import pandas on first use)."""
    data = np.ascontiguousarray(values, dtype)
    return pa.Array.from_buffers(arrow_type, len(data), [None, pa.py_buffer(data)])


def _constant_string(value: str, n: int) -> pa.Array:
    """``n`` times ``value`` as an Arrow string array (``pa.scalar`` would import pandas on first use)."""
    b = value.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(b)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(b * n)])


def _decode_raw(topic: str, partition: int, records: Any, fetch_offset: int, batch_filter: BatchFilter,
                check_crcs: bool) -> tuple[list[Any], int]:
    """The fetcher's decode step for the columnar path: accepted batches, not records."""
    batches, nxt = accepted_batches(records, fetch_offset, batch_filter, check_crcs)
    return ([_Fetched(topic, partition, fetch_offset, batches)] if batches else []), nxt


def _record_batch(f: _Fetched) -> pa.RecordBatch | None:
    batches = f.batches
    sections = [Section(b.records, b.records_count, b.base_offset, b.base_timestamp,
                        b.max_timestamp if b.log_append_time else None) for b in batches]
    cols = decode_sections(sections, include_headers=True)
    n = cols.n
    ts_type = np.repeat(np.array([_LOG_APPEND_TIME if b.log_append_time else _CREATE_TIME for b in batches],
                                 np.int8), [b.records_count for b in batches])
    rb = pa.RecordBatch.from_arrays([
        _constant_string(f.topic, n),
        _numeric(np.full(n, f.partition), np.int32, pa.int32()),
        _numeric(cols.offsets, np.int64, pa.int64()),
        _numeric(cols.timestamps, np.int64, pa.int64()),
        _numeric(ts_type, np.int8, pa.int8()),
        cols.keys,
        cols.values,
        cols.headers,
    ], schema=ARROW_SCHEMA)
    if n and int(cols.offsets[0]) < f.fetch_offset:
        rb = rb.slice(int(np.searchsorted(cols.offsets, f.fetch_offset)))  # offsets grow: cut the head
    return rb if rb.num_rows else None


def _field(m: Any, name: str) -> Any:
    v = getattr(m, name)
    return v() if callable(v) else v


def _from_messages(msgs: list[Any]) -> pa.RecordBatch:
    """Records already fetched as Messages (by poll()/consume()), as one Arrow batch (per-record, rare)."""
    ts = [_field(m, "timestamp") for m in msgs]
    ts_pairs = [t if isinstance(t, tuple) else (_CREATE_TIME, t) for t in ts]
    headers = [_field(m, "headers") for m in msgs]
    return pa.RecordBatch.from_pydict({
        "topic": [_field(m, "topic") for m in msgs],
        "partition": [_field(m, "partition") for m in msgs],
        "offset": [_field(m, "offset") for m in msgs],
        "timestamp": [t for _, t in ts_pairs],
        "timestamp_type": [k for k, _ in ts_pairs],
        "key": [_field(m, "key") for m in msgs],
        "value": [_field(m, "value") for m in msgs],
        "headers": [[{"key": k, "value": v} for k, v in h] if h else None for h in headers],
    }, schema=ARROW_SCHEMA)


async def consume_arrow(c: AsyncConsumer, timeout: float) -> list[pa.RecordBatch]:
    """See :meth:`.consumer.AsyncConsumer.consume_arrow`."""
    deadline = time.monotonic() + timeout
    if c._buffer:
        msgs = await c._fetch_round(deadline, len(c._buffer))
        if msgs:
            return [_from_messages(msgs)]
    await c.start()
    co = c.coordinator
    while True:
        if co is not None:
            if c.subscription.auto:
                await co.ensure_active(deadline, block=not c.subscription.assigned)
            else:
                co.raise_if_failed()
            c._maybe_auto_commit()
        await c._resolve_committed()
        left_ms = int((deadline - time.monotonic()) * 1000)
        if left_ms <= 0:
            return []
        if co is not None and co.joining and not c.subscription.assigned:
            continue  # ensure_active waits for the join
        out: list[pa.RecordBatch] = []
        async with c._fetch_lock:
            fetched: list[_Fetched] = await c.fetcher.fetch(min(left_ms, c.config.fetch_max_wait_ms), _decode_raw)
            assigned, paused = c.subscription.assigned, c.subscription.paused
            for f in fetched:
                tp = (f.topic, f.partition)
                if tp not in assigned:
                    continue
                if tp in paused:  # paused while the fetch was in flight: fetch these records again on resume
                    if tp in c.fetcher.positions:
                        c.fetcher.positions[tp] = f.fetch_offset
                    continue
                rb = _record_batch(f)
                if rb is not None:
                    out.append(rb)
                    if c.config.enable_auto_offset_store:
                        c._stored[tp] = int(rb.column(2)[rb.num_rows - 1].as_py()) + 1
        if out:
            return out
