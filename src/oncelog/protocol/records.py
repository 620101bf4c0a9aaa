"""The records of a v2 record batch: decoding, building, and control (transaction marker) records.

Each record (Kafka's DefaultRecord), optionally compressed as a whole section after the batch header:

    length varint | attributes int8 (unused) | timestampDelta varlong | offsetDelta varint |
    keyLength varint (-1 = null) | key | valueLength varint (-1 = null) | value |
    headerCount varint | [headerKeyLength varint | utf-8 key | headerValueLength varint (-1 = null) | value]*

``Record`` and ``decode_records`` read them, ``RecordBatchBuilder`` writes a batch (Kafka's MemoryRecordsBuilder),
``build_empty_batch`` a batch without records (Kafka's DefaultRecordBatch.writeEmptyHeader), ``build_control_batch``
and ``parse_control_record`` write and read transaction markers (EndTransactionMarker).
The batch header (layout, parsing, validation, in-place offset assignment) is :mod:`.record_batch`; this module
re-exports its names, so ``oncelog.protocol.records`` is the one import for record batches.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import crc32c as _crc32c

from oncelog.protocol import compression as _compression
from oncelog.protocol import varint as _varint
from oncelog.protocol.record_encode import SMALL_LIMIT, SMALL_VARLONGS, encode_keyless, one_record_batch
from oncelog.protocol.record_batch import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_SIZE,
    CRC_OFFSET,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    BatchHeader,
    Compression,
    CorruptRecordError,
    InvalidRecordError,
    TimestampType,
    UnsupportedMagicError,
    compute_crc,
    iter_batch_headers,
    parse_batch_header,
    set_base_offset,
    set_max_timestamp_log_append,
    set_partition_leader_epoch,
    validate_batches,
)

__all__ = [
    "ATTRIBUTES_OFFSET",
    "ATTR_COMPRESSION_MASK",
    "ATTR_CONTROL",
    "ATTR_DELETE_HORIZON",
    "ATTR_TIMESTAMP_TYPE",
    "ATTR_TRANSACTIONAL",
    "BATCH_HEADER_SIZE",
    "CRC_OFFSET",
    "LOG_OVERHEAD",
    "MAGIC_OFFSET",
    "MAGIC_V2",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "BatchHeader",
    "Compression",
    "ControlRecord",
    "ControlRecordType",
    "CorruptRecordError",
    "InvalidRecordError",
    "Record",
    "RecordBatchBuilder",
    "TimestampType",
    "UnsupportedMagicError",
    "build_control_batch",
    "control_batch",
    "build_empty_batch",
    "compute_crc",
    "decode_records",
    "iter_batch_headers",
    "parse_batch_header",
    "parse_control_record",
    "set_base_offset",
    "set_max_timestamp_log_append",
    "set_partition_leader_epoch",
    "validate_batches",
]


_INT32_MAX = 0x7FFFFFFF
_ATTR_CODEC_LIMIT = Compression.ZSTD


@dataclass(slots=True)
class Record:
    """One decoded record with absolute offset and timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    sequence: int = NO_SEQUENCE  # producer sequence of this record, -1 if the batch has none


class ControlRecordType:
    """Control record key types (Kafka's ControlRecordType). Only ABORT/COMMIT are transaction markers."""

    ABORT = 0
    COMMIT = 1
    CURRENT_KEY_VERSION = 0
    CURRENT_END_TXN_MARKER_VERSION = 0


@dataclass(slots=True)
class ControlRecord:
    """A parsed control record. ``is_known`` is False for types other than ABORT/COMMIT (then
    ``commit`` is False and ``coordinator_epoch`` is -1: callers should ignore the record, as Kafka does)."""

    commit: bool
    coordinator_epoch: int
    type: int = ControlRecordType.ABORT
    version: int = 0
    is_known: bool = True


def _slow_varint(data: bytes, p: int) -> tuple[int, int]:
    """Zigzag varint at ``p`` of up to 10 bytes (so also varlongs); callers inline the 1-2 byte cases."""
    result = 0
    shift = 0
    n = len(data)
    while shift < 70:
        if p >= n:
            raise CorruptRecordError(f"varint truncated at byte {p} of the records section")
        b = data[p]
        p += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            value = (result >> 1) ^ -(result & 1)
            if not -(1 << 63) <= value < (1 << 63):
                raise CorruptRecordError(f"varint before byte {p} of the records section overflows int64")
            return value, p
        shift += 7
    raise CorruptRecordError(f"varint longer than 10 bytes before byte {p} of the records section")


