"""Vectorised decoding of Kafka v2 records sections straight into Arrow columns (numpy, no per-record objects).

A records section is ``records_count`` records, each ``length varint | attributes int8 | timestampDelta varlong |
offsetDelta varint | keyLength varint | key | valueLength varint | value | headerCount varint | headers``
(zig-zag varints). Only the walk from one record to the next is sequential; runs of records of one size
(fixed-size payloads, the common case) are found by vector checks, a few per records section, and only sizes
that vary from record to record are walked one varint per record. All
other fields are decoded for all records at once, and keys and values are gathered into Arrow binary buffers.

Batch framing (CRC, decompression, transaction filtering) is done before (:mod:`.batch_fetch`); this module sees
only uncompressed records sections and the few header fields it needs. It is shared by the consumer's columnar
path (:mod:`.arrow_batches`, ``consume_arrow()``) and the Spark source (``oncelog.spark.reader``), and needs numpy and
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
    b = buf[np.minimum(pos, last)]
    cont = b >= 0x80
    if not cont.any():  # one byte each (small lengths and deltas): no 64-bit work
        small = b.astype(np.int64)
        return (small >> 1) ^ -(small & 1), pos + 1
    raw = (b & 0x7F).astype(np.uint32)  # 32 bits hold varints of up to 4 bytes: half the memory traffic
    size = np.ones(len(pos), np.int64)
    k = 1
    while k < 4 and cont.any():
        b = buf[np.minimum(pos + k, last)]
        raw |= np.where(cont, (b & 0x7F).astype(np.uint32) << np.uint32(7 * k), np.uint32(0))
        size += cont
        cont &= b >= 0x80
        k += 1
    if not cont.any():
        r = raw.astype(np.int64)
        return (r >> 1) ^ -(r & 1), pos + size
    raw64 = raw.astype(np.uint64)  # longer varints (timestamp deltas past 2**27 ms, big values): 64 bits
    while cont.any():
        if k >= 10:
            if strict:
                raise RecordFormatError("a varint runs past 10 bytes")
            raw64 = np.where(cont, np.uint64(1), raw64)  # zig-zag 1 = -1: rejected by the caller
            break
        b = buf[np.minimum(pos + k, last)].astype(np.uint64)
        raw64 = np.where(cont, raw64 | ((b & 0x7F) << np.uint64(7 * k)), raw64)
        size += cont
        cont &= b >= 0x80
        k += 1
    val = (raw64 >> np.uint64(1)).astype(np.int64) ^ -(raw64 & np.uint64(1)).astype(np.int64)
    return val, pos + size


def _record_starts(data: bytes, sections: list[Section]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """(start of each record's body, end of each record) of every section of ``data`` (the sections back to back).

    Records come in runs of equal size (fixed-size payloads: a record's size changes only where its offset or
    timestamp delta needs one more varint byte, at 64, 8192, ...). For every section at once: from the size of the
    record at its current position, the heads of all its remaining records are guessed at multiples of that size
    and checked in one vector pass; each section's run ends at its first wrong guess, and the next pass goes on
    from there (a few passes in all, not a few per section). A section whose runs stay short (sizes that vary)
    is walked record by record.
    """
    buf = np.frombuffer(data, np.uint8)
    lengths = np.array([len(s.data) for s in sections], np.int64)
    counts = np.array([s.count for s in sections], np.int64)
    ends_of = np.cumsum(lengths)
    pos = ends_of - lengths  # where each section's next record starts
    left = counts.copy()
    short = np.zeros(len(sections), np.int64)
    starts_l: list[np.ndarray[Any, Any]] = []
    ends_l: list[np.ndarray[Any, Any]] = []
    active = np.flatnonzero(left > 0)
    while len(active):
        p, end = pos[active], ends_of[active]
        if (p >= end).any():
            i = int(active[np.argmax(p >= end)])
            raise RecordFormatError(f"records section ends after {int(counts[i] - left[i])} of {int(counts[i])} "
                                    "records")
        length, body = _varint(buf, p)
        step = body + length - p
        bad = (length < 0) | (p + step > end)
        if bad.any():
            i = int(np.argmax(bad))
            raise RecordFormatError(f"a record at byte {int(p[i])} has a bad length {int(length[i])}")
        m = np.minimum(left[active], (end - p - 1) // step + 1)
        first = np.cumsum(m) - m
        within = np.arange(int(m.sum()), dtype=np.int64) - np.repeat(first, m)
        steps = np.repeat(step, m)
        heads = np.repeat(p, m) + within * steps
        lens, bodies = _varint(buf, heads, strict=False)
        wrong = (bodies + lens != heads + steps) | (lens < 0)
        k = m.copy()
        np.minimum.at(k, np.repeat(np.arange(len(active)), m)[wrong], within[wrong])
        k = np.maximum(k, 1)
        take = within < np.repeat(k, m)
        starts_l.append(bodies[take])
        ends_l.append(bodies[take] + lens[take])
        pos[active] = p + k * step
        left[active] -= k
        short[active] = np.where((k < 8) & (left[active] > 0), short[active] + 1, 0)
        active = np.flatnonzero((left > 0) & (short < 4))
    for i in np.flatnonzero(left > 0).tolist():
        st, en, after = _walk(data, int(pos[i]), int(left[i]), int(counts[i] - left[i]), int(counts[i]))
        starts_l.append(np.array(st, np.int64))
        ends_l.append(np.array(en, np.int64))
        pos[i] = after
    if (pos != ends_of).any():
        i = int(np.argmax(pos != ends_of))
        raise RecordFormatError(f"records section has {int(ends_of[i] - pos[i])} bytes after its {int(counts[i])} "
                                "records")
    if not starts_l:
        empty = np.zeros(0, np.int64)
        return empty, empty
    starts, ends = np.concatenate(starts_l), np.concatenate(ends_l)
    if len(starts_l) > 1 and (np.diff(starts) <= 0).any():
        order = np.argsort(starts, kind="stable")  # body starts grow through the sections: back in record order
        starts, ends = starts[order], ends[order]
    return starts, ends


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
    sizes, offsets = _sizes_and_offsets(lens)
    buf = np.frombuffer(data, np.uint8)
    step = int(starts[1] - starts[0]) if n > 1 else 0
    if n > 1 and sizes[0] and (sizes == sizes[0]).all() and (np.diff(starts) == step).all():
        # fixed-size records: every entry is one row of a strided 2-D view
        rows = np.lib.stride_tricks.as_strided(buf[int(starts[0]):], shape=(n, int(sizes[0])), strides=(step, 1),
                                               writeable=False)
        body = np.ascontiguousarray(rows).reshape(-1)
    else:
        body = buf[_runs_mask(np, starts, sizes, len(buf))]
    return _arrow_binary(lens, offsets, body)


def _sizes_and_offsets(lens: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """(bytes of each entry, Arrow offsets) of entries of lengths ``lens`` (-1: null)."""
    sizes = np.maximum(lens, 0)
    offsets = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    total = int(offsets[-1])
    if total >= 1 << 31:
        raise RecordFormatError(f"{total} bytes of keys or values do not fit one Arrow binary array")
    return sizes, offsets


def _arrow_binary(lens: np.ndarray[Any, Any], offsets: np.ndarray[Any, Any], body: np.ndarray[Any, Any]
                  ) -> pa.Array:
    """The binary Arrow array of ``body`` cut at ``offsets``, null where ``lens`` < 0."""
    nulls = int((lens < 0).sum())
    validity = pa.py_buffer(np.packbits(lens >= 0, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(pa.binary(), len(lens), [validity, pa.py_buffer(offsets.astype(np.int32)),
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
    for s in sections:
        if s.count > len(s.data) // 6:
            raise RecordFormatError(f"{s.count} records cannot fit in {len(s.data)} bytes")
    if sections and sum(s.count for s in sections) >= _LAYOUT_MIN_RECORDS * len(sections):
        cols = _decode_by_layout(sections, include_headers)
        if cols is not None:
            return cols
    data = b"".join(s.data for s in sections)
    buf = np.frombuffer(data, np.uint8)
    starts, ends = _record_starts(data, sections)
    counts = np.array([s.count for s in sections], np.int64)
    count = int(counts.sum())
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


#: the layout path is tried when a fetch's sections hold at least this many records each on average (below it,
#: its per-section Python costs more than the vector walk over all sections at once)
_LAYOUT_MIN_RECORDS = 256


@dataclass
class _Run:
    """``rows`` consecutive records of one layout: a 2-D view (one record per row) and the decoded numbers."""

    rows: np.ndarray[Any, Any]
    offsets: np.ndarray[Any, Any]
    timestamps: np.ndarray[Any, Any]
    key: tuple[int, int]  # (column, length); length -1: null
    value: tuple[int, int]


def _decode_by_layout(sections: list[Section], include_headers: bool) -> DecodedColumns | None:
    """The records of ``sections`` decoded run by run, or None when they do not come in long runs of one layout.

    A producer writes records of one shape (key and value sizes, no headers) back to back; their bytes differ only
    in the timestamp and offset deltas, whose varints change size at 64, 8192, ... A run is the records from one
    position on that share the first record's layout: the same length bytes, the same varint sizes, the same key,
    value and header-count bytes. Its records are rows of a 2-D view of the section (row size = record size), so each
    check and each field is one column operation for the whole run, and keys and values are fixed-size slices of the
    rows. Anything else (headers, varying sizes, malformed data) returns None and is left to the general walk, which
    also produces the errors.
    """
    runs: list[_Run] = []
    for s in sections:
        buf = np.frombuffer(s.data, np.uint8)
        p, left, end, short = 0, s.count, len(s.data), 0
        while left:
            run = _layout_run(s, buf, p, left, end)
            if run is None:
                return None
            runs.append(run)
            k = len(run.offsets)
            p += k * run.rows.shape[1]
            left -= k
            short = short + 1 if k < 8 else 0
            if short >= 4:
                return None
        if p != end:
            return None
    n = sum(len(r.offsets) for r in runs)
    headers = pa.nulls(n, _HEADERS_TYPE) if include_headers else None
    if not runs:
        empty = np.zeros(0, np.int64)
        return DecodedColumns(0, empty, empty, pa.nulls(0, pa.binary()), pa.nulls(0, pa.binary()), headers)
    return DecodedColumns(n, np.concatenate([r.offsets for r in runs]), np.concatenate([r.timestamps for r in runs]),
                          _fixed_binary(runs, n, "key"), _fixed_binary(runs, n, "value"), headers)


def _layout_run(s: Section, buf: np.ndarray[Any, Any], p: int, left: int, end: int) -> _Run | None:
    """The run of records of ``s`` starting at byte ``p`` that share that record's layout (None: not decodable so)."""
    data = s.data
    try:
        length, body = _py_varint(data, p)
        _, c_off = _py_varint(data, body + 1)
        _, c_klen = _py_varint(data, c_off)
        klen, c_key = _py_varint(data, c_klen)
        c_vlen = c_key + max(klen, 0)
        vlen, c_value = _py_varint(data, c_vlen)
        c_hcount = c_value + max(vlen, 0)
        hcount, after = _py_varint(data, c_hcount)
    except (RecordFormatError, IndexError):
        return None
    step = body - p + length
    if length < 6 or hcount != 0 or after != body + length or p + step > end:
        return None
    m = min(left, (end - p) // step)
    rows = np.lib.stride_tricks.as_strided(buf[p:], shape=(m, step), strides=(step, 1), writeable=False)
    same = np.ones(m, np.bool_)
    for a, b in ((p, body), (c_klen, c_key), (c_vlen, c_value), (c_hcount, after)):
        for c in range(a, b):  # the length, key length, value length and header count bytes of the first record
            same &= rows[:, c - p] == data[c]
    for a, b in ((body + 1, c_off), (c_off, c_klen)):  # timestamp and offset deltas: varints of the same sizes
        for c in range(a - p, b - p - 1):
            same &= rows[:, c] >= 0x80
        same &= rows[:, b - p - 1] < 0x80
    k = m if same.all() else int(np.argmin(same))
    rows = rows[:k]
    ts = _column_varint(rows, body + 1 - p, c_off - p)
    if s.log_append_time is not None:
        ts = np.full(k, s.log_append_time, np.int64)
    else:
        ts += s.base_timestamp
    return _Run(rows, _column_varint(rows, c_off - p, c_klen - p) + s.base_offset, ts, (c_key - p, klen),
                (c_value - p, vlen))


def _column_varint(rows: np.ndarray[Any, Any], a: int, b: int) -> np.ndarray[Any, Any]:
    """The zig-zag varints in columns [a, b) of every row (the same size in every row: checked by the caller)."""
    z = np.zeros(len(rows), np.uint64)
    for j, c in enumerate(range(a, b)):
        z |= (rows[:, c] & 0x7F).astype(np.uint64) << np.uint64(7 * j)
    return (z >> np.uint64(1)).astype(np.int64) ^ -(z & np.uint64(1)).astype(np.int64)


def _fixed_binary(runs: list[_Run], n: int, field: str) -> pa.Array:
    """One binary Arrow array of a field of every run (each run's entries have one size, -1: null)."""
    parts = [getattr(r, field) for r in runs]
    counts = np.array([len(r.offsets) for r in runs], np.int64)
    lens = np.repeat(np.array([size for _, size in parts], np.int64), counts)
    if (lens < 0).all():
        return pa.nulls(n, pa.binary())
    _, offsets = _sizes_and_offsets(lens)
    body = np.empty(int(offsets[-1]), np.uint8)
    at = 0
    for r, (col, size) in zip(runs, parts, strict=True):
        if size > 0:
            k = len(r.offsets)
            body[at:at + k * size].reshape(k, size)[:] = r.rows[:, col:col + size]
            at += k * size
    return _arrow_binary(lens, offsets, body)
