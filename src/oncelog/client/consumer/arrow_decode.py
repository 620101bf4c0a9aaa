"""Vectorised decoding of Kafka v2 records sections straight into Arrow columns (numpy, no per-record objects).

A records section is ``records_count`` records, each ``length varint | attributes int8 | timestampDelta varlong |
offsetDelta varint | keyLength varint | key | valueLength varint | value | headerCount varint | headers``
(zig-zag varints). Only the walk from one record to the next is sequential; runs of records of one size
(fixed-size payloads, the common case) are found by vector checks, a few per records section, and only sizes
that vary from record to record are walked one varint per record. All
other fields are decoded for all records at once, and keys and values are gathered into Arrow binary buffers.

Batch framing (CRC, decompression, transaction filtering) is done before (:mod:`.batch_fetch`); this module sees
only uncompressed records sections and the few header fields it needs. It is shared by the consumer's columnar
path (:mod:`.columnar`, ``consume_arrow()``) and the Spark source (``oncelog.spark.reader``), and needs numpy and
pyarrow (the ``spark`` extra): the consumer imports it only when ``consume_arrow()`` is called.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from oncelog.protocol.record_batch_columnar import _runs_mask

__all__ = ["DecodedColumns", "RecordFormatError", "Section", "decode_sections"]

_HEADERS_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))


class RecordFormatError(ValueError):
    """A records section does not parse as Kafka record format v2."""


@dataclass
class DecodedColumns:
    """Columns of one records section (``n`` records)."""

    n: int
    offsets: np.ndarray[Any, Any]  # int64 absolute offsets
    timestamps: np.ndarray[Any, Any]  # int64 ms
    keys: pa.Array
    values: pa.Array
    headers: pa.Array | None  # list<struct<key string, value binary>> (null: no headers) when asked for


def _varint(buf: np.ndarray[Any, Any], pos: np.ndarray[Any, Any], strict: bool = True
            ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Zig-zag varints (up to 10 bytes) at every position of ``pos``: (values int64, positions after them).
    ``strict=False`` (guessed positions): a varint running past 10 bytes reads as -1 instead of raising."""
    last = len(buf) - 1
    b = buf[np.minimum(pos, last)].astype(np.uint64)
    raw = b & 0x7F
    size = np.ones(len(pos), np.int64)
    cont = b >= 0x80
    k = 1
    while cont.any():
        if k >= 10:
            if strict:
                raise RecordFormatError("a varint runs past 10 bytes")
            raw = np.where(cont, np.uint64(1), raw)  # zig-zag 1 = -1: rejected by the caller
            break
        b = buf[np.minimum(pos + k, last)].astype(np.uint64)
        raw = np.where(cont, raw | ((b & 0x7F) << np.uint64(7 * k)), raw)
        size += cont
        cont &= b >= 0x80
        k += 1
    val = (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64)
    return val, pos + size