def _decode_section(data: bytes, h: BatchHeader) -> list[Record]:
    """Decode ``h.records_count`` records from an uncompressed records section."""
    n = len(data)
    count = h.records_count
    if count > n // 6:  # every record takes at least 6 bytes after its length prefix
        raise CorruptRecordError(
            f"record batch at base offset {h.base_offset} declares {count} records in {n} bytes of records"
        )
    base_offset = h.base_offset
    base_ts = h.base_timestamp
    log_append_ts = h.max_timestamp if h.attributes & ATTR_TIMESTAMP_TYPE else None
    base_seq = h.base_sequence
    out: list[Record] = []
    append = out.append
    slow = _slow_varint
    p = 0
    try:
        for _ in range(count):
            b = data[p]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                p += 1
            elif data[p + 1] < 0x80:
                z = (b & 0x7F) | (data[p + 1] << 7)
                length = (z >> 1) ^ -(z & 1)
                p += 2
            else:
                length, p = slow(data, p)
            end = p + length
            if length < 6 or end > n:
                raise CorruptRecordError(
                    f"record at byte {p} of the records section has invalid length {length} ({n - p} remain)"
                )
            p += 1  # record attributes: unused in v2
            b = data[p]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                p += 1
            elif data[p + 1] < 0x80:
                z = (b & 0x7F) | (data[p + 1] << 7)
                ts_delta = (z >> 1) ^ -(z & 1)
                p += 2
            else:
                ts_delta, p = slow(data, p)
            b = data[p]
            if b < 0x80:
                off_delta = (b >> 1) ^ -(b & 1)
                p += 1
            elif data[p + 1] < 0x80:
                z = (b & 0x7F) | (data[p + 1] << 7)
                off_delta = (z >> 1) ^ -(z & 1)
                p += 2
            else:
                off_delta, p = slow(data, p)
            b = data[p]
            if b < 0x80:
                klen = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                klen, p = slow(data, p)
            if klen < 0:
                key = None
            else:
                if p + klen > end:
                    raise CorruptRecordError(f"record key of {klen} bytes overruns its record at byte {p}")
                key = data[p : p + klen]
                p += klen
            b = data[p]
            if b < 0x80:
                vlen = (b >> 1) ^ -(b & 1)
                p += 1
            elif data[p + 1] < 0x80:
                z = (b & 0x7F) | (data[p + 1] << 7)
                vlen = (z >> 1) ^ -(z & 1)
                p += 2
            else:
                vlen, p = slow(data, p)
            if vlen < 0:
                value = None
            else:
                if p + vlen > end:
                    raise CorruptRecordError(f"record value of {vlen} bytes overruns its record at byte {p}")
                value = data[p : p + vlen]
                p += vlen
            b = data[p]
            if b == 0:
                headers: list[tuple[str, bytes | None]] = []
                p += 1
            else:
                headers, p = _decode_headers(data, p, end)
            if p != end:
                raise CorruptRecordError(
                    f"record ending at byte {end} of the records section was read to byte {p}: "
                    "its length prefix does not match its fields"
                )
            if base_seq < 0:
                seq = NO_SEQUENCE
            else:
                seq = (base_seq + off_delta) & _INT32_MAX
            append(
                Record(
                    base_offset + off_delta,
                    base_ts + ts_delta if log_append_ts is None else log_append_ts,
                    key,
                    value,
                    headers,
                    seq,
                )
            )
    except IndexError:
        raise CorruptRecordError(
            f"records section of batch at base offset {base_offset} is truncated at byte {p} of {n}"
        ) from None
    if p != n:
        raise CorruptRecordError(
            f"batch at base offset {base_offset} has {n - p} bytes left after its {count} declared records"
        )
    return out


