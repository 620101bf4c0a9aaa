"""Fuzz the batch parsers: arbitrary or mutated input may only raise CorruptRecordError/UnsupportedMagicError."""

from __future__ import annotations

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oncelog.protocol.compression import compress
from oncelog.protocol.records import (
    ATTRIBUTES_OFFSET,
    CorruptRecordError,
    RecordBatchBuilder,
    UnsupportedMagicError,
    decode_records,
    iter_batch_headers,
    validate_batches,
)

EXPECTED = (CorruptRecordError, UnsupportedMagicError)
_MAX = 1 << 20  # keep bombs cheap under fuzzing


def _valid(codec: int) -> bytes:
    b = RecordBatchBuilder(compression=codec, producer_id=3, producer_epoch=0, base_sequence=0)
    b.append(1_000, b"key", b"value" * 20, [("h", b"v")])
    b.append(1_050, None, None)
    b.append(900, b"k" * 200, b"\x00" * 150)
    return b.build()


VALID = [_valid(c) for c in range(5)]


def _exercise(buf: bytes | bytearray) -> None:
    for fn in (
        lambda: list(iter_batch_headers(buf, check_crc=True)),
        lambda: validate_batches(buf),
        lambda: decode_records(buf, max_bytes=_MAX),
        lambda: decode_records(buf, check_crc=False, max_bytes=_MAX),
    ):
        try:
            fn()
        except EXPECTED:
            pass


def _fix_crc(buf: bytearray) -> None:
    buf[17:21] = crc32c.crc32c(bytes(buf[ATTRIBUTES_OFFSET:])).to_bytes(4, "big")


@given(st.binary(max_size=200))
@settings(max_examples=500, deadline=None)
def test_random_bytes(blob: bytes) -> None:
    _exercise(blob)


@given(
    st.sampled_from(range(5)),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=6),
    st.booleans(),
    st.integers(0, 40),
)
@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_mutated_valid_batches(codec: int, edits: list[tuple[int, int]], fix_crc: bool, cut: int) -> None:
    buf = bytearray(VALID[codec])
    for pos, byte in edits:
        buf[pos % len(buf)] = byte
    if cut:
        del buf[-cut:]
    if fix_crc and len(buf) > ATTRIBUTES_OFFSET:
        _fix_crc(buf)  # get past the CRC so the record decoder itself is fuzzed
    _exercise(buf)


@given(st.sampled_from(range(5)), st.data())
@settings(max_examples=500, deadline=None)
def test_bit_flips_in_crc_region_are_always_detected(codec: int, data: st.DataObject) -> None:
    buf = bytearray(VALID[codec])
    pos = data.draw(st.integers(ATTRIBUTES_OFFSET, len(buf) - 1))
    bit = data.draw(st.integers(0, 7))
    buf[pos] ^= 1 << bit
    # usually "fails its CRC32C"; a flip that makes a header field impossible (e.g. a negative
    # lastOffsetDelta) is reported by the header check that runs first: detected either way
    with pytest.raises(CorruptRecordError):
        list(iter_batch_headers(buf, check_crc=True))
    with pytest.raises(CorruptRecordError):
        decode_records(buf)


@given(st.sampled_from([1, 2, 3, 4]), st.binary(max_size=300))
@settings(max_examples=300, deadline=None)
def test_random_compressed_payloads(codec: int, payload: bytes) -> None:
    """Valid header + CRC around a (random or validly compressed random) records section."""
    for section in (payload, compress(codec, payload)):
        buf = bytearray(VALID[codec][:61]) + section
        buf[8:12] = (len(buf) - 12).to_bytes(4, "big")
        _fix_crc(buf)
        _exercise(buf)


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_decompression_bomb_batch(codec: int) -> None:
    buf = bytearray(VALID[codec][:61]) + compress(codec, b"\0" * (4 * _MAX))
    buf[8:12] = (len(buf) - 12).to_bytes(4, "big")
    _fix_crc(buf)
    validate_batches(buf)  # the header is fine; only decoding finds the bomb
    with pytest.raises(CorruptRecordError, match="more than 1048576 bytes"):
        decode_records(buf, max_bytes=_MAX)
