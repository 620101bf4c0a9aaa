"""Record batch v2 records: builder <-> decoder round trips, control batches, validation, kafka-python interop."""

from __future__ import annotations

import struct
import types
from collections.abc import Iterator

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.protocol.record_encode import one_record_batch
from oncelog.protocol.records import (
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TRANSACTIONAL,
    BATCH_HEADER_SIZE,
    Compression,
    ControlRecord,
    CorruptRecordError,
    InvalidRecordError,
    Record,
    RecordBatchBuilder,
    TimestampType,
    UnsupportedMagicError,
    build_control_batch,
    control_batch,
    build_empty_batch,
    decode_records,
    iter_batch_headers,
    parse_batch_header,
    parse_control_record,
    set_base_offset,
    set_max_timestamp_log_append,
    validate_batches,
)

CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]


def _build(codec: int = 0, n: int = 3, **kw: int | bool) -> bytes:
    b = RecordBatchBuilder(compression=codec, **kw)  # type: ignore[arg-type]
    for i in range(n):
        b.append(1_000 + i, f"k{i}".encode(), f"v{i}".encode(), [("h", b"x")] if i == 1 else ())
    return b.build()


@pytest.mark.parametrize("codec", CODECS)
def test_build_and_decode(codec: int) -> None:
    b = RecordBatchBuilder(
        compression=codec, base_offset=100, producer_id=7, producer_epoch=2, base_sequence=10
    )
    assert b.append(5_000, None, b"v0") == 0
    assert b.append(4_000, b"", None, [("a", b"1"), ("b", None), ("ünï", b"")]) == 1
    assert b.append(6_000, b"\x00\xff", b"x" * 300) == 2
    assert b.size_in_bytes > BATCH_HEADER_SIZE
    data = b.build()
    h = parse_batch_header(data)
    assert (h.base_offset, h.compression, h.records_count, h.last_offset_delta) == (100, codec, 3, 2)
    assert (h.base_timestamp, h.max_timestamp) == (5_000, 6_000)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (7, 2, 10)
    assert validate_batches(data)[0].crc == h.crc
    assert decode_records(data) == [
        Record(100, 5_000, None, b"v0", [], 10),
        Record(101, 4_000, b"", None, [("a", b"1"), ("b", None), ("ünï", b"")], 11),
        Record(102, 6_000, b"\x00\xff", b"x" * 300, [], 12),
    ]


def test_offsets_follow_set_base_offset_and_log_append_time() -> None:
    data = bytearray(_build(n=2))
    set_base_offset(data, 0, 42)
    set_max_timestamp_log_append(data, 0, len(data), 999_999)
    recs = decode_records(data)
    assert [r.offset for r in recs] == [42, 43]
    assert [r.timestamp for r in recs] == [999_999, 999_999]
    assert parse_batch_header(data).timestamp_type == TimestampType.LOG_APPEND_TIME


def test_sequence_wraps_at_int32_max() -> None:
    data = _build(n=3, producer_id=1, producer_epoch=0, base_sequence=2**31 - 2)
    assert [r.sequence for r in decode_records(data)] == [2**31 - 2, 2**31 - 1, 0]


def test_decode_at_position_ignores_following_batches() -> None:
    first, second = _build(n=1), _build(n=2, base_offset=1)
    buf = first + second
    assert [r.offset for r in decode_records(buf, len(first))] == [1, 2]
    assert len(decode_records(buf)) == 1


def test_builder_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="compression"):
        RecordBatchBuilder(compression=5)
    with pytest.raises(ValueError, match="timestamp type"):
        RecordBatchBuilder(timestamp_type=2)
    with pytest.raises(ValueError, match="without records"):
        RecordBatchBuilder().build()