def _decode_headers(data: bytes, p: int, end: int) -> tuple[list[tuple[str, bytes | None]], int]:
    hcount, p = _slow_varint(data, p)
    if hcount < 0 or hcount > end - p:
        raise CorruptRecordError(f"invalid record header count {hcount} at byte {p}")
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(hcount):
        hklen, p = _slow_varint(data, p)
        if hklen < 0 or p + hklen > end:
            raise CorruptRecordError(f"invalid record header key size {hklen} at byte {p}")
        # Java decodes with replacement characters for malformed UTF-8; do the same
        hkey = data[p : p + hklen].decode("utf-8", "replace")
        p += hklen
        hvlen, p = _slow_varint(data, p)
        hval: bytes | None
        if hvlen < 0:
            hval = None
        else:
            if p + hvlen > end:
                raise CorruptRecordError(
                    f"record header value of {hvlen} bytes overruns its record at byte {p}"
                )
            hval = data[p : p + hvlen]
            p += hvlen
        headers.append((hkey, hval))
    return headers, p


def decode_records(
    batch: bytes | bytearray | memoryview,
    pos: int = 0,
    *,
    check_crc: bool = True,
    max_bytes: int | None = None,
) -> list[Record]:
    """Decode every record of the v2 batch at ``pos`` (bytes after that batch are ignored).

    Decompresses the records section (capped at ``max_bytes``, default
    ``compression.DEFAULT_MAX_DECOMPRESSED_BYTES``), resolves absolute offsets (baseOffset + offsetDelta)
    and timestamps (baseTimestamp + delta, or maxTimestamp for LOG_APPEND_TIME batches).
    Raises CorruptRecordError / UnsupportedMagicError on any malformed input.
    """
    h = parse_batch_header(batch, pos)
    size = h.size
    if check_crc and compute_crc(batch, pos, size) != h.crc:
        raise CorruptRecordError(
            f"record batch at position {pos} (base offset {h.base_offset}) fails its CRC32C"
        )
    codec = h.attributes & ATTR_COMPRESSION_MASK
    section = memoryview(batch)[pos + BATCH_HEADER_SIZE : pos + size]
    if codec == 0:
        data = bytes(section)
    else:
        if max_bytes is None:
            max_bytes = _compression.DEFAULT_MAX_DECOMPRESSED_BYTES
        data = _compression.decompress(codec, section, max_bytes)
    return _decode_section(data, h)


_COMMIT_KEY = struct.pack(">hh", ControlRecordType.CURRENT_KEY_VERSION, ControlRecordType.COMMIT)
_ABORT_KEY = struct.pack(">hh", ControlRecordType.CURRENT_KEY_VERSION, ControlRecordType.ABORT)


