"""Fast decoding of a v2 records section straight into the caller's message objects (the consumer's hot path).

:func:`oncelog.protocol.records.decode_records` is the general decoder: it builds :class:`~.records.Record`
objects (with producer sequence numbers) and is what the broker and the storage layer use. A consumer wants
one object per record in its own type, so :func:`decode_section_into` builds those directly with
``make(topic, partition, offset, key, value, headers, timestamp)`` (the field order of
``oncelog.client.Message``), skipping the intermediate Record, and reads the varints through lookup tables:

* a 1-byte zig-zag varint ``b`` (< 0x80) decodes as ``_Z1[b]``;
* a 2-byte one ``b c`` (b >= 0x80 > c) as ``_Z2[b | c << 8]``;
* longer ones (and every malformed case) go through :func:`~.records._slow_varint`.

It checks exactly what the general decoder checks (record lengths, key/value/header bounds, each record read
to its declared end, the section read to its end, truncation) and raises the same
:class:`~.records.CorruptRecordError`; ``tests/unit/protocol/test_record_decode.py`` proves both decoders give
the same records for any input.

:func:`keyless_records` walks a section the same way without building anything, for the broker's check that
every record written to a compacted topic has a key (Kafka's LogValidator.validateKey): it reads each record's
length and key size only, and skips whole runs of records of the same layout at once.
"""

from __future__ import annotations

import functools
import struct
import sys
from collections.abc import Callable, Iterable
from itertools import repeat
from operator import itemgetter
from typing import Any, NamedTuple, TypeVar

from . import compression as _compression
from .records import (
    ATTR_COMPRESSION_MASK,
    ATTR_TIMESTAMP_TYPE,
    BATCH_HEADER_SIZE,
    BatchHeader,
    CorruptRecordError,
    _decode_headers,
    _slow_varint,
    compute_crc,
)

__all__ = ["MessageFactory", "decode_batch_into", "decode_records_into", "decode_section_into", "keyless_records",
           "keyless_records_in"]

T = TypeVar("T")
#: ``make(topic, partition, offset, key, value, headers, timestamp)``
MessageFactory = Callable[[str, int, int, "bytes | None", "bytes | None", list[Any], int], T]


def _zigzag(z: int) -> int:
    return (z >> 1) ^ -(z & 1)


_Z1: tuple[int, ...] = tuple(_zigzag(b) for b in range(0x80))
# index b | c << 8 for the 2-byte varint b c (b >= 0x80, c < 0x80); other indices are never read
_Z2: tuple[int, ...] = tuple(
    _zigzag((i & 0x7F) | ((i >> 8) << 7)) if i & 0x80 else 0 for i in range(0x80 << 8)
)
# translate tables for bytes.translate: 1 where the byte ends a varint (< 0x80) / continues one (>= 0x80)
_IS_LAST = bytes(1 if b < 0x80 else 0 for b in range(256))
_IS_CONT = bytes(0 if b < 0x80 else 1 for b in range(256))
#: the headers of a record without headers (shared, immutable)
_NO_HEADERS: tuple[()] = ()
_MIN_RUN = 8  # shorter runs are decoded record by record
_FIRST_WINDOW = 64  # records a run attempt looks at first; grows 4 times while runs fill it
_MAX_WINDOW = 1 << 16
_GROWTH = 4
_RETRY_AFTER = 16  # records decoded one by one after a failed run attempt
_first = itemgetter(0)
_LITTLE_ENDIAN = sys.byteorder == "little"


def decode_section_into(
    data: bytes,
    h: BatchHeader,
    make: MessageFactory[T],
    topic: str,
    partition: int,
    out: list[T],
) -> None:
    """Append to ``out`` one ``make(...)`` per record of the uncompressed records section ``data`` of the
    batch ``h``: absolute offset, timestamp (maxTimestamp for LOG_APPEND_TIME batches), key, value, headers.
    See :func:`decode_records_into`."""
    decode_records_into(data, h.records_count, h.base_offset, h.base_timestamp,
                        h.max_timestamp if h.attributes & ATTR_TIMESTAMP_TYPE else None, make, topic, partition, out)


