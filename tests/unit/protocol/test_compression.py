"""Codecs of record batch attributes bits 0-2: round trips, Kafka framing details, bombs, corrupt input."""

from __future__ import annotations

import gzip
import os
import struct
import time

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.protocol.compression import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    XERIAL_BLOCK_SIZE,
    XERIAL_MAGIC,
    compress,
    decompress,
)
from oncelog.protocol.records import CorruptRecordError

CODECS = [0, 1, 2, 3, 4]
COMPRESSED = [1, 2, 3, 4]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize(
    "data", [b"", b"x", b"hello world" * 100, os.urandom(70_000), b"\0" * 200_000], ids=lambda d: str(len(d))
)
def test_round_trip(codec: int, data: bytes) -> None:
    out = compress(codec, data)
    assert isinstance(out, bytes)
    assert decompress(codec, out) == data
    assert decompress(codec, bytearray(out)) == data
    assert decompress(codec, memoryview(b"??" + out)[2:]) == data


@given(codec=st.sampled_from(CODECS), data=st.binary(max_size=5000))
@settings(max_examples=200, deadline=None)
def test_round_trip_property(codec: int, data: bytes) -> None:
    assert decompress(codec, compress(codec, memoryview(data))) == data


def test_snappy_uses_xerial_framing_like_the_java_client() -> None:
    data = os.urandom(XERIAL_BLOCK_SIZE) + b"a" * (XERIAL_BLOCK_SIZE + 5)
    out = compress(2, data)
    assert out[:8] == XERIAL_MAGIC == b"\x82SNAPPY\x00"
    assert struct.unpack_from(">ii", out, 8) == (1, 1)
    pos, blocks = 16, []
    while pos < len(out):
        (n,) = struct.unpack_from(">i", out, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(out[pos + 4 : pos + 4 + n])))
        pos += 4 + n
    assert [len(b) for b in blocks] == [XERIAL_BLOCK_SIZE, XERIAL_BLOCK_SIZE, 5]
    assert b"".join(blocks) == data


def test_snappy_accepts_plain_raw_block_as_librdkafka_may_send() -> None:
    data = b"librdkafka " * 1000
    assert decompress(2, bytes(cramjam.snappy.compress_raw(data))) == data


def test_snappy_accepts_kafka_python_xerial_output(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    import kafka.codec as kc

    # kafka-python's own xerial framing code, with cramjam standing in for python-snappy's raw block codec
    shim = types.SimpleNamespace(
        compress=lambda b: bytes(cramjam.snappy.compress_raw(bytes(b))),
        decompress=lambda b: bytes(cramjam.snappy.decompress_raw(bytes(b))),
    )
    monkeypatch.setattr(kc, "snappy", shim)
    data = os.urandom(40_000) + b"z" * 50_000
    theirs = kc.snappy_encode(data, xerial_compatible=True)
    assert decompress(2, theirs) == data
    assert kc.snappy_decode(compress(2, data)) == data


def test_gzip_interoperates_with_stdlib() -> None:
    data = b"gzip " * 5000
    assert decompress(1, gzip.compress(data)) == data
    assert gzip.decompress(compress(1, data)) == data


def test_lz4_frame_has_independent_blocks_for_java() -> None:
    # Kafka's Java Lz4BlockInputStream reads the LZ4 frame format; write independent blocks, version 01
    out = compress(3, os.urandom(300_000))
    assert out[:4] == b"\x04\x22\x4d\x18"
    flg = out[4]
    assert flg >> 6 == 0b01
    assert flg & 0x20, "block independence flag must be set"


def test_zstd_is_a_standard_frame() -> None:
    assert compress(4, b"zstd")[:4] == b"\x28\xb5\x2f\xfd"


@pytest.mark.parametrize("codec", COMPRESSED)
def test_decompression_bomb_is_rejected_quickly(codec: int) -> None:
    bomb = compress(codec, b"\0" * (8 * 1024 * 1024))
    start = time.perf_counter()
    with pytest.raises(CorruptRecordError, match="more than 1048576 bytes"):
        decompress(codec, bomb, max_bytes=1024 * 1024)
    assert time.perf_counter() - start < 2


@pytest.mark.parametrize("codec", CODECS)
def test_cap_is_inclusive(codec: int) -> None:
    data = b"ab" * 50_000
    blob = compress(codec, data)
    assert decompress(codec, blob, max_bytes=len(data)) == data
    with pytest.raises(CorruptRecordError):
        decompress(codec, blob, max_bytes=len(data) - 1)


def test_default_cap_is_64_mib() -> None:
    assert DEFAULT_MAX_DECOMPRESSED_BYTES == 64 * 1024 * 1024


@pytest.mark.parametrize("codec", COMPRESSED)
@pytest.mark.parametrize(
    "blob", [b"", b"\x00", os.urandom(64), b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01\xff"]
)
def test_garbage_raises_corrupt_record_error(codec: int, blob: bytes) -> None:
    try:
        out = decompress(codec, blob)
    except CorruptRecordError as e:
        assert str(e)
    else:  # a few inputs are valid by accident (e.g. empty raw snappy); they must still be bytes
        assert isinstance(out, bytes)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_truncated_stream_raises(codec: int) -> None:
    blob = compress(codec, os.urandom(100_000))
    with pytest.raises(CorruptRecordError, match="failed|truncated|declares"):
        decompress(codec, blob[: len(blob) // 2])


def test_unknown_codec() -> None:
    with pytest.raises(CorruptRecordError, match="unknown compression codec id 5"):
        decompress(5, b"x")
    with pytest.raises(CorruptRecordError, match="unknown compression codec id 7"):
        compress(7, b"x")


@given(st.binary(max_size=300), st.sampled_from(COMPRESSED))
@settings(max_examples=400, deadline=None)
def test_fuzz_decompress_only_raises_corrupt(blob: bytes, codec: int) -> None:
    try:
        decompress(codec, blob, max_bytes=1 << 20)
    except CorruptRecordError:
        pass