class RecordBatchBuilder:
    """Builds one v2 record batch (Kafka's MemoryRecordsBuilder). ``append`` records, then ``build()`` the bytes
    (CRC32C included).

    baseTimestamp is the first record's timestamp, or the KIP-534 delete horizon when ``delete_horizon_ms`` is
    given (the batch then carries the delete-horizon attribute), and maxTimestamp the largest record timestamp
    (for LOG_APPEND_TIME batches the broker later stamps maxTimestamp with ``set_max_timestamp_log_append``).
    ``append`` gives records consecutive offsets, or keeps given ones (``offset=``: a rewrite of a batch that lost
    records, as the log cleaner does; Kafka's appendWithOffset), and ``override_last_offset`` keeps the original
    batch's last offset (so its sequence range) when its last records are gone.
    """

    __slots__ = (
        "_attributes",
        "_base_offset",
        "_base_sequence",
        "_base_ts",
        "_buf",
        "_compression",
        "_count",
        "_delete_horizon",
        "_last_offset_delta",
        "_max_ts",
        "_next_delta",
        "_partition_leader_epoch",
        "_producer_epoch",
        "_producer_id",
    )

    def __init__(
        self,
        compression: int = 0,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        base_sequence: int = NO_SEQUENCE,
        is_transactional: bool = False,
        is_control: bool = False,
        base_offset: int = 0,
        partition_leader_epoch: int = -1,
        timestamp_type: int = TimestampType.CREATE_TIME,
        delete_horizon_ms: int | None = None,
    ) -> None:
        if not 0 <= compression <= _ATTR_CODEC_LIMIT:
            raise ValueError(f"unknown compression codec id {compression}; use a Compression constant (0-4)")
        if timestamp_type not in (TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME):
            raise ValueError(
                f"unknown timestamp type {timestamp_type}; use TimestampType.CREATE_TIME/LOG_APPEND_TIME"
            )
        self._buf = bytearray(BATCH_HEADER_SIZE)  # header placeholder, records follow uncompressed
        self._count = 0
        self._next_delta = 0
        self._last_offset_delta = -1  # override_last_offset; -1: the last record's
        self._delete_horizon = delete_horizon_ms
        self._base_ts = 0 if delete_horizon_ms is None else delete_horizon_ms
        self._max_ts = -1
        self._compression = compression
        self._attributes = (
            compression
            | (ATTR_TIMESTAMP_TYPE if timestamp_type else 0)
            | (ATTR_TRANSACTIONAL if is_transactional else 0)
            | (ATTR_CONTROL if is_control else 0)
            | (ATTR_DELETE_HORIZON if delete_horizon_ms is not None else 0)
        )
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence
        self._base_offset = base_offset
        self._partition_leader_epoch = partition_leader_epoch

    @property
    def num_records(self) -> int:
        return self._count

    @property
    def size_in_bytes(self) -> int:
        """Current batch size if built uncompressed: an upper-bound estimate for compressed batches."""
        return len(self._buf)

    def append(
        self,
        timestamp_ms: int,
        key: bytes | bytearray | memoryview | None,
        value: bytes | bytearray | memoryview | None,
        headers: Sequence[tuple[str, bytes | bytearray | memoryview | None]] = (),
        *,
        offset: int | None = None,
    ) -> int:
        """Append one record, at the next offset or at absolute ``offset`` (above every offset appended so far;
        gaps allowed). Returns its offset delta within the batch."""
        if offset is None:
            delta = self._next_delta
            if delta >= _INT32_MAX:
                raise OverflowError("a record batch holds at most 2**31 - 1 records")
        else:
            delta = offset - self._base_offset
            if delta < self._next_delta or delta > _INT32_MAX:
                raise ValueError(
                    f"offset {offset} does not follow offset {self._base_offset + self._next_delta - 1} in a "
                    f"batch with base offset {self._base_offset}"
                )
        if not self._count and self._delete_horizon is None:  # the first record's timestamp is the base
            self._base_ts = timestamp_ms
        if timestamp_ms > self._max_ts:  # noqa: PLR1730  (faster than max())
            self._max_ts = timestamp_ms
        enc = _enc_varlong
        ts_part = enc(timestamp_ms - self._base_ts)
        off_part = enc(delta)
        if key is None:
            key_len = _NULL_LEN
            key = b""
        else:
            key_len = enc(len(key))
        if value is None:
            value_len = _NULL_LEN
            value = b""
        else:
            value_len = enc(len(value))
        hdr = _encode_headers(headers) if headers else b"\x00"
        body_len = (
            1
            + len(ts_part)
            + len(off_part)
            + len(key_len)
            + len(key)
            + len(value_len)
            + len(value)
            + len(hdr)
        )
        buf = self._buf
        buf += enc(body_len)
        buf += b"\x00"
        buf += ts_part
        buf += off_part
        buf += key_len
        buf += key
        buf += value_len
        buf += value
        buf += hdr
        self._count += 1
        self._next_delta = delta + 1
        return delta

    def extend(
        self,
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        timestamps: Sequence[int],
        headers: Mapping[int, Sequence[tuple[str, bytes | None]]] | None = None,
    ) -> None:
        """Append records given as columns (``headers``: a record's index -> its headers, for those that have any)
        at the next offsets: the bytes :meth:`append` writes one by one, encoded in one loop (the producer queues
        records so and encodes a batch when it is sent)."""
        n_records = len(values)
        if len(keys) != n_records or len(timestamps) != n_records:
            raise ValueError("keys, values and timestamps must be of the same length")
        if not n_records:
            return
        start = delta = self._next_delta
        if delta + n_records > _INT32_MAX:
            raise OverflowError("a record batch holds at most 2**31 - 1 records")
        if not self._count and self._delete_horizon is None:
            self._base_ts = timestamps[0]
        base_ts = self._base_ts
        fast = None if headers else encode_keyless(keys, values, timestamps, base_ts, start)
        if fast is not None:  # the common records, in C-level loops (same bytes)
            self._buf += fast
            self._max_ts = max(self._max_ts, max(timestamps))
            self._count += n_records
            self._next_delta = start + n_records
            return
        max_ts = self._max_ts
        table, lim, enc = _SMALL_VARLONGS, _SMALL_LIMIT, _enc_varlong
        parts: list[bytes] = []
        add = parts.extend
        for key, value, ts in zip(keys, values, timestamps):
            if ts > max_ts:  # noqa: PLR1730  (faster than max())
                max_ts = ts
            d = ts - base_ts
            ts_part = table[d + lim] if -lim <= d < lim else enc(d)
            off_part = table[delta + lim] if delta < lim else enc(delta)
            hs = headers.get(delta - start) if headers else None
            delta += 1
            if key is None and value is not None and not hs:  # the common record: keyless, no headers
                n = len(value)
                value_len = table[n + lim] if n < lim else enc(n)
                n += 3 + len(ts_part) + len(off_part) + len(value_len)
                add((table[n + lim] if n < lim else enc(n), b"\x00", ts_part, off_part, b"\x01", value_len, value,
                     b"\x00"))
                continue
            if key is None:
                key_len = _NULL_LEN
                key = b""
            else:
                n = len(key)
                key_len = table[n + lim] if n < lim else enc(n)
            if value is None:
                value_len = _NULL_LEN
                value = b""
            else:
                n = len(value)
                value_len = table[n + lim] if n < lim else enc(n)
            hdr = _encode_headers(hs) if hs else b"\x00"
            n = 1 + len(ts_part) + len(off_part) + len(key_len) + len(key) + len(value_len) + len(value) + len(hdr)
            add((table[n + lim] if n < lim else enc(n), b"\x00", ts_part, off_part, key_len, key, value_len, value,
                 hdr))
        self._buf += b"".join(parts)
        self._max_ts = max_ts
        self._count += n_records
        self._next_delta = delta

    def override_last_offset(self, last_offset: int) -> None:
        """Make ``last_offset`` the batch's last offset (lastOffsetDelta) even if no record carries it."""
        delta = last_offset - self._base_offset
        if delta < self._next_delta - 1 or delta > _INT32_MAX:
            raise ValueError(f"last offset {last_offset} is below an appended record's offset or out of range")
        self._last_offset_delta = delta

    def build(self) -> bytes:
        """Return the finished batch. May be called again after more appends."""
        count = self._count
        if count == 0:
            raise ValueError("cannot build a record batch without records; see build_empty_batch")
        buf = self._buf
        if self._compression:
            out = bytearray(BATCH_HEADER_SIZE)
            out += _compression.compress(self._compression, memoryview(buf)[BATCH_HEADER_SIZE:])
        else:
            out = buf
        last_delta = self._last_offset_delta
        HEADER_STRUCT.pack_into(
            out,
            0,
            self._base_offset,
            len(out) - LOG_OVERHEAD,
            self._partition_leader_epoch,
            MAGIC_V2,
            0,
            self._attributes,
            last_delta if last_delta >= self._next_delta - 1 else self._next_delta - 1,
            self._base_ts,
            self._max_ts,
            self._producer_id,
            self._producer_epoch,
            self._base_sequence,
            count,
        )
        _U32.pack_into(out, CRC_OFFSET, int(_crc32c.crc32c(memoryview(out)[ATTRIBUTES_OFFSET:])))
        return bytes(out)