@pytest.mark.parametrize("codec", CODECS)
def test_append_with_offsets_horizon_and_last_offset_override(codec: int) -> None:
    """What a rewrite needs (Kafka's appendWithOffset / overrideLastOffset / deleteHorizonMs): offsets with gaps,
    the original last offset, a delete horizon as base timestamp with record timestamps unchanged."""
    b = RecordBatchBuilder(compression=codec, base_offset=100, delete_horizon_ms=5_000, producer_id=7,
                           producer_epoch=2, base_sequence=40)
    assert b.append(1_000, b"a", b"1", offset=101) == 1
    assert b.append(900, b"b", None, offset=104) == 4
    assert b.append(1_100, b"c", b"3") == 5  # the next offset follows the last one appended
    b.override_last_offset(109)
    batch = b.build()
    h = parse_batch_header(batch)
    assert (h.base_offset, h.last_offset, h.records_count) == (100, 109, 3)
    assert h.attributes & ATTR_DELETE_HORIZON and h.base_timestamp == 5_000 and h.max_timestamp == 1_100
    assert [(r.offset, r.timestamp, r.key, r.sequence) for r in decode_records(batch)] == [
        (101, 1_000, b"a", 41), (104, 900, b"b", 44), (105, 1_100, b"c", 45)]
    with pytest.raises(ValueError, match="does not follow"):
        b.append(1, b"k", b"v", offset=105)
    with pytest.raises(ValueError, match="last offset"):
        b.override_last_offset(104)


def test_empty_batch_keeps_offsets_sequence_and_epoch() -> None:
    batch = build_empty_batch(base_offset=10, last_offset=14, max_timestamp=77, producer_id=3, producer_epoch=1,
                              base_sequence=20, is_transactional=True, timestamp_type=TimestampType.LOG_APPEND_TIME)
    (h,) = validate_batches(batch, from_client=False)
    assert (h.base_offset, h.last_offset, h.records_count, h.base_sequence, h.last_sequence) == (10, 14, 0, 20, 24)
    assert (h.producer_id, h.producer_epoch, h.base_timestamp, h.max_timestamp) == (3, 1, -1, 77)
    assert h.is_transactional and not h.is_control and h.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert decode_records(batch) == []


def test_build_is_repeatable() -> None:
    b = RecordBatchBuilder()
    b.append(1, b"k", b"v")
    first = b.build()
    assert b.build() == first
    b.append(2, b"k", b"w")
    assert len(decode_records(b.build())) == 2


@pytest.mark.parametrize("commit", [True, False])
def test_control_batch_matches_kafka_end_transaction_marker(commit: bool) -> None:
    data = build_control_batch(
        producer_id=9,
        producer_epoch=3,
        commit=commit,
        coordinator_epoch=17,
        timestamp_ms=1234,
        base_offset=50,
    )
    h = parse_batch_header(data)
    assert h.attributes == ATTR_TRANSACTIONAL | ATTR_CONTROL
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.records_count) == (9, 3, -1, 1)
    (rec,) = decode_records(data)
    assert rec.offset == 50 and rec.timestamp == 1234 and rec.headers == []
    assert rec.key == struct.pack(">hh", 0, 1 if commit else 0)
    assert rec.value == struct.pack(">hi", 0, 17)
    assert parse_control_record(data) == ControlRecord(commit, 17, 1 if commit else 0, 0, True)
    # only the broker writes control batches
    with pytest.raises(InvalidRecordError, match="not allowed to write control records"):
        validate_batches(data)
    assert validate_batches(data, from_client=False)


@settings(max_examples=200, deadline=None)
@given(ts=st.integers(-1, 2**62), key=st.none() | st.binary(max_size=300), value=st.none() | st.binary(max_size=300),
       producer=st.sampled_from([(-1, -1, False), (7, 2, True), (2**40, 32767, False)]), control=st.booleans(),
       base_offset=st.integers(0, 2**40), leader_epoch=st.integers(-1, 100))
