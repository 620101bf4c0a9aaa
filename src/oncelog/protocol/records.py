"""Record batch v2 (magic 2): header parsing, validation and in-place offset assignment.

Works on whole batches as bytes; individual records are never decoded here. The layout (all big-endian):

    offset  size  field
    0       8     baseOffset
    8       4     batchLength            (bytes after this field)
    12      4     partitionLeaderEpoch
    16      1     magic                  (2)
    17      4     crc                    (CRC32C of bytes 21..end)
    21      2     attributes
    23      4     lastOffsetDelta
    27      8     baseTimestamp
    35      8     maxTimestamp
    43      8     producerId
    51      2     producerEpoch
    53      4     baseSequence
    57      4     recordsCount
    61      ...   records

baseOffset, batchLength and partitionLeaderEpoch are outside the CRC, so a broker assigns offsets by rewriting
baseOffset in place without re-computing the checksum.

Each record (DefaultRecord.java), optionally compressed as a whole section after the header:

    length varint | attributes int8 (unused) | timestampDelta varlong | offsetDelta varint |
    keyLength varint (-1 = null) | key | valueLength varint (-1 = null) | value |
    headerCount varint | [headerKeyLength varint | utf-8 key | headerValueLength varint (-1 = null) | value]*

The second half of this module decodes and builds records: ``Record``, ``decode_records``,
``RecordBatchBuilder``, ``build_control_batch`` and ``parse_control_record``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar

import crc32c as _crc32c

from oncelog.protocol import varint as _varint

__all__ = [
    "BATCH_HEADER_SIZE",
    "LOG_OVERHEAD",
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

LOG_OVERHEAD = 12  # baseOffset + batchLength
BATCH_HEADER_SIZE = 61
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAGIC_V2 = 2

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_Q = struct.Struct(">q")
_I = struct.Struct(">i")
_H = struct.Struct(">h")

ATTR_COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40


class Compression:
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4
    NAMES: ClassVar[dict[int, str]] = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
    BY_NAME: ClassVar[dict[str, int]] = {v: k for k, v in NAMES.items()}


class TimestampType:
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class CorruptRecordError(ValueError):
    """A batch is malformed (bad size, bad CRC, truncated). Maps to Kafka's CORRUPT_MESSAGE (2)."""


class InvalidRecordError(CorruptRecordError):
    """A well-formed batch breaks a broker rule (control batch from a client, count mismatch, ...).

    Maps to Kafka's INVALID_RECORD (87); subclasses CorruptRecordError so generic handlers still catch it.
    """


class UnsupportedMagicError(ValueError):
    """A batch uses message format v0/v1. Maps to UNSUPPORTED_FOR_MESSAGE_FORMAT (43)."""


@dataclass(slots=True)
class BatchHeader:
    """The fixed 61-byte header of a v2 record batch, plus where it sits in its buffer."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    position: int = 0  # byte position of the batch in the buffer it was parsed from

    @property
    def size(self) -> int:
        """Total size in bytes, including the 12-byte log overhead."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return (
            TimestampType.LOG_APPEND_TIME
            if self.attributes & ATTR_TIMESTAMP_TYPE
            else TimestampType.CREATE_TIME
        )

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record; wraps at int32 max as Kafka's DefaultRecordBatch.incrementSequence."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


