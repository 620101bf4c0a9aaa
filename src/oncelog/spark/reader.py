"""Executor side of the source: read one :class:`OffsetRange` into Arrow record batches.

The client's :class:`BatchFetcher` hands over checked, decompressed record batches with aborted transactions and
control batches (markers) already dropped under read_committed; the client's columnar decoder
(:mod:`oncelog.client.consumer.arrow_decode`, shared with ``consume_arrow()``) decodes them into columns without
per-record Python objects. A range [start, end) ends at or below the last stable offset the driver saw,
so every transaction in it is decided; it can yield fewer rows than ``end - start`` (markers, aborted records).
The loop ends when the fetch position reaches ``end``, never by counting rows.

One fetcher per Python worker process and configuration is kept between tasks (Spark reuses Python workers):
connections and metadata outlive a micro-batch.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from oncelog.client import KafkaError
from oncelog.client.consumer.arrow_decode import Section, decode_sections
from oncelog.client.consumer.batch_fetch import BatchFetcher, FetchedBatch

from .offsets import OffsetRange
from .worker_malloc import tune_worker_malloc

__all__ = ["arrow_schema", "read_range"]

log = logging.getLogger(__name__)

#: rows per Arrow batch handed to Spark (a fetch's worth is decoded at once, then cut to this)
BATCH_ROWS = 65536
#: give up when a range makes no progress for this long (the broker is down or the data is gone)
STALL_TIMEOUT_S = 120.0

_HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", _HEADER_TYPE))
    return pa.schema(fields)


def _record_batch(batches: list[FetchedBatch], rng: OffsetRange, schema: pa.Schema,
                  include_headers: bool) -> pa.RecordBatch | None:
    """The rows of ``batches`` inside [rng.start, rng.end) as one Arrow batch (None if there are none)."""
    sections = [Section(b.records, b.records_count, b.base_offset, b.base_timestamp,
                        b.max_timestamp if b.log_append_time else None) for b in batches]
    cols = decode_sections(sections, include_headers)
    ts_type = np.repeat(np.array([1 if b.log_append_time else 0 for b in batches], np.int32),
                        [b.records_count for b in batches])
    keep = (cols.offsets >= rng.start) & (cols.offsets < rng.end)
    n = int(keep.sum())
    if n == 0:
        return None
    arrays: list[Any] = [
        cols.keys, cols.values,
        pa.repeat(pa.scalar(rng.topic, pa.string()), cols.n),
        pa.repeat(pa.scalar(rng.partition, pa.int32()), cols.n),
        pa.array(cols.offsets, pa.int64()),
        pa.array(cols.timestamps * 1000, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        pa.array(ts_type, pa.int32()),
    ]
    if include_headers:
        arrays.append(cols.headers)
    rb = pa.RecordBatch.from_arrays(arrays, schema=schema)
    return rb if n == cols.n else rb.filter(pa.array(keep))


_lock = threading.Lock()
_fetchers: dict[tuple[tuple[str, str], ...], BatchFetcher] = {}


def _fetcher(conf: dict[str, Any]) -> tuple[tuple[tuple[str, str], ...], BatchFetcher]:
    key = tuple(sorted((k, str(v)) for k, v in conf.items()))
    with _lock:
        f = _fetchers.get(key)
        if f is None:
            f = _fetchers[key] = BatchFetcher(conf)
        return key, f


def _drop(key: tuple[tuple[str, str], ...]) -> None:
    with _lock:
        f = _fetchers.pop(key, None)
    if f is not None:
        try:
            f.close()
        except Exception as e:  # noqa: BLE001 - a broken fetcher is being discarded anyway
            log.debug("closing a discarded fetcher failed: %s", e)


def fetcher_conf(consumer_conf: dict[str, Any]) -> dict[str, Any]:
    conf: dict[str, Any] = {"max.partition.fetch.bytes": 4 << 20, "fetch.max.bytes": 16 << 20,
                            "fetch.max.wait.ms": 100}
    conf.update(consumer_conf)
    return conf


def read_range(rng: OffsetRange, consumer_conf: dict[str, Any], include_headers: bool,
               fail_on_data_loss: bool = True) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the records of ``rng`` the isolation level lets through, in offset order."""
    if rng.end <= rng.start:
        return
    tune_worker_malloc()
    schema = arrow_schema(include_headers)
    key, fetcher = _fetcher(fetcher_conf(consumer_conf))
    ok = False
    try:
        last_progress = time.monotonic()
        start = rng.start
        while start < rng.end:
            try:
                for batches in fetcher.read_range(rng.topic, rng.partition, start, rng.end):
                    if batches:
                        start = max(start, batches[-1].last_offset + 1)
                        last_progress = time.monotonic()
                        rb = _record_batch(batches, rng, schema, include_headers)
                        if rb is not None:
                            for i in range(0, rb.num_rows, BATCH_ROWS):
                                yield rb.slice(i, BATCH_ROWS)
                    elif time.monotonic() - last_progress > STALL_TIMEOUT_S:
                        raise TimeoutError(
                            f"reading {rng.topic}[{rng.partition}] offsets [{rng.start}, {rng.end}) made no "
                            f"progress for {STALL_TIMEOUT_S:g} s at offset {start}: is the broker at "
                            f"{consumer_conf.get('bootstrap.servers')} up?")
                start = rng.end  # the fetch position reached the end (past markers / aborted records)
            except KafkaError as e:
                if e.name() != "OFFSET_OUT_OF_RANGE":
                    raise
                if fail_on_data_loss:
                    raise RuntimeError(
                        f"records of {rng.topic}[{rng.partition}] from offset {start} are gone (deleted by "
                        "retention or DeleteRecords) before this query read them; set failOnDataLoss=false to "
                        "skip lost data") from e
                log.warning("%s[%d]: records from offset %d are gone; skipping to the log start (failOnDataLoss"
                            "=false)", rng.topic, rng.partition, start)
                start = _log_start(consumer_conf, rng.topic, rng.partition)
        ok = True
    finally:
        if not ok:
            _drop(key)


def _log_start(consumer_conf: dict[str, Any], topic: str, partition: int) -> int:
    from oncelog.client import Admin

    admin_keys = ("bootstrap.servers", "client.id", "request.timeout.ms")
    with Admin({k: v for k, v in consumer_conf.items() if k in admin_keys}) as admin:
        return admin.list_offsets({(topic, partition): "earliest"})[(topic, partition)].offset