def test_one_record_batch_is_the_builders_batch(ts: int, key: bytes | None, value: bytes | None,
                                                producer: tuple[int, int, bool], control: bool, base_offset: int,
                                                leader_epoch: int) -> None:
    """The one-call writer of a single-record batch (coordinator records, markers) writes the builder's bytes and
    gives the header a parse would."""
    pid, epoch, transactional = producer
    b = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, is_transactional=transactional,
                           is_control=control, base_offset=base_offset, partition_leader_epoch=leader_epoch)
    b.append(ts, key, value)
    out, header = one_record_batch(ts, key, value, producer_id=pid, producer_epoch=epoch,
                                   is_transactional=transactional, is_control=control, base_offset=base_offset,
                                   partition_leader_epoch=leader_epoch)
    assert type(out) is bytearray and bytes(out) == b.build()
    assert header == parse_batch_header(out)
    assert validate_batches(out, from_client=False) == [header]


@pytest.mark.parametrize("commit", [True, False])
def test_control_batch_gives_its_header(commit: bool) -> None:
    out, header = control_batch(9, 3, commit, 17, 1234)
    assert bytes(out) == build_control_batch(producer_id=9, producer_epoch=3, commit=commit, coordinator_epoch=17,
                                             timestamp_ms=1234)
    assert header == parse_batch_header(out)


def _control(key: bytes | None, value: bytes | None) -> bytes:
    b = RecordBatchBuilder(producer_id=1, producer_epoch=0, is_transactional=True, is_control=True)
    b.append(0, key, value)
    return b.build()


def test_unknown_control_type_is_not_an_error() -> None:
    cr = parse_control_record(_control(struct.pack(">hh", 0, 5), b"whatever"))
    assert cr == ControlRecord(False, -1, 5, 0, False)
    # a newer key version with a known type still parses (Kafka only logs a warning)
    assert parse_control_record(_control(struct.pack(">hh", 1, 1), struct.pack(">hi", 0, 4))).commit


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        (b"\x00", b"", "at least 4 bytes"),
        (None, b"", "at least 4 bytes"),
        (struct.pack(">hh", -1, 1), b"", "negative version"),
        (struct.pack(">hh", 0, 1), b"\x00\x00", "at least 6 bytes"),
        (struct.pack(">hh", 0, 0), struct.pack(">hi", -1, 0), "negative version"),
    ],
)
def test_malformed_control_records(key: bytes | None, value: bytes, match: str) -> None:
    with pytest.raises(InvalidRecordError, match=match):
        parse_control_record(_control(key, value))


def test_parse_control_record_requires_control_batch() -> None:
    with pytest.raises(InvalidRecordError, match="not a control batch"):
        parse_control_record(_build())


@pytest.mark.parametrize("magic", [0, 1])
def test_old_magic_is_unsupported(magic: int) -> None:
    data = bytearray(_build())
    data[16] = magic
    for fn in (parse_batch_header, validate_batches, decode_records):
        with pytest.raises(UnsupportedMagicError, match=f"v{magic}"):
            fn(data)
    with pytest.raises(UnsupportedMagicError):
        list(iter_batch_headers(data))


def _patch_header(data: bytes, fmt: str, offset: int, value: int) -> bytes:
    """Rewrite one header field and fix the CRC so only the rule under test fails."""
    import crc32c

    buf = bytearray(data)
    struct.pack_into(fmt, buf, offset, value)
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return bytes(buf)


@pytest.mark.parametrize(
    ("fmt", "offset", "value", "match"),
    [
        (">i", 57, 0, "invalid record count 0"),
        (">i", 57, 5, "declares 5 records but lastOffsetDelta 2"),
        (">i", 23, 7, "lastOffsetDelta 7"),
        (">h", 21, 5, "unknown compression codec id 5"),
        (">q", 43, 12, "invalid base sequence -1 for producer id 12"),
    ],
)
def test_validate_batches_client_rules(fmt: str, offset: int, value: int, match: str) -> None:
    with pytest.raises(CorruptRecordError, match=match):
        validate_batches(_patch_header(_build(), fmt, offset, value))


