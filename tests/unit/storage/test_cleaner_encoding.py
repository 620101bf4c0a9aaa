"""The cleaner rewrites batches with protocol's RecordBatchBuilder; its output is byte for byte what the cleaner's
former private encoder wrote (kept below as the reference), for every codec, timestamp type, producer field,
record subset (keeping offsets and timestamps) and KIP-534 delete horizon."""

from __future__ import annotations

import struct

import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.protocol import compression
from oncelog.protocol.records import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    BatchHeader,
    Record,
    RecordBatchBuilder,
    TimestampType,
    decode_records,
    parse_batch_header,
    set_max_timestamp_log_append,
)
from oncelog.protocol.varint import encode_varlong
from oncelog.storage.cleaner import _build_batch, _empty_batch

_HEADER = struct.Struct(">qiibIhiqqqhii")


# ---------------------------------------------------------------- the former encoder (reference)
def _ref_record(out: bytearray, r: Record, base_offset: int, base_ts: int) -> None:
    body = bytearray(b"\x00")
    body += encode_varlong(r.timestamp - base_ts)
    body += encode_varlong(r.offset - base_offset)
    for field in (r.key, r.value):
        if field is None:
            body += b"\x01"
        else:
            body += encode_varlong(len(field))
            body += field
    body += encode_varlong(len(r.headers))
    for hk, hv in r.headers:
        kb = hk.encode("utf-8")
        body += encode_varlong(len(kb))
        body += kb
        if hv is None:
            body += b"\x01"
        else:
            body += encode_varlong(len(hv))
            body += hv
    out += encode_varlong(len(body))
    out += body


def _ref_build(h: BatchHeader, records: list[Record], delete_horizon: int | None) -> bytes:
    log_append = h.attributes & ATTR_TIMESTAMP_TYPE
    base_ts = delete_horizon if delete_horizon is not None else records[0].timestamp
    max_ts = h.max_timestamp if log_append else max(r.timestamp for r in records)
    section = bytearray()
    for r in records:
        _ref_record(section, r, h.base_offset, base_ts)
    codec = h.attributes & ATTR_COMPRESSION_MASK
    body = compression.compress(codec, section) if codec else section
    attrs = (h.attributes & ~ATTR_DELETE_HORIZON) | (ATTR_DELETE_HORIZON if delete_horizon is not None else 0)
    out = bytearray(BATCH_HEADER_SIZE)
    out += body
    _HEADER.pack_into(out, 0, h.base_offset, len(out) - LOG_OVERHEAD, h.partition_leader_epoch, MAGIC_V2, 0, attrs,
                      h.last_offset_delta, base_ts, max_ts, h.producer_id, h.producer_epoch, h.base_sequence,
                      len(records))
    struct.pack_into(">I", out, 17, crc32c.crc32c(memoryview(out)[21:]))
    return bytes(out)


def _ref_empty(h: BatchHeader) -> bytes:
    out = bytearray(BATCH_HEADER_SIZE)
    _HEADER.pack_into(out, 0, h.base_offset, BATCH_HEADER_SIZE - LOG_OVERHEAD, h.partition_leader_epoch, MAGIC_V2, 0,
                      h.attributes & (ATTR_TIMESTAMP_TYPE | ATTR_TRANSACTIONAL | ATTR_CONTROL), h.last_offset_delta,
                      -1, h.max_timestamp, h.producer_id, h.producer_epoch, h.base_sequence, 0)
    struct.pack_into(">I", out, 17, crc32c.crc32c(memoryview(out)[21:]))
    return bytes(out)


# ---------------------------------------------------------------- random source batches
_bytes_or_none = st.none() | st.binary(max_size=40)
_record = st.tuples(
    st.integers(-5_000, 5_000),  # timestamp delta from the batch's first
    _bytes_or_none,  # key
    _bytes_or_none,  # value
    st.lists(st.tuples(st.text(max_size=8), _bytes_or_none), max_size=3),  # headers
)


@st.composite
def source_batches(draw: st.DrawFn) -> bytes:
    records = draw(st.lists(_record, min_size=1, max_size=12))
    has_pid = draw(st.booleans())
    control = draw(st.booleans()) and has_pid
    b = RecordBatchBuilder(
        compression=draw(st.integers(0, 4)),
        producer_id=draw(st.integers(0, 2**40)) if has_pid else -1,
        producer_epoch=draw(st.integers(0, 32767)) if has_pid else -1,
        base_sequence=draw(st.integers(0, 2**31 - 1)) if has_pid and not control else -1,
        is_transactional=control or (has_pid and draw(st.booleans())),
        is_control=control,
        base_offset=draw(st.integers(0, 2**40)),
        partition_leader_epoch=draw(st.integers(-1, 100)),
    )
    t0 = 1_700_000_000_000
    for ts, key, value, headers in records:
        b.append(t0 + ts, key, value, headers)
    batch = bytearray(b.build())
    if draw(st.booleans()):  # a LOG_APPEND_TIME batch, stamped by the broker
        set_max_timestamp_log_append(batch, 0, len(batch), t0 + 10_000)
    return bytes(batch)


@settings(max_examples=300, deadline=None)
@given(batch=source_batches(), data=st.data())
def test_rebuilt_batch_is_byte_identical_to_the_former_encoder(batch: bytes, data: st.DataObject) -> None:
    h = parse_batch_header(batch)
    records = decode_records(batch)
    kept = [r for r in records if data.draw(st.booleans())] or [records[-1]]
    horizon = data.draw(st.none() | st.integers(1_700_000_000_000, 1_800_000_000_000))
    out = _build_batch(h, kept, horizon)
    assert out == _ref_build(h, kept, horizon)
    again = decode_records(out)  # and it decodes to the kept records at their original offsets
    assert [(r.offset, r.key, r.value, r.headers) for r in again] == [(r.offset, r.key, r.value, r.headers)
                                                                      for r in kept]
    if h.timestamp_type == TimestampType.CREATE_TIME:
        assert [r.timestamp for r in again] == [r.timestamp for r in kept]
    assert parse_batch_header(out).last_offset == h.last_offset


@settings(max_examples=100, deadline=None)
@given(batch=source_batches())
def test_empty_batch_is_byte_identical_to_the_former_encoder(batch: bytes) -> None:
    h = parse_batch_header(batch)
    assert _empty_batch(h) == _ref_empty(h)
