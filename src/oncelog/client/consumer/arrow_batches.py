"""Fetched record batches as Arrow record batches, for ``consume_arrow()``: one per partition, decoded column-wise by
:mod:`.arrow_decode` (the decoder the Spark source uses), with no Python object per record (records with headers
aside).

The fetch rounds and the buffer are the consumer's own (:meth:`.consumer.AsyncConsumer.consume_arrow`: group
membership, auto commit, assignment, pause, positions, prefetch); the buffer holds what the fetcher brought as
whole record batches (:func:`.fetcher.accepted_batches`: CRC checked, decompressed, and with
``isolation.level=read_committed`` the batches of aborted transactions and the control batches dropped by the
same filter ``poll()`` uses), which :func:`to_record_batch` decodes column-wise. Records before the fetch position
(a batch that starts before it), or already handed out by ``poll()``/``consume()``, are cut off.

Columns (:data:`ARROW_SCHEMA`): topic, partition, offset, timestamp (ms), timestamp_type (1 create time,
2 log append time: confluent-kafka's TIMESTAMP_CREATE_TIME / TIMESTAMP_LOG_APPEND_TIME), key, value, headers
(list<struct<key string, value binary>>, null for a record without headers).

Needs numpy and pyarrow (the ``spark`` extra); the consumer imports this module only when ``consume_arrow()``
is called.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from .arrow_decode import Section, decode_sections
from .fetcher import FetchedBatches

__all__ = ["ARROW_SCHEMA", "to_record_batch"]

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


def _numeric(values: np.ndarray[Any, Any], dtype: Any, arrow_type: pa.DataType) -> pa.Array:
    """An Arrow array over a numpy array's buffer (``pa.array(ndarray)`` would import pandas on first use)."""
    data = np.ascontiguousarray(values, dtype)
    return pa.Array.from_buffers(arrow_type, len(data), [None, pa.py_buffer(data)])


def _constant_string(value: str, n: int) -> pa.Array:
    """``n`` times ``value`` as an Arrow string array (``pa.scalar`` would import pandas on first use)."""
    b = value.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(b)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(b * n)])


def to_record_batch(f: FetchedBatches) -> pa.RecordBatch | None:
    """The records of ``f`` from its fetch position on, as one Arrow batch; None when none is left."""
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
