"""The columnar records decoder (shared by ``consume_arrow()`` and the Spark source) against the protocol's record
decoder, on sections long enough for the record size to change inside them (offset deltas past 63 and 8191,
timestamp deltas of every varint size) and on sections of records of varying sizes, several sections per call."""

from __future__ import annotations

import dataclasses
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oncelog.client.consumer.arrow_decode import RecordFormatError, Section, _decode_by_layout, decode_sections
from oncelog.protocol.varint import encode_varint, encode_varlong
from oncelog.protocol.records import BATCH_HEADER_SIZE, RecordBatchBuilder, decode_records, parse_batch_header


def _raw(rng: random.Random, base: int, n: int, kind: str) -> bytes:
    b = RecordBatchBuilder(base_offset=base)
    for i in range(n):
        if kind == "fixed":
            key, value, ts = None, b"v" * 100, 1_700_000_000_000 + i // 50
        elif kind == "keyed":
            key, value, ts = b"k%06d" % i, b"x" * 40, 1_700_000_000_000 + i * 3
        else:
            key = None if rng.random() < 0.3 else rng.randbytes(rng.randrange(0, 30))
            value = None if rng.random() < 0.1 else rng.randbytes(rng.choice([0, 5, 100, 300]))
            ts = 1_700_000_000_000 + rng.randrange(-5_000, 10**8)
        b.append(ts, key, value, [])
    return b.build()


def _section(raw: bytes) -> Section:
    h = parse_batch_header(raw)
    return Section(bytes(raw[BATCH_HEADER_SIZE:]), h.records_count, h.base_offset, h.base_timestamp)


@pytest.mark.parametrize("sizes", [[1, 63, 64, 65, 200], [9000, 3, 70], [8193], [0, 5]])
@pytest.mark.parametrize("kinds", [["fixed"], ["keyed"], ["mixed"], ["fixed", "mixed", "keyed"]])
def test_equals_the_protocol_decoder(sizes: list[int], kinds: list[str]) -> None:
    rng = random.Random(sum(sizes))
    raws = [_raw(rng, 10_000 * i, n, kinds[i % len(kinds)]) for i, n in enumerate(sizes) if n]
    records = [r for raw in raws for r in decode_records(raw)]
    cols = decode_sections([_section(raw) for raw in raws], include_headers=False)
    assert cols.n == len(records)
    assert cols.offsets.tolist() == [r.offset for r in records]
    assert cols.timestamps.tolist() == [r.timestamp for r in records]
    assert cols.keys.to_pylist() == [r.key for r in records]
    assert cols.values.to_pylist() == [r.value for r in records]


def test_a_section_cut_short_or_with_bytes_after_raises() -> None:
    s = _section(_raw(random.Random(3), 0, 300, "fixed"))
    with pytest.raises(RecordFormatError):
        decode_sections([Section(s.data[:-1], s.count, 0, 0)], include_headers=False)
    with pytest.raises(RecordFormatError):
        decode_sections([Section(s.data + b"\x00" * 7, s.count, 0, 0)], include_headers=False)
    with pytest.raises(RecordFormatError):
        decode_sections([Section(s.data, s.count + 1, 0, 0)], include_headers=False)


@st.composite
def _sections(draw: st.DrawFn) -> tuple[list[bytes], list[int | None]]:
    """Sections of records in runs of one shape (what producers write), with the shape changing now and then (key
    and value sizes, nulls, headers), timestamp deltas of every varint size and sign, some batches LogAppendTime."""
    raws: list[bytes] = []
    lat: list[int | None] = []
    for i in range(draw(st.integers(1, 4))):
        b = RecordBatchBuilder(base_offset=draw(st.integers(0, 2**40)))
        n = draw(st.integers(1, 1500))
        ts = 1_700_000_000_000
        shape = (None, b"v" * 100, [])
        for j in range(n):
            if draw(st.integers(0, 400)) == 0:  # a new shape from here on
                key = draw(st.one_of(st.none(), st.binary(max_size=20)))
                value = draw(st.one_of(st.none(), st.binary(max_size=300)))
                headers = [("h", b"x")] if draw(st.integers(0, 5)) == 0 else []
                shape = (key, value, headers)
            ts += draw(st.sampled_from([0, 1, 1, 1, 3, 200, -7, 10**6, 2**40]))
            b.append(ts, *shape)
        raws.append(b.build())
        lat.append(draw(st.sampled_from([None, None, 1_800_000_000_000])))
    return raws, lat


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_sections())
def test_the_layout_path_equals_the_protocol_decoder(case: tuple[list[bytes], list[int | None]]) -> None:
    raws, lat = case
    sections = [dataclasses.replace(_section(raw), log_append_time=t) for raw, t in zip(raws, lat, strict=True)]
    records = [(r, t) for raw, t in zip(raws, lat, strict=True) for r in decode_records(raw)]
    for cols in (decode_sections(sections, include_headers=False), _decode_by_layout(sections, False)):
        if cols is None:  # not one layout in long runs (headers, short runs): left to the general walk
            continue
        assert cols.n == len(records)
        assert cols.offsets.tolist() == [r.offset for r, _ in records]
        assert cols.timestamps.tolist() == [r.timestamp if t is None else t for r, t in records]
        assert cols.keys.to_pylist() == [r.key for r, _ in records]
        assert cols.values.to_pylist() == [r.value for r, _ in records]


