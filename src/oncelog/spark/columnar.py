"""Vectorised decoding of Kafka v2 records sections straight into Arrow columns (numpy, no per-record objects).

A records section is ``records_count`` records, each ``length varint | attributes int8 | timestampDelta varlong |
offsetDelta varint | keyLength varint | key | valueLength varint | value | headerCount varint | headers``
(zig-zag varints). Only the walk from one record to the next is sequential; it reads one varint per record, and
when every record has the same length (fixed-size payloads, the common case) it is a single vector check. All
other fields are decoded for all records at once, and keys and values are gathered into Arrow binary buffers.

Batch framing (CRC, decompression, transaction filtering) is the client's job; this module sees only
uncompressed records sections and the few header fields it needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

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


def _varint(buf: np.ndarray[Any, Any], pos: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any],
                                                                           np.ndarray[Any, Any]]:
    """Zig-zag varints (up to 10 bytes) at every position of ``pos``: (values int64, positions after them)."""
    last = len(buf) - 1
    b = buf[np.minimum(pos, last)].astype(np.uint64)
    raw = b & 0x7F
    size = np.ones(len(pos), np.int64)
    cont = b >= 0x80
    k = 1
    while cont.any():
        if k >= 10:
            raise RecordFormatError("a varint runs past 10 bytes")
        b = buf[np.minimum(pos + k, last)].astype(np.uint64)
        raw = np.where(cont, raw | ((b & 0x7F) << np.uint64(7 * k)), raw)
        size += cont
        cont &= b >= 0x80
        k += 1
    val = (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64)
    return val, pos + size


def _record_starts(data: bytes, count: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """(start of each record's body, end of each record) for ``count`` records."""
    n = len(data)
    buf = np.frombuffer(data, np.uint8)
    if count == 0:
        empty = np.zeros(0, np.int64)
        return empty, empty
    # fast path: every record as long as the first one
    first_len, first_body = _varint(buf, np.zeros(1, np.int64))
    step = int(first_body[0]) + int(first_len[0])
    if step > 0 and step * count == n:
        heads = np.arange(count, dtype=np.int64) * step
        lens, bodies = _varint(buf, heads)
        if (bodies + lens == heads + step).all():
            return bodies, bodies + lens
    starts: list[int] = []
    ends: list[int] = []
    p = 0
    try:
        for _ in range(count):
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
        raise RecordFormatError(f"records section ends after {len(starts)} of {count} records") from None
    if p != n:
        raise RecordFormatError(f"records section has {n - p} bytes after its {count} records")
    return np.array(starts, np.int64), np.array(ends, np.int64)


def _binary(data: bytes, starts: np.ndarray[Any, Any], lens: np.ndarray[Any, Any]) -> pa.Array:
    """A binary Arrow array of ``data[start:start+len]`` per row, null where len < 0."""
    if len(lens) and (lens < 0).all():
        return pa.nulls(len(lens), pa.binary())  # e.g. records without keys
    return pa.array([data[s:s + n] if n >= 0 else None for s, n in zip(starts.tolist(), lens.tolist(), strict=True)],
                    pa.binary())


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