def test_validate_batches_rejects_empty_and_bad_crc() -> None:
    with pytest.raises(CorruptRecordError, match="no record batch"):
        validate_batches(b"")
    data = bytearray(_build())
    data[data.rindex(b"v2")] ^= 1  # "v2" -> "w2"
    with pytest.raises(CorruptRecordError, match="CRC32C"):
        validate_batches(data)
    with pytest.raises(CorruptRecordError, match="CRC32C"):
        decode_records(data)
    assert decode_records(data, check_crc=False)[2].value == b"w2"  # undetected without the CRC


def test_trailing_bytes_in_records_section_are_rejected() -> None:
    # count says 2 records but 3 are present
    data = _patch_header(_patch_header(_build(n=3), ">i", 57, 2), ">i", 23, 1)
    with pytest.raises(CorruptRecordError, match="bytes left after its 2 declared records"):
        decode_records(data)


# ---------------------------------------------------------------------------------------------------------------
# Hypothesis round trip
# ---------------------------------------------------------------------------------------------------------------

_bytes_or_none = st.none() | st.binary(max_size=64)
_header = st.tuples(st.text(max_size=8), _bytes_or_none)
_record = st.tuples(
    st.integers(min_value=0, max_value=2**50), _bytes_or_none, _bytes_or_none, st.lists(_header, max_size=3)
)


@given(
    codec=st.sampled_from(CODECS),
    records=st.lists(_record, min_size=1, max_size=30),
    base_offset=st.integers(min_value=0, max_value=2**62),
    producer=st.one_of(
        st.none(), st.tuples(st.integers(0, 2**62), st.integers(0, 32767), st.integers(0, 2**31 - 1))
    ),
    is_transactional=st.booleans(),
    is_control=st.booleans(),
    log_append=st.booleans(),
)
@settings(max_examples=300, deadline=None)
def test_round_trip_property(
    codec: int,
    records: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    base_offset: int,
    producer: tuple[int, int, int] | None,
    is_transactional: bool,
    is_control: bool,
    log_append: bool,
) -> None:
    pid, epoch, seq = producer if producer else (-1, -1, -1)
    b = RecordBatchBuilder(
        compression=codec,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=is_transactional,
        is_control=is_control,
        base_offset=base_offset,
        timestamp_type=TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME,
    )
    for i, (ts, key, value, headers) in enumerate(records):
        assert b.append(ts, key, value, headers) == i
    data = b.build()
    h = validate_batches(data, from_client=False)[0]
    assert (h.is_transactional, h.is_control, h.compression) == (is_transactional, is_control, codec)
    max_ts = max(r[0] for r in records)
    assert h.max_timestamp == max_ts
    decoded = decode_records(data)
    assert len(decoded) == len(records)
    for i, (rec, (ts, key, value, headers)) in enumerate(zip(decoded, records, strict=True)):
        assert rec.offset == base_offset + i
        assert rec.timestamp == (max_ts if log_append else ts)
        assert (rec.key, rec.value, rec.headers) == (key, value, headers)
        assert rec.sequence == (-1 if seq < 0 else (seq + i) & 0x7FFFFFFF)


# ---------------------------------------------------------------------------------------------------------------
# Cross-implementation with kafka-python
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture
def kafka_python_codecs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """kafka-python needs python-snappy / lz4 / zstandard, which are not dependencies here.

    Snappy: cramjam replaces only the raw block codec, so kafka-python's own xerial framing is exercised.
    LZ4 / zstd: cramjam replaces the whole container codec, so those cases cross-check the record layer only.
    Gzip is kafka-python's own (stdlib) code.
    """
    import kafka.codec as kc
    import kafka.record.default_records as dr

    monkeypatch.setattr(
        kc,
        "snappy",
        types.SimpleNamespace(
            compress=lambda b: bytes(cramjam.snappy.compress_raw(bytes(b))),
            decompress=lambda b: bytes(cramjam.snappy.decompress_raw(bytes(b))),
        ),
    )
    for name in ("has_snappy", "has_lz4", "has_zstd"):
        monkeypatch.setattr(kc, name, lambda: True)

    def lz4_encode(payload: bytes) -> bytes:
        c = cramjam.lz4.Compressor(block_linked=False)
        c.compress(bytes(payload))
        return bytes(c.finish())

    monkeypatch.setattr(dr, "lz4_encode", lz4_encode)
    monkeypatch.setattr(dr, "lz4_decode", lambda p: bytes(cramjam.lz4.decompress(bytes(p))))
    monkeypatch.setattr(dr, "zstd_encode", lambda p: bytes(cramjam.zstd.compress(bytes(p))))
    monkeypatch.setattr(dr, "zstd_decode", lambda p: bytes(cramjam.zstd.decompress(bytes(p))))
    yield