def build_empty_batch(
    *,
    base_offset: int,
    last_offset: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    partition_leader_epoch: int = -1,
    timestamp_type: int = TimestampType.CREATE_TIME,
    is_transactional: bool = False,
    is_control: bool = False,
) -> bytes:
    """A batch header without records (Kafka's DefaultRecordBatch.writeEmptyHeader): it keeps a producer's
    offsets, sequence range and epoch in the log when every record of its last batch was compacted away.
    baseTimestamp is -1, no compression."""
    out = bytearray(BATCH_HEADER_SIZE)
    attributes = (
        (ATTR_TIMESTAMP_TYPE if timestamp_type else 0)
        | (ATTR_TRANSACTIONAL if is_transactional else 0)
        | (ATTR_CONTROL if is_control else 0)
    )
    HEADER_STRUCT.pack_into(out, 0, base_offset, BATCH_HEADER_SIZE - LOG_OVERHEAD, partition_leader_epoch, MAGIC_V2, 0,
                      attributes, last_offset - base_offset, -1, max_timestamp, producer_id, producer_epoch,
                      base_sequence, 0)
    _U32.pack_into(out, CRC_OFFSET, int(_crc32c.crc32c(memoryview(out)[ATTRIBUTES_OFFSET:])))
    return bytes(out)


