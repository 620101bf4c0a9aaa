"""Record batch v2 (magic 2): the header, its parsing and validation, and in-place offset assignment.

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

Kafka's DefaultRecordBatch (the header half). The records inside a batch (DefaultRecord.java: decoding, building,
control records) are :mod:`oncelog.protocol.records`, which also re-exports this module's names.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

import crc32c as _crc32c

from .batch_codes import Compression, TimestampType

__all__ = [
    "ATTRIBUTES_OFFSET",
    "ATTR_COMPRESSION_MASK",
    "ATTR_CONTROL",
    "ATTR_DELETE_HORIZON",
    "ATTR_TIMESTAMP_TYPE",
    "ATTR_TRANSACTIONAL",
    "BATCH_HEADER_SIZE",
    "CRC_OFFSET",
    "HEADER_STRUCT",
    "LOG_OVERHEAD",
    "MAGIC_OFFSET",
    "MAGIC_V2",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "BatchHeader",
    "Compression",
    "CorruptRecordError",
    "InvalidRecordError",
    "TimestampType",
    "UnsupportedMagicError",
    "compute_crc",
    "iter_batch_headers",
    "parse_batch_header",
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

HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")  # the 61-byte header, baseOffset to recordsCount
_Q = struct.Struct(">q")
_I = struct.Struct(">i")
_H = struct.Struct(">h")

ATTR_COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40




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
    h = BatchHeader(*HEADER_STRUCT.unpack_from(buf, pos))
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