_INTEROP_RECORDS = [
    (1_700_000_000_000, b"key", b"value", []),
    (1_700_000_000_005, None, b"no key" * 50, [("trace", b"abc"), ("empty", b"")]),
    (1_699_999_999_999, b"k2", None, []),
    (1_700_000_000_001, b"", b"", [("n", None)]),
] + [(1_700_000_000_100 + i, b"k%d" % i, bytes(range(256)) * (i % 3), []) for i in range(200)]


@pytest.mark.usefixtures("kafka_python_codecs")
@pytest.mark.parametrize("codec", CODECS)
def test_our_batches_decode_with_kafka_python(codec: int) -> None:
    from kafka.record.default_records import DefaultRecordBatch

    b = RecordBatchBuilder(
        compression=codec, base_offset=1000, producer_id=5, producer_epoch=1, base_sequence=3
    )
    for ts, key, value, headers in _INTEROP_RECORDS:
        b.append(ts, key, value, headers)
    batch = DefaultRecordBatch(bytearray(b.build()))
    assert batch.validate_crc()
    assert batch.compression_type == codec
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (5, 1, 3)
    theirs = list(batch)
    assert len(theirs) == len(_INTEROP_RECORDS)
    for i, (rec, (ts, key, value, headers)) in enumerate(zip(theirs, _INTEROP_RECORDS, strict=True)):
        assert (rec.offset, rec.timestamp, rec.key, rec.value) == (1000 + i, ts, key, value)
        assert list(rec.headers) == headers


@pytest.mark.usefixtures("kafka_python_codecs")
@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("transactional", [False, True])
def test_kafka_python_batches_decode_with_ours(codec: int, transactional: bool) -> None:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    kb = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=transactional,
        producer_id=77 if transactional else -1,
        producer_epoch=4 if transactional else -1,
        base_sequence=0 if transactional else -1,
        batch_size=10_000_000,
    )
    for i, (ts, key, value, headers) in enumerate(_INTEROP_RECORDS):
        assert kb.append(i, ts, key, value, headers) is not None
    data = bytes(kb.build())
    (h,) = validate_batches(data)
    assert (h.compression, h.is_transactional, h.records_count) == (
        codec,
        transactional,
        len(_INTEROP_RECORDS),
    )
    ours = decode_records(data)
    expected = [
        Record(i, ts, key, value, headers, (i if transactional else -1))
        for i, (ts, key, value, headers) in enumerate(_INTEROP_RECORDS)
    ]
    assert ours == expected


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_varlong_round_trip(n: int) -> None:
    from oncelog.protocol.varint import decode_varlong, encode_varlong, varint_size

    enc = encode_varlong(n)
    assert len(enc) == varint_size(n) <= 10
    assert decode_varlong(b"\xff" + enc, 1) == (n, 1 + len(enc))


def test_varint_limits() -> None:
    from oncelog.protocol.varint import VarintError, decode_varint, encode_varint

    assert encode_varint(-1) == b"\x01" and encode_varint(300) == b"\xd8\x04"
    with pytest.raises(OverflowError):
        encode_varint(2**31)
    with pytest.raises(VarintError, match="longer than 5"):
        decode_varint(b"\xff" * 6, 0)
    with pytest.raises(VarintError, match="truncated"):
        decode_varint(b"\x80", 0)
