"""The columnar records decoder (shared by ``consume_arrow()`` and the Spark source) against the protocol's record
decoder, on sections long enough for the record size to change inside them (offset deltas past 63 and 8191,
timestamp deltas of every varint size) and on sections of records of varying sizes, several sections per call."""

from __future__ import annotations

import random

import pytest

from oncelog.client.consumer.arrow_decode import RecordFormatError, Section, decode_sections
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
