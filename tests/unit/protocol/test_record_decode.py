"""The consumer's fast records decoder (record_decode) against the general one (records.decode_records).

For any batch the builder can write (any codec, null/empty/large keys and values, headers, negative and
large timestamp deltas, LOG_APPEND_TIME) both decoders give the same records; for any corrupted section both
reject it with CorruptRecordError or both give the same records.
"""

from __future__ import annotations

from typing import Any

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oncelog.protocol.record_decode import (
    _Z1,
    _Z2,
    decode_batch_into,
    decode_records_into,
    decode_section_into,
    keyless_records_in,
)
from oncelog.protocol.records import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_SIZE,
    CorruptRecordError,
    RecordBatchBuilder,
    decode_records,
    parse_batch_header,
    set_base_offset,
    set_max_timestamp_log_append,
)
from oncelog.protocol.varint import encode_varint, encode_varlong

Row = tuple[str, int, int, bytes | None, bytes | None, list[Any], int]


def _row(topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None,
         headers: Any, timestamp: int) -> Row:
    return (topic, partition, offset, key, value, list(headers), timestamp)


def _fast(buf: bytes, *, check_crc: bool = True) -> list[Row]:
    out: list[Row] = []
    decode_batch_into(buf, parse_batch_header(buf), _row, "t", 7, out, check_crc=check_crc)
    return out


def _general(buf: bytes, *, check_crc: bool = True) -> list[Row]:
    return [("t", 7, r.offset, r.key, r.value, r.headers, r.timestamp)
            for r in decode_records(buf, check_crc=check_crc)]


blobs = st.one_of(st.none(), st.binary(max_size=40), st.binary(min_size=60, max_size=300))
headers = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=20))), max_size=3)
# deltas around the 1/2/3-byte varint boundaries and far beyond, both signs
ts_deltas = st.one_of(st.integers(-70, 70), st.integers(-9000, 9000), st.integers(-(1 << 40), 1 << 40))
records = st.lists(st.tuples(ts_deltas, blobs, blobs, headers), min_size=1, max_size=40)


@st.composite
def uniform_records(draw: st.DrawFn) -> list[tuple[int, bytes | None, bytes | None, list[Any]]]:
    """Many records of one shape (the fast runs' case), deltas crossing varint widths, and a few odd ones."""
    n = draw(st.integers(10, 300))
    klen = draw(st.sampled_from([-1, 0, 1, 63, 64, 200]))
    vlen = draw(st.sampled_from([-1, 0, 5, 100, 8191, 8200]))
    ts = draw(st.sampled_from([st.just(0), st.integers(0, 63), st.integers(-200, 200), st.integers(0, 1 << 22),
                               st.integers(1 << 13, 1 << 19), st.integers(-(1 << 19), -(1 << 13))]))  # 3 bytes
    recs: list[tuple[int, bytes | None, bytes | None, list[Any]]] = [(draw(ts), None if klen < 0 else draw(st.binary(min_size=klen, max_size=klen)),
             None if vlen < 0 else draw(st.binary(min_size=vlen, max_size=vlen)), []) for _ in range(n)]
    for _ in range(draw(st.integers(0, 3))):
        recs.insert(draw(st.integers(0, len(recs))), draw(st.tuples(ts_deltas, blobs, blobs, headers)))
    return recs


def _build(recs: list[tuple[int, bytes | None, bytes | None, list[Any]]], codec: int, base_offset: int,
           base_ts: int) -> bytes:
    b = RecordBatchBuilder(compression=codec, producer_id=5, producer_epoch=1, base_sequence=0)
    for delta, key, value, hdrs in recs:
        b.append(base_ts + delta, key, value, hdrs)
    buf = bytearray(b.build())
    set_base_offset(buf, 0, base_offset)
    return bytes(buf)


@given(records, st.sampled_from(range(5)), st.integers(0, (1 << 62)), st.integers(0, 1 << 45))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_fast_equals_general(recs: Any, codec: int, base_offset: int, base_ts: int) -> None:
    buf = _build(recs, codec, base_offset, base_ts)
    fast = _fast(buf)
    assert fast == _general(buf)
    assert [(r[3], r[4], r[5]) for r in fast] == [(k, v, h) for _, k, v, h in recs]
    assert [r[2] for r in fast] == list(range(base_offset, base_offset + len(recs)))


