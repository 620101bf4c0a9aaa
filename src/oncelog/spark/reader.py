"""Executor side of the source: read one :class:`OffsetRange` with the native consumer into Arrow batches.

Under read_committed a range [start, end) ends at or below the last stable offset the driver saw, so every
transaction in it is decided; the consumer drops aborted records and control batches (markers), so a range can
yield fewer rows than ``end - start``. The loop ends when the consumer's position reaches ``end``, never by
counting rows, and never waits for an offset that is a marker.

One consumer per Python worker process and configuration is kept between tasks (Spark reuses Python workers):
connections and metadata outlive a micro-batch.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from oncelog.client import Consumer, KafkaError, Message

from .offsets import OffsetRange

__all__ = ["arrow_schema", "read_range", "to_record_batch"]

log = logging.getLogger(__name__)

#: rows per Arrow batch handed to Spark
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


def to_record_batch(msgs: Sequence[Message], schema: pa.Schema, include_headers: bool) -> pa.RecordBatch:
    """Columns straight from the consumed messages (one C-level conversion per column)."""
    n = len(msgs)
    topic = msgs[0].topic if n else ""
    partition = msgs[0].partition if n else 0
    cols: list[Any] = [
        pa.array([m.key for m in msgs], pa.binary()),
        pa.array([m.value for m in msgs], pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array([m.offset for m in msgs], pa.int64()),
        pa.array([m.timestamp * 1000 for m in msgs], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        pa.repeat(pa.scalar(0, pa.int32()), n),  # CreateTime: the client's Message carries no timestamp type
    ]
    if include_headers:
        cols.append(pa.array([[{"key": k, "value": v} for k, v in m.headers] for m in msgs], _HEADER_TYPE))
    return pa.RecordBatch.from_arrays(cols, schema=schema)


_lock = threading.Lock()
_consumers: dict[tuple[tuple[str, str], ...], Consumer] = {}


def _consumer(conf: dict[str, Any]) -> tuple[tuple[tuple[str, str], ...], Consumer]:
    key = tuple(sorted((k, str(v)) for k, v in conf.items()))
    with _lock:
        c = _consumers.get(key)
        if c is None:
            c = _consumers[key] = Consumer(conf)
        return key, c


def _drop(key: tuple[tuple[str, str], ...]) -> None:
    with _lock:
        c = _consumers.pop(key, None)
    if c is not None:
        try:
            c.close()
        except Exception as e:  # noqa: BLE001 - a broken consumer is being discarded anyway
            log.debug("closing a discarded consumer failed: %s", e)


def reader_conf(consumer_conf: dict[str, Any], fail_on_data_loss: bool) -> dict[str, Any]:
    conf: dict[str, Any] = {"max.partition.fetch.bytes": 8 << 20, "fetch.max.wait.ms": 100}
    conf.update(consumer_conf)
    conf["auto.offset.reset"] = "error" if fail_on_data_loss else "earliest"
    return conf


def read_range(rng: OffsetRange, consumer_conf: dict[str, Any], include_headers: bool,
               fail_on_data_loss: bool = True) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the records of ``rng`` the isolation level lets through, in offset order."""
    if rng.end <= rng.start:
        return
    schema = arrow_schema(include_headers)
    key, consumer = _consumer(reader_conf(consumer_conf, fail_on_data_loss))
    ok = False
    try:
        consumer.assign([(rng.topic, rng.partition, rng.start)])
        pending: list[Message] = []
        last_progress = time.monotonic()
        position = rng.start
        while position < rng.end:
            msgs = consumer.consume(BATCH_ROWS, timeout=1.0)
            pending.extend(m for m in msgs if m.offset < rng.end)
            # the next offset the consumer would deliver: past aborted records and markers it skipped
            new = max(position, msgs[-1].offset + 1 if msgs else 0,
                      consumer.position(rng.topic, rng.partition) or 0)
            now = time.monotonic()
            if new > position:
                position, last_progress = new, now
            elif now - last_progress > STALL_TIMEOUT_S:
                raise TimeoutError(
                    f"reading {rng.topic}[{rng.partition}] offsets [{rng.start}, {rng.end}) made no progress for "
                    f"{STALL_TIMEOUT_S:g} s at offset {position}: is the broker at "
                    f"{consumer_conf.get('bootstrap.servers')} up?")
            if len(pending) >= BATCH_ROWS:
                yield to_record_batch(pending, schema, include_headers)
                pending = []
        if pending:
            yield to_record_batch(pending, schema, include_headers)
        ok = True
    except KafkaError as e:
        if e.name == "OFFSET_OUT_OF_RANGE":
            raise RuntimeError(
                f"records of {rng.topic}[{rng.partition}] from offset {rng.start} are gone (deleted by retention "
                "or DeleteRecords) before this query read them; set failOnDataLoss=false to skip lost data"
            ) from e
        raise
    finally:
        if not ok:
            _drop(key)