def decode_records_into(
    data: bytes,
    count: int,
    base_offset: int,
    base_ts: int,
    log_append_ts: int | None,
    make: MessageFactory[T],
    topic: str,
    partition: int,
    out: list[T],
    pos: int = 0,
    index: int = 0,
    limit: int | None = None,
) -> tuple[int, int]:
    """:func:`decode_section_into` from the batch header's fields: ``count`` records, ``log_append_ts`` the
    batch's maxTimestamp when its timestamps are LOG_APPEND_TIME (else None). From the record at byte ``pos`` (the
    ``index``-th) on, at most ``limit`` records (a batch handed out in parts); returns where the next record
    starts, (byte, index), the index ``count`` once the section is read to its end.

    Records are read one by one; after a record without headers, the records that follow with the very same
    layout (see :func:`_run_length`) are decoded as one run, column by column."""
    n = len(data)
    if count > n // 6:  # every record takes at least 6 bytes after its length prefix
        raise CorruptRecordError(
            f"record batch at base offset {base_offset} declares {count} records in {n} bytes of records"
        )
    append = out.append
    slow = _slow_varint
    z1 = _Z1
    z2 = _Z2
    p = pos
    i = index
    stop = count if limit is None else min(count, index + limit)
    next_try = 0  # record index from which a run is tried again
    window = _FIRST_WINDOW
    try:
        while i < stop:
            start = p
            # length: the record's end
            b = data[p]
            if b < 0x80:
                length = z1[b]
                p += 1
            else:
                c = data[p + 1]
                if c < 0x80:
                    length = z2[b | c << 8]
                    p += 2
                else:
                    length, p = slow(data, p)
            end = p + length
            if length < 6 or end > n:
                raise CorruptRecordError(
                    f"record at byte {p} of the records section has invalid length {length} ({n - p} remain)"
                )
            # attributes (unused in v2), then timestampDelta
            ts_at = p = p + 1
            b = data[p]
            if b < 0x80:
                ts_delta = z1[b]
                p += 1
            else:
                c = data[p + 1]
                if c < 0x80:
                    ts_delta = z2[b | c << 8]
                    p += 2
                else:
                    ts_delta, p = slow(data, p)
            # offsetDelta
            od_at = p
            b = data[p]
            if b < 0x80:
                off_delta = z1[b]
                p += 1
            else:
                c = data[p + 1]
                if c < 0x80:
                    off_delta = z2[b | c << 8]
                    p += 2
                else:
                    off_delta, p = slow(data, p)
            # key
            kl_at = p
            b = data[p]
            if b == 1:  # -1: null, the common case
                key = None
                klen = -1
                p += 1
            else:
                if b < 0x80:
                    klen = z1[b]
                    p += 1
                else:
                    klen, p = slow(data, p)
                if klen < 0:
                    key = None
                else:
                    q = p + klen
                    if q > end:
                        raise CorruptRecordError(f"record key of {klen} bytes overruns its record at byte {p}")
                    key = data[p:q]
                    p = q
            # value
            vl_at = p
            b = data[p]
            if b < 0x80:
                vlen = z1[b]
                p += 1
            else:
                c = data[p + 1]
                if c < 0x80:
                    vlen = z2[b | c << 8]
                    p += 2
                else:
                    vlen, p = slow(data, p)
            if vlen < 0:
                value = None
            else:
                q = p + vlen
                if q > end:
                    raise CorruptRecordError(f"record value of {vlen} bytes overruns its record at byte {p}")
                value = data[p:q]
                p = q
            # headers
            if data[p] == 0:
                headers: Any = _NO_HEADERS
                p += 1
            else:
                headers, p = _decode_headers(data, p, end)
            if p != end:
                raise CorruptRecordError(
                    f"record ending at byte {end} of the records section was read to byte {p}: "
                    "its length prefix does not match its fields"
                )
            append(make(topic, partition, base_offset + off_delta, key, value, headers,
                        base_ts + ts_delta if log_append_ts is None else log_append_ts))
            i += 1
            if i < next_try or headers is not _NO_HEADERS or i == stop:
                continue
            size = end - start
            layout = _Layout(size, start, ts_at, od_at, kl_at, vl_at - kl_at - max(klen, 0), klen, vl_at,
                             end - 1 - vl_at - max(vlen, 0), vlen)
            if n - end == (count - i) * size:  # the records left are all of this size: likely one layout
                window = _MAX_WINDOW
            k_max = min(stop - i, (n - end) // size, window)
            k = _run_length(data, end, k_max, layout, offsets=False)
            first_delta: int | None = None
            if k >= _MIN_RUN:  # offset deltas: consecutive (compared with their encoding), else of one width
                od_w = kl_at - od_at
                first_delta = slow(data, od_at + size)[0]
                if not _consecutive(data, od_at + size, od_w, size, k, first_delta):
                    first_delta = None
                    k = _varint_ok(data, od_at + size, od_w, size, k)
            if k < _MIN_RUN:
                next_try = i + _RETRY_AFTER
                window = _FIRST_WINDOW
                continue
            _emit_run(data, end, k, layout, make, topic, partition, base_offset,
                      base_ts if log_append_ts is None else None, log_append_ts, first_delta, out)
            p = end + k * size
            i += k
            if k == k_max:
                window = min(window * _GROWTH, _MAX_WINDOW)
    except IndexError:
        raise CorruptRecordError(
            f"records section of batch at base offset {base_offset} is truncated at byte {p} of {n}"
        ) from None
    if i == count and p != n:
        raise CorruptRecordError(
            f"batch at base offset {base_offset} has {n - p} bytes left after its {count} declared records"
        )
    return p, i


class _Layout(NamedTuple):
    """Where the fields of a record without headers sit: absolute positions in the section of the record
    the layout was read from (``start``), key/value sizes (-1: null)."""

    size: int
    start: int
    ts_at: int
    od_at: int
    kl_at: int
    kw: int  # bytes of the key size varint
    klen: int
    vl_at: int
    vw: int
    vlen: int


def _varint_ok(data: bytes, at: int, width: int, size: int, k: int) -> int:
    """How many of the ``k`` records (``size`` apart from ``at``) start with a varint of exactly ``width`` bytes
    (counted from the first one)."""
    good = k
    stop = at + k * size
    for j in range(width):
        col = data[at + j : stop : size].translate(_IS_LAST if j == width - 1 else _IS_CONT)
        good = min(good, len(col) - len(col.lstrip(b"\x01")))
        if good == 0:
            break
    return good


def _run_length(data: bytes, at: int, k_max: int, lay: _Layout, offsets: bool = True) -> int:
    """How many records from byte ``at`` on (at most ``k_max``, each ``lay.size`` bytes) have exactly the layout
    ``lay``: the same bytes for the length prefix, key size, value size and header count (0), and timestamp /
    offset delta varints of the same widths (``offsets=False``: the offset deltas' widths are the caller's to
    check). Such records decode like the one ``lay`` was read from, field for field; only their delta values, key
    and value bytes differ."""
    size = lay.size  # the template record is at lay.start, the run starts right after it (at = start + size)
    stop = at + k_max * size
    good = k_max
    fixed = [*range(lay.start, lay.ts_at - 1), *range(lay.kl_at, lay.kl_at + lay.kw),
             *range(lay.vl_at, lay.vl_at + lay.vw), lay.start + size - 1]
    for pos in fixed:
        col = data[pos + size : stop : size]
        good = min(good, len(col) - len(col.lstrip(data[pos : pos + 1])))
        if good < _MIN_RUN:
            return good
    good = _varint_ok(data, lay.ts_at + size, lay.od_at - lay.ts_at, size, good)
    if offsets and good >= _MIN_RUN:
        good = _varint_ok(data, lay.od_at + size, lay.kl_at - lay.od_at, size, good)
    return good


@functools.cache
def _delta_bytes() -> tuple[bytes, bytes, bytes]:
    """For the offset deltas d < 8192 (zig-zag 2d): the first byte of their 2- and 3-byte varints, the second
    byte of their 2-byte varint, the second byte of their 3-byte varint, indexed by d; the first and the last
    repeat with a period of 8192 in d, and are given twice over so that any 8192 of them are one slice."""
    first = bytes(((2 * d) & 0x7F) | 0x80 for d in range(8192))
    second3 = bytes((((2 * d) >> 7) & 0x7F) | 0x80 for d in range(8192))
    return first * 2, bytes((2 * d) >> 7 for d in range(8192)), second3 * 2


def _consecutive(data: bytes, at: int, width: int, size: int, k: int, d0: int) -> bool:
    """Whether the ``k`` varints of ``width`` bytes at ``at``, ``at + size``, ... are d0, d0 + 1, ..., d0 + k - 1
    (zig-zag), the offset deltas of a batch no record was removed from: compared byte column by byte column
    with what those values encode to, without decoding them."""
    stop = at + k * size
    if width == 1:
        return 0 <= d0 and d0 + k <= 64 and data[at:stop:size] == bytes(range(2 * d0, 2 * (d0 + k), 2))
    if width == 2:
        first, second2, _ = _delta_bytes()
        return 64 <= d0 and d0 + k <= 8192 and data[at:stop:size] == first[d0 : d0 + k] \
            and data[at + 1 : stop + 1 : size] == second2[d0 : d0 + k]
    if width != 3 or not 8192 <= d0 or d0 + k > 1 << 20 or k > 8192:
        return False
    first, _, second3 = _delta_bytes()
    p = d0 % 8192
    if data[at:stop:size] != first[p : p + k] or data[at + 1 : stop + 1 : size] != second3[p : p + k]:
        return False
    top = d0 >> 13  # the third byte, (2d) >> 14, steps up every 8192 values
    n = min(k, 8192 - p)
    return data[at + 2 : stop + 2 : size] == bytes((top,)) * n + bytes((top + 1,)) * (k - n)


def _deltas(data: bytes, at: int, width: int, size: int, k: int, base: int) -> list[int]:
    """``base`` + the varint of ``width`` bytes at ``at``, ``at + size``, ... (``k`` of them)."""
    stop = at + k * size
    if width == 1:
        if k >= 128:  # a table of the 128 values: one C-level lookup per record, shared int objects
            return list(map([base + z for z in _Z1].__getitem__, data[at:stop:size]))
        z1 = _Z1
        return [base + z1[b] for b in data[at:stop:size]]
    if width == 2:
        z2 = _Z2
        if k >= 128:  # the pairs as 16-bit table indexes; a table of the values met (timestamps repeat)
            pairs = bytearray(2 * k)
            low, high = (0, 1) if _LITTLE_ENDIAN else (1, 0)
            pairs[low::2] = data[at:stop:size]
            pairs[high::2] = data[at + 1 : stop + 1 : size]
            index = memoryview(pairs).cast("H")
            met = set(index)
            if len(met) * 4 <= k:
                return list(map({i: base + z2[i] for i in met}.__getitem__, index))
        return [base + z2[b | c << 8] for b, c in zip(data[at:stop:size], data[at + 1 : stop + 1 : size],
                                                      strict=True)]
    if width == 3:  # offset deltas from 8192 on (a producer's batch of 10,000 records), or far timestamps
        return [base + ((u := (b & 0x7F) | (c & 0x7F) << 7 | d << 14) >> 1 ^ -(u & 1))
                for b, c, d in zip(data[at:stop:size], data[at + 1 : stop + 1 : size],
                                   data[at + 2 : stop + 2 : size], strict=True)]
    slow = _slow_varint
    return [base + slow(data, q)[0] for q in range(at, stop, size)]


def _blobs(data: bytes, start: int, at: int, length: int, size: int, k: int) -> Iterable[bytes | None]:
    """The ``length`` bytes at ``at`` of each of the ``k`` records of ``size`` bytes from ``start`` on (-1: None)."""
    if length < 0:
        return repeat(None, k)
    if length == 0:
        return repeat(b"", k)
    pre = at - start  # one struct per record: skip, take, skip (iter_unpack cuts them in C)
    return map(_first, struct.iter_unpack(f"{pre}x{length}s{size - pre - length}x",
                                          memoryview(data)[start : start + k * size]))


def _emit_run(data: bytes, at: int, k: int, lay: _Layout, make: MessageFactory[T], topic: str, partition: int,
              base_offset: int, base_ts: int | None, log_append_ts: int | None, first_delta: int | None,
              out: list[T]) -> None:
    """Decode the ``k`` records of layout ``lay`` from byte ``at`` on, column by column; ``first_delta``: their
    offset deltas are ``first_delta``, ``first_delta + 1``... (None: decode them)."""
    shift = at - lay.start
    ts_w = lay.od_at - lay.ts_at
    od_w = lay.kl_at - lay.od_at
    offsets: Iterable[int]
    if first_delta is not None:
        offsets = range(base_offset + first_delta, base_offset + first_delta + k)
    else:
        offsets = _deltas(data, lay.od_at + shift, od_w, lay.size, k, base_offset)
    timestamps: Iterable[int]
    if base_ts is None:
        if ts_w > 2:  # still decoded: a 10-byte varint may overflow int64, which the record-by-record path rejects
            _deltas(data, lay.ts_at + shift, ts_w, lay.size, k, 0)
        timestamps = repeat(log_append_ts if log_append_ts is not None else -1, k)
    else:
        timestamps = _deltas(data, lay.ts_at + shift, ts_w, lay.size, k, base_ts)
    key_at = lay.kl_at + shift + lay.kw
    val_at = lay.vl_at + shift + lay.vw
    out += map(make, repeat(topic, k), repeat(partition, k), offsets,
               _blobs(data, at, key_at, lay.klen, lay.size, k), _blobs(data, at, val_at, lay.vlen, lay.size, k),
               repeat(_NO_HEADERS, k), timestamps)


def decode_batch_into(
    buf: bytes,
    h: BatchHeader,
    make: MessageFactory[T],
    topic: str,
    partition: int,
    out: list[T],
    *,
    check_crc: bool = True,
    max_bytes: int | None = None,
) -> None:
    """Decode the batch ``h`` (parsed from ``buf`` at ``h.position``) into ``out`` like
    :func:`decode_section_into`: CRC check (optional), decompression capped at ``max_bytes`` (default
    ``compression.DEFAULT_MAX_DECOMPRESSED_BYTES``)."""
    pos = h.position
    size = h.batch_length + 12
    if check_crc and compute_crc(buf, pos, size) != h.crc:
        raise CorruptRecordError(
            f"record batch at position {pos} (base offset {h.base_offset}) fails its CRC32C"
        )
    codec = h.attributes & ATTR_COMPRESSION_MASK
    if codec == 0:
        data = buf[pos + BATCH_HEADER_SIZE : pos + size]
    else:
        if max_bytes is None:
            max_bytes = _compression.DEFAULT_MAX_DECOMPRESSED_BYTES
        data = _compression.decompress(codec, memoryview(buf)[pos + BATCH_HEADER_SIZE : pos + size], max_bytes)
    decode_section_into(data, h, make, topic, partition, out)


def keyless_records(data: bytes, h: BatchHeader) -> list[int]:
    """Indexes within the batch ``h`` of the records whose key is null, from its uncompressed records section
    ``data``. Reads each record's length prefix, timestamp/offset delta widths and key and value sizes, no
    bytes of keys, values or headers; after a record without headers the records of the very same layout that
    follow (see :func:`_run_length`) are taken as one run, null-keyed or not as a whole. Raises
    CorruptRecordError when the section does not hold ``h.records_count`` records of consistent lengths."""
    n = len(data)
    count = h.records_count
    if count > n // 6:  # every record takes at least 6 bytes after its length prefix
        raise CorruptRecordError(
            f"record batch at base offset {h.base_offset} declares {count} records in {n} bytes of records"
        )
    out: list[int] = []
    slow = _slow_varint
    z1 = _Z1
    p = 0
    i = 0
    next_try = 0
    window = _FIRST_WINDOW
    try:
        while i < count:
            start = p
            b = data[p]
            if b < 0x80:
                length = z1[b]
                p += 1
            else:
                length, p = slow(data, p)
            end = p + length
            if length < 6 or end > n:
                raise CorruptRecordError(
                    f"record at byte {p} of the records section has invalid length {length} ({n - p} remain)"
                )
            ts_at = p = p + 1  # attributes (unused in v2)
            while data[p] >= 0x80:  # timestampDelta, offsetDelta: widths only
                p += 1
            od_at = p = p + 1
            while data[p] >= 0x80:
                p += 1
            kl_at = p = p + 1
            b = data[p]
            if b < 0x80:
                klen = z1[b]
                p += 1
            else:
                klen, p = slow(data, p)
            if klen < 0:
                out.append(i)
            elif p + klen > end:
                raise CorruptRecordError(f"record key of {klen} bytes overruns its record at byte {p}")
            else:
                p += klen
            vl_at = p
            b = data[p]
            if b < 0x80:
                vlen = z1[b]
                p += 1
            else:
                vlen, p = slow(data, p)
            if vlen > 0:
                p += vlen
            i += 1
            if p >= end:
                raise CorruptRecordError(f"record ending at byte {end} of the records section has no header count")
            no_headers = p + 1 == end and data[p] == 0
            p = end
            if not no_headers or i < next_try or i == count:
                continue
            size = end - start
            layout = _Layout(size, start, ts_at, od_at, kl_at, vl_at - kl_at - max(klen, 0), klen, vl_at,
                             end - 1 - vl_at - max(vlen, 0), vlen)
            k_max = min(count - i, (n - end) // size, window)
            k = _run_length(data, end, k_max, layout)
            if k < _MIN_RUN:
                next_try = i + _RETRY_AFTER
                window = _FIRST_WINDOW
                continue
            if klen < 0:
                out.extend(range(i, i + k))
            p = end + k * size
            i += k
            if k == k_max:
                window = min(window * 2, _MAX_WINDOW)
    except IndexError:
        raise CorruptRecordError(
            f"records section of batch at base offset {h.base_offset} is truncated at byte {p} of {n}"
        ) from None
    if p != n:
        raise CorruptRecordError(
            f"batch at base offset {h.base_offset} has {n - p} bytes left after its {count} declared records"
        )
    return out


def keyless_records_in(buf: bytes | bytearray | memoryview, h: BatchHeader, *, max_bytes: int | None = None) -> list[int]:
    """:func:`keyless_records` of the batch ``h`` parsed from ``buf`` at ``h.position``, decompressed first if
    needed (capped at ``max_bytes``, default ``compression.DEFAULT_MAX_DECOMPRESSED_BYTES``). The CRC is the
    caller's (validate_batches checked it)."""
    pos = h.position
    size = h.batch_length + 12
    section = memoryview(buf)[pos + BATCH_HEADER_SIZE : pos + size]
    codec = h.attributes & ATTR_COMPRESSION_MASK
    if codec == 0:
        data = bytes(section)
    else:
        data = _compression.decompress(codec, section, max_bytes or _compression.DEFAULT_MAX_DECOMPRESSED_BYTES)
    return keyless_records(data, h)