@given(uniform_records(), st.sampled_from([0, 0, 1, 4]), st.integers(0, (1 << 62)))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_uniform_runs_equal_general(recs: Any, codec: int, base_offset: int) -> None:
    buf = _build(recs, codec, base_offset, 1 << 40)
    fast = _fast(buf)
    assert fast == _general(buf)
    assert [r[2] for r in fast] == list(range(base_offset, base_offset + len(recs)))


@pytest.fixture
def emitted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of each run the decoder takes column-wise (``_emit_run``'s ``k``), as the test goes."""
    import oncelog.protocol.record_decode as rd

    sizes: list[int] = []
    real = rd._emit_run

    def spy(*args: Any) -> None:
        sizes.append(args[2])
        real(*args)

    monkeypatch.setattr(rd, "_emit_run", spy)
    return sizes


def test_runs_are_taken(emitted: list[int]) -> None:
    """A uniform batch goes through the column-wise runs (so the property tests above cover them)."""
    buf = _build([(i // 10, None, bytes([i % 256]) * 100, []) for i in range(3000)], 0, 0, 0)
    assert _fast(buf) == _general(buf)
    assert sum(emitted) > 2900


def test_repeated_two_byte_timestamp_deltas_in_runs(emitted: list[int]) -> None:
    """Two-byte timestamp deltas that repeat (records of the same millisecond, 64 ms or more after the batch's
    first) go through a table of the values met; values that do not repeat enough, record by record."""
    for values in ([100, 100, 101, 101, 8000, -100, -8192], list(range(64, 64 + 600))):
        emitted.clear()
        recs = [(0, None, b"x" * 10, [])] + [(values[i % len(values)], None, bytes([i % 256]) * 10, [])
                                            for i in range(600)]
        buf = _build(recs, 0, 5, 1 << 40)
        assert _fast(buf) == _general(buf)
        assert sum(emitted) > 500


def test_three_byte_deltas_in_runs(emitted: list[int]) -> None:
    """A batch of 10,000 records (librdkafka's batch.num.messages) has offset deltas of three varint bytes from
    8192 on, and timestamps far from the base have three-byte deltas of either sign: runs decode them column-wise
    (not record by record) and agree with the general decoder."""
    for sign in (1, -1):
        emitted.clear()
        recs = [(sign * ((1 << 14) + i * 37), None, i.to_bytes(2, "big") * 50, []) for i in range(10_000)]
        buf = _build(recs, 0, 1 << 40, 1 << 41)
        fast = _fast(buf)
        assert fast == _general(buf)
        assert [r[2] for r in fast] == list(range(1 << 40, (1 << 40) + 10_000))
        assert sum(emitted) > 9_900


def _with_offset_deltas(deltas: list[int], value_len: int) -> bytes:
    """A batch of records of one layout (no key, ``value_len`` bytes of value) with these offset deltas, as a
    compacted batch has them (the builder always writes 0, 1, 2...)."""
    section = bytearray()
    for i, d in enumerate(deltas):
        body = b"\x00" + encode_varlong(i % 50) + encode_varint(d) + encode_varint(-1) + encode_varint(value_len) \
            + bytes([i % 256]) * value_len + encode_varint(0)
        section += encode_varint(len(body)) + body
    buf = bytearray(_build([(0, None, b"", [])] * len(deltas), 0, 1000, 1 << 40)[:BATCH_HEADER_SIZE]) + section
    buf[8:12] = (len(buf) - 12).to_bytes(4, "big")
    buf[23:27] = deltas[-1].to_bytes(4, "big")  # lastOffsetDelta
    _fix_crc(buf)
    return bytes(buf)


@st.composite
def offset_deltas(draw: st.DrawFn) -> list[int]:
    """Increasing offset deltas around the varint width changes (64, 8192) and the period of the three-byte
    ones (16384): consecutive from any start, or with gaps."""
    start = draw(st.sampled_from([0, 1, 40, 63, 64, 100, 8000, 8191, 8192, 9000, 16000, 16383, 16384, 40000]))
    n = draw(st.integers(8, 700))
    gaps = draw(st.lists(st.integers(0, n - 1), max_size=3))
    out, d = [], start
    for i in range(n):
        d += 1 + (draw(st.integers(1, 3)) if i in gaps else 0)
        out.append(d - 1)
    return out


@given(offset_deltas(), st.sampled_from([0, 5, 100]))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_offset_deltas_with_gaps(deltas: list[int], value_len: int) -> None:
    """Runs take consecutive offset deltas without decoding them (compared with their encoding): any start, and
    gaps (compaction) fall back to decoding; both agree with the general decoder."""
    buf = _with_offset_deltas(deltas, value_len)
    fast = _fast(buf)
    assert fast == _general(buf)
    assert [r[2] for r in fast] == [1000 + d for d in deltas]


@given(st.one_of(records, uniform_records()), st.lists(st.integers(1, 70), min_size=1, max_size=8))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_decoding_in_parts_equals_decoding_whole(recs: Any, parts: list[int]) -> None:
    """A batch decoded a few records at a time, each call resuming where the last stopped (the consumer hands
    out exactly what it decodes), gives the records of one call."""
    buf = _build(recs, 0, 100, 1 << 40)
    h = parse_batch_header(buf)
    out: list[Row] = []
    pos = index = calls = 0
    while index < h.records_count:
        pos, index = decode_records_into(buf[BATCH_HEADER_SIZE:], h.records_count, h.base_offset, h.base_timestamp,
                                         None, _row, "t", 7, out, pos, index, parts[calls % len(parts)])
        calls += 1
    assert out == _fast(buf)
    assert pos == len(buf) - BATCH_HEADER_SIZE


@given(st.one_of(records, uniform_records()), st.integers(0, 1 << 45))
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_log_append_time(recs: Any, stamp: int) -> None:
    buf = bytearray(_build(recs, 0, 0, 1000))
    set_max_timestamp_log_append(buf, 0, len(buf), stamp)
    assert _fast(bytes(buf)) == _general(bytes(buf))
    assert {r[6] for r in _fast(bytes(buf))} == {stamp}


def _fix_crc(buf: bytearray) -> None:
    buf[17:21] = crc32c.crc32c(bytes(buf[ATTRIBUTES_OFFSET:])).to_bytes(4, "big")


def _both(buf: bytes) -> tuple[Any, Any]:
    results: list[Any] = []
    for fn in (_fast, _general):
        try:
            results.append(fn(buf, check_crc=False))
        except CorruptRecordError:
            results.append(CorruptRecordError)
    return results[0], results[1]


@given(st.one_of(records, uniform_records()), st.data())
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_corrupted_sections_agree(recs: Any, data: st.DataObject) -> None:
    """Flip, cut or insert bytes in the records section (and the declared count): same records or both reject."""
    buf = bytearray(_build(recs, 0, 100, 10_000))
    section_len = len(buf) - BATCH_HEADER_SIZE
    i = data.draw(st.integers(BATCH_HEADER_SIZE, BATCH_HEADER_SIZE + section_len - 1))
    how = data.draw(st.sampled_from(["set", "cut", "insert", "count"]))
    if how == "set":
        buf[i] = data.draw(st.integers(0, 255))
    elif how == "cut":
        del buf[i:i + data.draw(st.integers(1, 5))]
    elif how == "insert":
        buf[i:i] = data.draw(st.binary(min_size=1, max_size=5))
    else:
        buf[57:61] = data.draw(st.integers(0, len(recs) + 3)).to_bytes(4, "big")
    buf[8:12] = (len(buf) - 12).to_bytes(4, "big")
    _fix_crc(buf)
    fast, general = _both(bytes(buf))
    assert fast == general


def test_crc_checked_unless_disabled() -> None:
    buf = bytearray(_build([(0, None, b"v", [])], 0, 0, 0))
    buf[-2] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC32C"):
        _fast(bytes(buf))
    assert _fast(bytes(buf), check_crc=False) == _general(bytes(buf), check_crc=False)


def test_section_of_long_varints() -> None:
    """Every varint field of 1, 2, 3 and 10 bytes goes through the table or the slow path correctly."""
    sizes = [0, 1, 63, 64, 8191, 8192, 1 << 20]
    for n in sizes:
        h = parse_batch_header(_build([(0, b"k" * n, b"v" * n, [])], 0, 0, 0))
        section = _build([(0, b"k" * n, b"v" * n, [])], 0, 0, 0)[BATCH_HEADER_SIZE:]
        out: list[Row] = []
        decode_section_into(section, h, _row, "t", 0, out)
        assert out == [("t", 0, 0, b"k" * n, b"v" * n, [], 0)]


def test_tables_match_varint_encoding() -> None:
    for v in range(-64, 64):
        enc = encode_varlong(v)
        assert len(enc) == 1 and _Z1[enc[0]] == v
    for v in range(-8192, 8192):
        enc = encode_varlong(v)
        if len(enc) == 2:
            assert _Z2[enc[0] | enc[1] << 8] == v


def test_declared_count_too_large_for_section() -> None:
    buf = bytearray(_build([(0, None, b"v", [])] * 3, 0, 0, 0))
    buf[57:61] = (1000).to_bytes(4, "big")
    _fix_crc(buf)
    with pytest.raises(CorruptRecordError, match="declares 1000 records"):
        _fast(bytes(buf))



# ---------------------------------------------------------------- keyless_records (compacted topics' key check)
def _keyless_general(buf: bytes) -> list[int]:
    return [i for i, r in enumerate(decode_records(buf, check_crc=False)) if r.key is None]


@given(st.one_of(records, uniform_records()), st.sampled_from([0, 0, 1, 2, 3, 4]))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_keyless_records_equal_general(recs: Any, codec: int) -> None:
    buf = _build(recs, codec, 7, 1 << 40)
    got = keyless_records_in(buf, parse_batch_header(buf))
    assert got == _keyless_general(buf) == [i for i, (_, k, _, _) in enumerate(recs) if k is None]


@given(st.one_of(records, uniform_records()), st.data())
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_keyless_records_on_corrupted_sections(recs: Any, data: st.DataObject) -> None:
    """A corrupted section either still walks to the same answer as decoding it, or is rejected; never an
    exception other than CorruptRecordError. (The walk reads less than the decoder: it may accept a section
    the decoder rejects, never answer differently for one both accept.)"""
    buf = bytearray(_build(recs, 0, 100, 10_000))
    i = data.draw(st.integers(BATCH_HEADER_SIZE, len(buf) - 1))
    how = data.draw(st.sampled_from(["set", "cut", "insert", "count"]))
    if how == "set":
        buf[i] = data.draw(st.integers(0, 255))
    elif how == "cut":
        del buf[i:i + data.draw(st.integers(1, 5))]
    elif how == "insert":
        buf[i:i] = data.draw(st.binary(min_size=1, max_size=5))
    else:
        buf[57:61] = data.draw(st.integers(0, len(recs) + 3)).to_bytes(4, "big")
    buf[8:12] = (len(buf) - 12).to_bytes(4, "big")
    try:
        walked: Any = keyless_records_in(bytes(buf), parse_batch_header(bytes(buf)))
    except CorruptRecordError:
        walked = CorruptRecordError
    try:
        decoded: Any = _keyless_general(bytes(buf))
    except CorruptRecordError:
        decoded = CorruptRecordError
    if decoded is not CorruptRecordError and walked is not CorruptRecordError:
        assert walked == decoded


def test_keyless_records_takes_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    import oncelog.protocol.record_decode as rd

    runs: list[int] = []
    real = rd._run_length

    def spy(*args: Any) -> int:
        k = real(*args)
        runs.append(k)
        return k

    monkeypatch.setattr(rd, "_run_length", spy)
    recs = [(0, None if (i // 500) % 2 else b"k%04d" % i, b"v" * 50, []) for i in range(3000)]
    buf = _build(recs, 0, 0, 0)
    assert keyless_records_in(buf, parse_batch_header(buf)) == [i for i in range(3000) if (i // 500) % 2]
    assert sum(k for k in runs if k >= 8) > 2900
