"""The source's columnar record decoder against the protocol's record decoder (the oracle), no Spark needed."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from oncelog.protocol.records import BATCH_HEADER_SIZE, RecordBatchBuilder, decode_records, parse_batch_header
from oncelog.client.consumer.arrow_decode import RecordFormatError, Section, decode_sections


def _batch(rng: random.Random, base: int, n: int, with_headers: bool, fixed: bool) -> bytes:
    b = RecordBatchBuilder(base_offset=base)
    for i in range(n):
        if fixed:
            key, value = b"k%06d" % i, b"v" * 100
        else:
            key = None if rng.random() < 0.2 else rng.randbytes(rng.choice([0, 3, 200]))
            value = None if rng.random() < 0.1 else rng.randbytes(rng.choice([0, 1, 100, 70_000]))
        headers = ([(f"h{j}", None if j == 1 else rng.randbytes(j * 5)) for j in range(rng.randrange(4))]
                   if with_headers else [])
        b.append(1_700_000_000_000 + rng.randrange(-5_000, 10**9), key, value, headers)
    return b.build()


def _section(raw: bytes) -> Section:
    h = parse_batch_header(raw)
    return Section(bytes(raw[BATCH_HEADER_SIZE:]), h.records_count, h.base_offset, h.base_timestamp)


@pytest.mark.parametrize("with_headers,fixed", [(False, True), (False, False), (True, False)])
def test_columns_equal_the_protocol_decoder(with_headers: bool, fixed: bool) -> None:
    rng = random.Random(7)
    raws = [_batch(rng, 1000 * i + 3, rng.randrange(1, 60), with_headers, fixed) for i in range(8)]
    records = [r for raw in raws for r in decode_records(raw)]
    cols = decode_sections([_section(raw) for raw in raws], include_headers=True)
    assert cols.n == len(records)
    assert cols.offsets.tolist() == [r.offset for r in records]
    assert cols.timestamps.tolist() == [r.timestamp for r in records]
    assert cols.keys.to_pylist() == [r.key for r in records]
    assert cols.values.to_pylist() == [r.value for r in records]
    assert cols.headers is not None
    assert [[(h["key"], h["value"]) for h in hs or []] for hs in cols.headers.to_pylist()] == [
        r.headers for r in records]
    assert all((hs is None) == (not r.headers) for hs, r in zip(cols.headers.to_pylist(), records, strict=True))
    assert decode_sections([_section(raw) for raw in raws], include_headers=False).headers is None


def test_log_append_time_replaces_every_timestamp() -> None:
    raw = _batch(random.Random(1), 0, 5, False, True)
    s = _section(raw)
    cols = decode_sections([Section(s.data, s.count, 0, s.base_timestamp, 42)], include_headers=False)
    assert cols.timestamps.tolist() == [42] * 5


def test_malformed_sections_raise() -> None:
    s = _section(_batch(random.Random(2), 0, 10, False, False))
    with pytest.raises(RecordFormatError):
        decode_sections([Section(s.data[:-3], s.count, 0, 0)], include_headers=False)
    with pytest.raises(RecordFormatError):
        decode_sections([Section(s.data + b"\x00", s.count, 0, 0)], include_headers=False)
    with pytest.raises(RecordFormatError):
        decode_sections([Section(s.data, s.count + 1, 0, 0)], include_headers=False)


def test_sections_without_keys_give_a_null_key_column() -> None:
    b = RecordBatchBuilder(base_offset=0)
    for i in range(4):
        b.append(1_700_000_000_000 + i, None, b"v%d" % i)
    cols = decode_sections([_section(b.build())], include_headers=True)
    assert cols.keys.to_pylist() == [None] * 4 and cols.keys.type == pa.binary()
    assert cols.values.to_pylist() == [b"v0", b"v1", b"v2", b"v3"]
    assert cols.headers is not None and cols.headers.to_pylist() == [None] * 4