def parse_batch_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the header at ``pos``. Checks sizes and magic, not the CRC."""
    if len(buf) - pos < LOG_OVERHEAD + 5:
        raise CorruptRecordError(f"record batch truncated: {len(buf) - pos} bytes at position {pos}")
    batch_length = _I.unpack_from(buf, pos + 8)[0]
    magic = buf[pos + MAGIC_OFFSET]
    if magic != MAGIC_V2:
        if magic in (0, 1):
            raise UnsupportedMagicError(
                f"message format v{magic} is not supported; producers must use record batch v2 (Kafka >= 0.11)"
            )
        raise CorruptRecordError(f"unknown record batch magic {magic} at position {pos}")
    if batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(f"record batch length {batch_length} is smaller than the v2 header")
    if len(buf) - pos < batch_length + LOG_OVERHEAD:
        raise CorruptRecordError(
            f"record batch truncated: header says {batch_length + LOG_OVERHEAD} bytes, "
            f"{len(buf) - pos} available at position {pos}"
        )
    h = BatchHeader(*_HEADER.unpack_from(buf, pos))
    h.position = pos
    if h.last_offset_delta < 0 or h.records_count < 0:
        raise CorruptRecordError(
            f"record batch has negative lastOffsetDelta {h.last_offset_delta} or count {h.records_count}"
        )
    return h


def compute_crc(buf: bytes | bytearray | memoryview, pos: int, size: int) -> int:
    """CRC32C over attributes..end of the batch at ``pos`` whose total size is ``size``."""
    mv = memoryview(buf)
    return int(_crc32c.crc32c(mv[pos + ATTRIBUTES_OFFSET : pos + size]))


def iter_batch_headers(
    buf: bytes | bytearray | memoryview, *, check_crc: bool = False
) -> Iterator[BatchHeader]:
    """Yield the header of every batch in ``buf``; raises CorruptRecordError on any malformed batch."""
    pos = 0
    end = len(buf)
    while pos < end:
        h = parse_batch_header(buf, pos)
        if check_crc and compute_crc(buf, pos, h.size) != h.crc:
            raise CorruptRecordError(
                f"record batch at position {pos} (base offset {h.base_offset}) fails its CRC32C"
            )
        yield h
        pos += h.size


def validate_batches(buf: bytes | bytearray | memoryview, *, from_client: bool = True) -> list[BatchHeader]:
    """Validate a produce payload: at least one batch, all v2, sizes consistent, CRCs correct, known codec.

    With ``from_client`` (the default: a Produce request) also applies the client-origin rules of Kafka's
    LogValidator.validateBatch: a positive record count equal to lastOffsetDelta + 1, no control batches,
    and a base sequence whenever a producer id is set. Pass ``from_client=False`` for batches the broker wrote
    itself (transaction markers, replication), like Kafka's AppendOrigin.COORDINATOR/REPLICATION.

    Raises CorruptRecordError (InvalidRecordError for rule violations) / UnsupportedMagicError.
    Returns the parsed headers in order.
    """
    headers = list(iter_batch_headers(buf, check_crc=True))
    if not headers:
        raise CorruptRecordError("produce request carries no record batch")
    for h in headers:
        where = f"record batch at position {h.position} (base offset {h.base_offset})"
        if h.compression > Compression.ZSTD:
            raise CorruptRecordError(
                f"{where} uses unknown compression codec id {h.compression}; valid ids are 0-4"
            )
        if not from_client:
            continue
        if h.records_count <= 0:
            raise InvalidRecordError(f"{where}: invalid record count {h.records_count}")
        if h.records_count != h.last_offset_delta + 1:
            raise InvalidRecordError(
                f"{where} declares {h.records_count} records but lastOffsetDelta {h.last_offset_delta}; "
                "they must satisfy count == lastOffsetDelta + 1"
            )
        if h.is_control:
            raise InvalidRecordError(f"{where}: clients are not allowed to write control records")
        if h.has_producer_id and h.base_sequence < 0:
            raise InvalidRecordError(
                f"{where}: invalid base sequence {h.base_sequence} for producer id {h.producer_id}"
            )
    return headers


def set_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Rewrite baseOffset of the batch at ``pos`` in place (outside the CRC)."""
    _Q.pack_into(buf, pos, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    _I.pack_into(buf, pos + 12, epoch)


def set_max_timestamp_log_append(buf: bytearray | memoryview, pos: int, size: int, timestamp: int) -> None:
    """Turn the batch into a LOG_APPEND_TIME batch stamped with ``timestamp`` and recompute its CRC."""
    attrs = _H.unpack_from(buf, pos + ATTRIBUTES_OFFSET)[0] | ATTR_TIMESTAMP_TYPE
    _H.pack_into(buf, pos + ATTRIBUTES_OFFSET, attrs)
    _Q.pack_into(buf, pos + 35, timestamp)
    struct.pack_into(">I", buf, pos + CRC_OFFSET, compute_crc(buf, pos, size))


# ---------------------------------------------------------------------------------------------------------------
# Records: decoding, building, control (transaction marker) batches
# ---------------------------------------------------------------------------------------------------------------

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


def _control_key(record_type: int) -> bytes:
    return struct.pack(">hh", ControlRecordType.CURRENT_KEY_VERSION, record_type)


class RecordBatchBuilder:
    """Builds one v2 record batch. ``append`` records, then ``build()`` the bytes (CRC32C included).

    baseTimestamp is the first record's timestamp and maxTimestamp the largest one (for LOG_APPEND_TIME
    batches the broker later stamps maxTimestamp with ``set_max_timestamp_log_append``).
    """

    __slots__ = (
        "_attributes",
        "_base_offset",
        "_base_sequence",
        "_base_ts",
        "_buf",
        "_compression",
        "_count",
        "_max_ts",
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
    ) -> None:
        if not 0 <= compression <= _ATTR_CODEC_LIMIT:
            raise ValueError(f"unknown compression codec id {compression}; use a Compression constant (0-4)")
        if timestamp_type not in (TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME):
            raise ValueError(
                f"unknown timestamp type {timestamp_type}; use TimestampType.CREATE_TIME/LOG_APPEND_TIME"
            )
        self._buf = bytearray(BATCH_HEADER_SIZE)  # header placeholder, records follow uncompressed
        self._count = 0
        self._base_ts = 0
        self._max_ts = -1
        self._compression = compression
        self._attributes = (
            compression
            | (ATTR_TIMESTAMP_TYPE if timestamp_type else 0)
            | (ATTR_TRANSACTIONAL if is_transactional else 0)
            | (ATTR_CONTROL if is_control else 0)
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
    ) -> int:
        """Append one record; returns its offset delta within the batch."""
        delta = self._count
        if delta == 0:
            self._base_ts = timestamp_ms
        elif delta >= _INT32_MAX:
            raise OverflowError("a record batch holds at most 2**31 - 1 records")
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
        self._count = delta + 1
        return delta

    def build(self) -> bytes:
        """Return the finished batch. May be called again after more appends."""
        count = self._count
        if count == 0:
            raise ValueError("cannot build a record batch without records")
        buf = self._buf
        if self._compression:
            out = bytearray(BATCH_HEADER_SIZE)
            out += _compression.compress(self._compression, memoryview(buf)[BATCH_HEADER_SIZE:])
        else:
            out = buf
        _HEADER.pack_into(
            out,
            0,
            self._base_offset,
            len(out) - LOG_OVERHEAD,
            self._partition_leader_epoch,
            MAGIC_V2,
            0,
            self._attributes,
            count - 1,
            self._base_ts,
            self._max_ts,
            self._producer_id,
            self._producer_epoch,
            self._base_sequence,
            count,
        )
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
    builder = RecordBatchBuilder(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
    )
    record_type = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    value = struct.pack(">hi", ControlRecordType.CURRENT_END_TXN_MARKER_VERSION, coordinator_epoch)
    builder.append(timestamp_ms, _control_key(record_type), value)
    return builder.build()


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

import oncelog.protocol.compression as _compression  # noqa: E402 - cycle: compression imports our errors