def _record_starts(data: bytes, count: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """(start of each record's body, end of each record) for ``count`` records.

    Records come in runs of equal size (fixed-size payloads: a record's size changes only where its offset or
    timestamp delta needs one more varint byte, at 64, 8192, ...): from a record's size, the heads of the next
    ``window`` records are guessed at multiples of it and checked all at once; the run ends at the first wrong
    guess, and the walk goes on from there. Runs of a few records (sizes that vary) switch to a plain walk.
    """
    n = len(data)
    buf = np.frombuffer(data, np.uint8)
    if count == 0:
        empty = np.zeros(0, np.int64)
        return empty, empty
    starts: list[np.ndarray[Any, Any]] = []
    ends: list[np.ndarray[Any, Any]] = []
    p, done, window, short = 0, 0, 64, 0
    while done < count and short < 4:
        if p >= n:
            raise RecordFormatError(f"records section ends after {done} of {count} records")
        length, body = _varint(buf, np.array([p], np.int64))
        step = int(body[0]) + int(length[0]) - p
        if int(length[0]) < 0 or p + step > n:
            raise RecordFormatError(f"record {done} at byte {p} has a bad length {int(length[0])}")
        m = min(count - done, window, (n - p - 1) // step + 1)
        heads = p + np.arange(m, dtype=np.int64) * step
        lens, bodies = _varint(buf, heads, strict=False)
        ok = (bodies + lens == heads + step) & (lens >= 0)
        k = m if ok.all() else max(1, int(np.argmin(ok)))
        starts.append(bodies[:k])
        ends.append(bodies[:k] + lens[:k])
        p += k * step
        done += k
        window = min(window * 2, 1 << 20) if k == m else 64
        short = short + 1 if k < 8 and done < count else 0
    if done < count:
        rest_starts, rest_ends, p = _walk(data, p, count - done, done, count)
        starts.append(np.array(rest_starts, np.int64))
        ends.append(np.array(rest_ends, np.int64))
    if p != n:
        raise RecordFormatError(f"records section has {n - p} bytes after its {count} records")
    return np.concatenate(starts), np.concatenate(ends)


def _walk(data: bytes, p: int, todo: int, done: int, count: int) -> tuple[list[int], list[int], int]:
    """The plain record walk from byte ``p`` for ``todo`` records: (body starts, ends, position after them)."""
    starts: list[int] = []
    ends: list[int] = []
    try:
        for _ in range(todo):
            b = data[p]
            if b < 0x80:
                p += 1
                length = (b >> 1) ^ -(b & 1)
            elif data[p + 1] < 0x80:
                z = (b & 0x7F) | (data[p + 1] << 7)
                p += 2
                length = (z >> 1) ^ -(z & 1)
            else:
                length, p = _py_varint(data, p)
            starts.append(p)
            p += length
            ends.append(p)
    except IndexError:
        raise RecordFormatError(f"records section ends after {done + len(starts)} of {count} records") from None
    return starts, ends, p


def _binary(data: bytes, starts: np.ndarray[Any, Any], lens: np.ndarray[Any, Any]) -> pa.Array:
    """A binary Arrow array of ``data[start:start+len]`` per row, null where len < 0: the bytes are gathered by
    one boolean mask over ``data`` (the ranges are disjoint and in order), the offsets are a cumulative sum."""
    n = len(lens)
    if n and (lens < 0).all():
        return pa.nulls(n, pa.binary())  # e.g. records without keys
    sizes = np.maximum(lens, 0)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    total = int(offsets[-1])
    if total >= 1 << 31:
        raise RecordFormatError(f"{total} bytes of keys or values do not fit one Arrow binary array")
    buf = np.frombuffer(data, np.uint8)
    step = int(starts[1] - starts[0]) if n > 1 else 0
    if n > 1 and sizes[0] and (sizes == sizes[0]).all() and (np.diff(starts) == step).all():
        # fixed-size records: every entry is one row of a strided 2-D view
        rows = np.lib.stride_tricks.as_strided(buf[int(starts[0]):], shape=(n, int(sizes[0])), strides=(step, 1),
                                               writeable=False)
        body = np.ascontiguousarray(rows).reshape(-1)
    else:
        body = buf[_runs_mask(np, starts, sizes, len(buf))]
    validity = None
    nulls = int((lens < 0).sum())
    if nulls:
        validity = pa.py_buffer(np.packbits(lens >= 0, bitorder="little"))
    return pa.Array.from_buffers(pa.binary(), n, [validity, pa.py_buffer(offsets.astype(np.int32)),
                                                  pa.py_buffer(body)], nulls)


def _py_varint(data: bytes, p: int) -> tuple[int, int]:
    z, shift = 0, 0
    while True:
        if p >= len(data) or shift > 63:
            raise RecordFormatError(f"bad varint at byte {p}")
        c = data[p]
        z |= (c & 0x7F) << shift
        p += 1
        shift += 7
        if c < 0x80:
            return (z >> 1) ^ -(z & 1), p


def _headers(data: bytes, pos: np.ndarray[Any, Any], ends: np.ndarray[Any, Any]
             ) -> tuple[list[list[dict[str, Any]]], np.ndarray[Any, Any]]:
    """Headers of every record (per-record Python, only used when some record has headers) and where they end."""
    out: list[list[dict[str, Any]]] = []
    after = pos.copy()
    for i, (p, end) in enumerate(zip(pos.tolist(), ends.tolist(), strict=True)):
        count, p = _py_varint(data, p)
        items: list[dict[str, Any]] = []
        for _ in range(count):
            klen, p = _py_varint(data, p)
            if klen < 0 or p + klen > end:
                raise RecordFormatError(f"record header key overruns its record at byte {p}")
            key = data[p:p + klen].decode("utf-8", "replace")
            vlen, p = _py_varint(data, p + klen)
            if p + max(vlen, 0) > end:
                raise RecordFormatError(f"record header value overruns its record at byte {p}")
            items.append({"key": key, "value": None if vlen < 0 else data[p:p + vlen]})
            p += max(vlen, 0)
        out.append(items)
        after[i] = p
    return out, after


@dataclass(frozen=True)
class Section:
    """An uncompressed records section and the batch header fields its records need."""

    data: bytes
    count: int
    base_offset: int
    base_timestamp: int
    #: the batch's max timestamp when its timestamp type is LogAppendTime (every record carries it), else None
    log_append_time: int | None = None


def decode_sections(sections: list[Section], include_headers: bool) -> DecodedColumns:
    """Decode many records sections at once (numpy work is per call, so one call per fetch, not per batch)."""
    data = b"".join(s.data for s in sections)
    buf = np.frombuffer(data, np.uint8)
    starts_l, ends_l = [], []
    pos = 0
    for s in sections:
        if s.count > len(s.data) // 6:
            raise RecordFormatError(f"{s.count} records cannot fit in {len(s.data)} bytes")
        st, en = _record_starts(s.data, s.count)
        starts_l.append(st + pos)
        ends_l.append(en + pos)
        pos += len(s.data)
    counts = np.array([s.count for s in sections], np.int64)
    count = int(counts.sum())
    starts = np.concatenate(starts_l) if starts_l else np.zeros(0, np.int64)
    ends = np.concatenate(ends_l) if ends_l else np.zeros(0, np.int64)
    if count and (ends - starts < 6).any():
        raise RecordFormatError("a record is shorter than the 6 bytes every record needs")
    ts_delta, p = _varint(buf, starts + 1)  # + attributes byte
    off_delta, p = _varint(buf, p)
    klen, p = _varint(buf, p)
    kstart = p
    p = p + np.maximum(klen, 0)
    vlen, p = _varint(buf, p)
    vstart = p
    p = p + np.maximum(vlen, 0)
    hcount, hend = _varint(buf, p)
    headers: pa.Array | None = None
    if (hcount == 0).all():
        if include_headers:
            headers = pa.nulls(count, _HEADERS_TYPE)  # spark-sql-kafka: null when a record has no headers
    else:
        lists, hend = _headers(data, p, ends)
        if include_headers:
            headers = pa.array([h or None for h in lists], _HEADERS_TYPE)
    if (hend != ends).any():
        bad = int(np.argmax(hend != ends))
        raise RecordFormatError(f"record {bad} was read to byte {int(hend[bad])} but its length says it ends at "
                                f"{int(ends[bad])}")
    base_off = np.repeat(np.array([s.base_offset for s in sections], np.int64), counts)
    base_ts = np.repeat(np.array([s.base_timestamp for s in sections], np.int64), counts)
    timestamps = ts_delta + base_ts
    if any(s.log_append_time is not None for s in sections):
        lat = np.repeat(np.array([-1 if s.log_append_time is None else s.log_append_time for s in sections],
                                 np.int64), counts)
        has = np.repeat(np.array([s.log_append_time is not None for s in sections]), counts)
        timestamps = np.where(has, lat, timestamps)
    return DecodedColumns(count, off_delta + base_off, timestamps, _binary(data, kstart, klen),
                          _binary(data, vstart, vlen), headers)
