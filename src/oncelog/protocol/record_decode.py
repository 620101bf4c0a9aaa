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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

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

__all__ = ["MessageFactory", "decode_batch_into", "decode_section_into"]

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


def decode_section_into(
    data: bytes,
    h: BatchHeader,
    make: MessageFactory[T],
    topic: str,
    partition: int,
    out: list[T],
) -> None:
    """Append to ``out`` one ``make(...)`` per record of the uncompressed records section ``data`` of the
    batch ``h``: absolute offset, timestamp (maxTimestamp for LOG_APPEND_TIME batches), key, value, headers."""
    n = len(data)
    count = h.records_count
    base_offset = h.base_offset
    if count > n // 6:  # every record takes at least 6 bytes after its length prefix
        raise CorruptRecordError(
            f"record batch at base offset {base_offset} declares {count} records in {n} bytes of records"
        )
    base_ts = h.base_timestamp
    log_append_ts = h.max_timestamp if h.attributes & ATTR_TIMESTAMP_TYPE else None
    append = out.append
    slow = _slow_varint
    z1 = _Z1
    z2 = _Z2
    p = 0
    try:
        for _ in range(count):
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
            b = data[p + 1]
            if b < 0x80:
                ts_delta = z1[b]
                p += 2
            else:
                c = data[p + 2]
                if c < 0x80:
                    ts_delta = z2[b | c << 8]
                    p += 3
                else:
                    ts_delta, p = slow(data, p + 1)
            # offsetDelta
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
            b = data[p]
            if b == 1:  # -1: null, the common case
                key = None
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
                headers: list[tuple[str, bytes | None]] = []
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
    except IndexError:
        raise CorruptRecordError(
            f"records section of batch at base offset {base_offset} is truncated at byte {p} of {n}"
        ) from None
    if p != n:
        raise CorruptRecordError(
            f"batch at base offset {base_offset} has {n - p} bytes left after its {count} declared records"
        )


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