def _encode_headers(headers: Sequence[tuple[str, bytes | bytearray | memoryview | None]]) -> bytes:
    enc = _enc_varlong
    parts = [enc(len(headers))]
    for hkey, hval in headers:
        kb = hkey.encode("utf-8")
        parts.append(enc(len(kb)))
        parts.append(kb)
        if hval is None:
            parts.append(_NULL_LEN)
        else:
            parts.append(enc(len(hval)))
            parts.append(bytes(hval))
    return b"".join(parts)


def build_control_batch(
    *,
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
    timestamp_ms: int,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A transaction marker batch exactly as Kafka's MemoryRecords.withEndTransactionMarker writes it.

    Transactional + control attributes, no compression, CREATE_TIME, no base sequence, and one record:
    key = int16 version 0 + int16 type (0 ABORT, 1 COMMIT), value = int16 version 0 + int32 coordinatorEpoch.
    """
    return bytes(control_batch(producer_id, producer_epoch, commit, coordinator_epoch, timestamp_ms, base_offset,
                               partition_leader_epoch)[0])


def control_batch(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, timestamp_ms: int,
                  base_offset: int = 0, partition_leader_epoch: int = -1) -> tuple[bytearray, BatchHeader]:
    """:func:`build_control_batch`'s batch and its header (no parse needed to append it)."""
    value = struct.pack(">hi", ControlRecordType.CURRENT_END_TXN_MARKER_VERSION, coordinator_epoch)
    return one_record_batch(timestamp_ms, _COMMIT_KEY if commit else _ABORT_KEY, value, producer_id=producer_id,
                            producer_epoch=producer_epoch, is_transactional=True, is_control=True,
                            base_offset=base_offset, partition_leader_epoch=partition_leader_epoch)


def parse_control_record(batch: bytes | bytearray | memoryview, pos: int = 0) -> ControlRecord:
    """Parse the control record of the control batch at ``pos`` (Kafka's ControlRecordType.parse and
    EndTransactionMarker.deserialize). Unknown types give ``is_known=False`` instead of an error."""
    h = parse_batch_header(batch, pos)
    if not h.is_control:
        raise InvalidRecordError(
            f"record batch at position {pos} is not a control batch (attributes {h.attributes:#x})"
        )
    records = decode_records(batch, pos)
    if not records:
        raise InvalidRecordError(f"control batch at position {pos} has no record")
    key = records[0].key
    if key is None or len(key) < 4:
        raise InvalidRecordError(
            f"control record key must be at least 4 bytes (int16 version, int16 type), got "
            f"{'null' if key is None else len(key)}"
        )
    version, record_type = struct.unpack_from(">hh", key)
    if version < 0:
        raise InvalidRecordError(f"control record key has negative version {version}")
    if record_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        return ControlRecord(False, -1, record_type, version, False)
    value = records[0].value
    if value is None or len(value) < 6:
        raise InvalidRecordError(
            "transaction marker value must be at least 6 bytes (int16 version, int32 coordinatorEpoch), got "
            f"{'null' if value is None else len(value)}"
        )
    marker_version, coordinator_epoch = struct.unpack_from(">hi", value)
    if marker_version < 0:
        raise InvalidRecordError(f"transaction marker value has negative version {marker_version}")
    return ControlRecord(
        record_type == ControlRecordType.COMMIT, coordinator_epoch, record_type, version, True
    )


_U32 = struct.Struct(">I")
_NULL_LEN = b"\x01"  # zigzag varint of -1
_enc_varlong = _varint.encode_varlong
#: zigzag varints of [-_SMALL_LIMIT, _SMALL_LIMIT), indexed by value + _SMALL_LIMIT (RecordBatchBuilder.extend)
_SMALL_VARLONGS, _SMALL_LIMIT = SMALL_VARLONGS, SMALL_LIMIT
