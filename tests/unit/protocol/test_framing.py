"""FrameDecoder: pipelined frames, byte-by-byte feeding, large frames in pieces, limits."""

from __future__ import annotations

import struct
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.protocol import FrameDecoder, FrameTooLargeError, ProtocolDecodeError


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def test_pipelined_frames_in_one_chunk_are_zero_copy() -> None:
    payloads = [b"a", b"", b"hello" * 10, bytes(range(256))]
    data = b"".join(frame(p) for p in payloads)
    out = FrameDecoder(1 << 20).feed(data)
    assert [bytes(f) for f in out] == payloads
    assert all(isinstance(f, memoryview) and f.obj is data for f in out)


def test_byte_by_byte() -> None:
    payloads = [b"xyz", b"", b"0123456789" * 5]
    data = b"".join(frame(p) for p in payloads)
    dec = FrameDecoder(1000)
    got = []
    for i in range(len(data)):
        got.extend(bytes(f) for f in dec.feed(data[i : i + 1]))
    assert got == payloads
    assert dec.buffered == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=8), st.lists(st.integers(1, 97), min_size=1, max_size=20))
def test_arbitrary_chunking(payloads: list[bytes], cuts: list[int]) -> None:
    data = b"".join(frame(p) for p in payloads)
    dec = FrameDecoder(1000)
    got = []
    pos = 0
    i = 0
    while pos < len(data):
        n = cuts[i % len(cuts)]
        got.extend(bytes(f) for f in dec.feed(bytearray(data[pos : pos + n])))
        pos += n
        i += 1
    assert got == payloads


def test_writable_input_is_copied() -> None:
    buf = bytearray(frame(b"abc") + frame(b"def"))
    out = FrameDecoder(100).feed(buf)
    buf[:] = b"\x00" * len(buf)
    assert [bytes(f) for f in out] == [b"abc", b"def"]


def test_oversize_and_negative() -> None:
    with pytest.raises(FrameTooLargeError) as ei:
        FrameDecoder(100).feed(struct.pack(">i", 101))
    assert ei.value.size == 101
    assert isinstance(ei.value, ProtocolDecodeError)
    FrameDecoder(100).feed(struct.pack(">i", 100))  # exactly the max is fine
    with pytest.raises(ProtocolDecodeError):
        FrameDecoder(100).feed(struct.pack(">i", -1))
    # the size prefix is checked even when it arrives split
    dec = FrameDecoder(100)
    dec.feed(b"\x7f")
    with pytest.raises(FrameTooLargeError):
        dec.feed(b"\x00\x00\x00")


def test_large_frame_in_small_pieces_is_linear() -> None:
    size = 8 << 20
    data = frame(b"\xab" * size)
    dec = FrameDecoder(size)
    t = time.perf_counter()
    got = []
    for i in range(0, len(data), 4096):
        got.extend(dec.feed(data[i : i + 4096]))
    elapsed = time.perf_counter() - t
    assert len(got) == 1 and len(got[0]) == size and bytes(got[0][:2]) == b"\xab\xab"
    assert elapsed < 2.0  # quadratic copying would take far longer


def test_many_small_frames() -> None:
    data = frame(b"x" * 20) * 10000
    out = FrameDecoder(100).feed(data)
    assert len(out) == 10000
