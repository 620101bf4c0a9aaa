"""The sink's rows to the producer's bulk path: one Arrow record batch of spark-sql-kafka sink columns becomes one
``Producer.produce_batch`` call per topic, with no Python step per row (headers aside).

Columns: ``value`` (binary or string, required), ``key``, ``topic`` (else the option ``topic``), ``partition``
and ``headers`` (array<struct<key string, value binary>>), each optional. String columns are read as their UTF-8
bytes (a zero-copy cast). Where records go is decided as ``produce()`` decides it record by record: a row's
``partition`` if it has one, else Kafka's default partitioner on its key (murmur2, computed for the whole key
column by :meth:`oncelog.client.Producer.produce_batch`), else the topic's sticky partition. Rows of several
topics are split by topic first (Arrow ``take``), each topic keeping the rows' order.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from oncelog.client import Producer

__all__ = ["SinkRowError", "stage_batch"]


class SinkRowError(RuntimeError):
    """A row cannot be written (e.g. it has no topic)."""


def _bytes(arr: Any) -> Any:
    """A binary view of a binary or string column."""
    t = arr.type
    if pa.types.is_string(t):
        return arr.cast(pa.binary())
    if pa.types.is_large_string(t):
        return arr.cast(pa.large_binary())
    return arr


def _headers(arr: Any) -> list[list[tuple[str, bytes | None]]] | None:
    if arr.null_count == len(arr):
        return None
    return [[(h["key"], h["value"]) for h in hs] if hs else [] for hs in arr.to_pylist()]


def stage_batch(p: Producer, batch: pa.RecordBatch, default_topic: str | None, first_row: int = 0) -> set[str]:
    """Queue every row of ``batch`` on ``p`` (no delivery callback: a failed record fails the transaction);
    returns the topics written. ``first_row``: the task's row number of the first row (for error messages)."""
    names = batch.schema.names
    values = _bytes(batch.column(names.index("value")))
    keys = _bytes(batch.column(names.index("key"))) if "key" in names else None
    if keys is not None and keys.null_count == len(keys):
        keys = None  # no key at all: nothing to hash
    parts: Any = None
    if "partition" in names:
        col = batch.column(names.index("partition"))
        if col.null_count < len(col):
            parts = pc.fill_null(col, -1).to_numpy(zero_copy_only=False).astype(np.int64)
    headers = _headers(batch.column(names.index("headers"))) if "headers" in names else None
    tcol = batch.column(names.index("topic")) if "topic" in names else None
    if tcol is not None and default_topic is not None and tcol.null_count:
        tcol = pc.fill_null(tcol, default_topic)
    if tcol is None or tcol.null_count == len(tcol):
        if default_topic is None:
            raise SinkRowError(f"row {first_row} has no topic: add a 'topic' column or set the option 'topic'")
        p.produce_batch(default_topic, values, keys, partition=parts, headers=headers)
        return {default_topic}
    if tcol.null_count:
        row = first_row + int(np.flatnonzero(tcol.is_null().to_numpy(zero_copy_only=False))[0])
        raise SinkRowError(f"row {row} has no topic: add a 'topic' column or set the option 'topic'")
    topics = pc.unique(tcol).to_pylist()
    if len(topics) == 1:
        p.produce_batch(topics[0], values, keys, partition=parts, headers=headers)
        return set(topics)
    for topic in topics:
        rows = np.flatnonzero(pc.equal(tcol, topic).to_numpy(zero_copy_only=False))
        idx = pa.array(rows)
        p.produce_batch(topic, values.take(idx), None if keys is None else keys.take(idx),
                        partition=None if parts is None else parts[rows],
                        headers=None if headers is None else [headers[i] for i in rows.tolist()])
    return set(topics)