def test_the_layout_path_takes_long_runs_and_leaves_headers_and_bad_data_to_the_walk() -> None:
    rng = random.Random(5)
    fixed = [_section(_raw(rng, 0, 9000, "fixed")), _section(_raw(rng, 20_000, 300, "keyed"))]
    cols = _decode_by_layout(fixed, True)
    assert cols is not None and cols.n == 9300 and cols.headers is not None
    assert cols.keys.null_count == 9000 and cols.values.to_pylist()[8999:9001] == [b"v" * 100, b"x" * 40]
    b = RecordBatchBuilder(base_offset=0)
    for i in range(500):
        b.append(1_700_000_000_000 + i, None, b"v", [("h", b"1")] if i == 400 else [])
    assert _decode_by_layout([_section(b.build())], False) is None
    s = fixed[0]
    for bad in (Section(s.data[:-1], s.count, 0, 0), Section(s.data + b"\x00", s.count, 0, 0),
                Section(s.data, s.count + 1, 0, 0)):
        assert _decode_by_layout([bad], False) is None
        with pytest.raises(RecordFormatError):
            decode_sections([bad], include_headers=False)


def _rec(ts_delta: int, off_delta: int, key: bytes | None, value: bytes | None) -> bytes:
    def blob(b: bytes | None) -> bytes:
        return encode_varint(-1) if b is None else encode_varint(len(b)) + b
    body = b"\x00" + encode_varlong(ts_delta) + encode_varint(off_delta) + blob(key) + blob(value) + b"\x00"
    return encode_varint(len(body)) + body


@pytest.mark.parametrize("first,second", [
    # a timestamp delta one byte longer and an offset delta one byte shorter: the same record size
    ((0, 64, None, b"v" * 10), (64, 5, None, b"v" * 10)),
    # a timestamp delta one byte longer, an offset delta whose byte equals the first key length, a shorter key
    ((0, 0, b"ab", b"v"), (64, 2, b"x", b"v")),
    # an offset delta one byte shorter and a key one byte longer whose first byte equals the first key length
    ((0, 200, b"k", b"v"), (0, 5, b"\x02k", b"v")),
    # an empty value and a null one (the same size)
    ((0, 0, b"k", b""), (0, 1, b"k", None)),
    ((0, 0, None, b"v"), (0, 1, b"", b"v")),
])
def test_records_of_one_size_but_another_layout_end_the_run(first: tuple[int, int, bytes | None, bytes | None],
                                                           second: tuple[int, int, bytes | None, bytes | None]
                                                           ) -> None:
    section = Section((_rec(*first) * 300) + (_rec(*second) * 300), 600, 1000, 5000)
    assert len(_rec(*first)) == len(_rec(*second))
    for cols in (_decode_by_layout([section], False), decode_sections([section], include_headers=False)):
        assert cols is not None
        assert cols.offsets.tolist() == [1000 + first[1]] * 300 + [1000 + second[1]] * 300
        assert cols.timestamps.tolist() == [5000 + first[0]] * 300 + [5000 + second[0]] * 300
        assert cols.keys.to_pylist() == [first[2]] * 300 + [second[2]] * 300
        assert cols.values.to_pylist() == [first[3]] * 300 + [second[3]] * 300
