"""Record batch compression codecs (attributes bits 0-2), sans-I/O, on top of ``cramjam``.

    1 gzip    RFC 1952 gzip stream (Java: GZIPOutputStream)
    2 snappy  written in xerial framing like the Java client (``\\x82SNAPPY\\x00``, int32 version, int32
              compat, then [int32 length + raw snappy block]*, 32 KiB input per block); read as xerial
              framing or as one plain raw snappy block (librdkafka may send either)
    3 lz4     LZ4 frame format with independent blocks (Java's Lz4BlockInputStream/OutputStream)
    4 zstd    zstd frame(s)

Decompression bomb guard: output is capped at ``max_bytes`` (default ``DEFAULT_MAX_DECOMPRESSED_BYTES`` =
64 MiB, well above Kafka's 1 MiB default ``max.message.bytes`` yet bounded). Decompression writes into a
bounded buffer which grows geometrically, so a bomb costs at most ~2 x max_bytes of work and memory before it
is rejected. Every failure raises ``CorruptRecordError``.
"""

from __future__ import annotations

import struct
from typing import Final

import cramjam

from oncelog.protocol.record_batch import CorruptRecordError

__all__ = [
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "XERIAL_BLOCK_SIZE",
    "XERIAL_MAGIC",
    "compress",
    "decompress",
]

Buffer = bytes | bytearray | memoryview

DEFAULT_MAX_DECOMPRESSED_BYTES: Final = 64 * 1024 * 1024
XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
XERIAL_HEADER: Final = XERIAL_MAGIC + struct.pack(">ii", 1, 1)  # version 1, min compatible version 1
XERIAL_BLOCK_SIZE: Final = 32 * 1024  # xerial SnappyOutputStream default, also what the Java client uses
_XERIAL_HEADER_SIZE: Final = 16
_I = struct.Struct(">i")
_INITIAL_GUESS_MIN: Final = 64 * 1024
_TOO_SMALL = "failed to write whole buffer"  # cramjam's message when the output buffer is full
_NAMES: Final = {1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def _codec_name(codec: int) -> str:
    name = _NAMES.get(codec)
    if name is None:
        raise CorruptRecordError(
            f"unknown compression codec id {codec} in record batch attributes; "
            "valid ids are 0 (none), 1 (gzip), 2 (snappy), 3 (lz4), 4 (zstd)"
        )
    return name


def compress(codec: int, data: Buffer) -> bytes:
    """Compress ``data`` the way the Java client does for ``codec`` (0 returns the bytes unchanged)."""
    if codec == 0:
        return bytes(data)
    _codec_name(codec)
    if codec == 1:
        return bytes(cramjam.gzip.compress(data))
    if codec == 2:
        return _xerial_compress(data)
    if codec == 3:
        c = cramjam.lz4.Compressor(block_linked=False)
        c.compress(data if isinstance(data, bytes) else bytes(data))
        return bytes(c.finish())
    return bytes(cramjam.zstd.compress(data))


def _xerial_compress(data: Buffer) -> bytes:
    mv = memoryview(data).cast("B")
    parts = [XERIAL_HEADER]
    raw = cramjam.snappy.compress_raw
    pack = _I.pack
    for start in range(0, len(mv), XERIAL_BLOCK_SIZE):
        block = bytes(raw(mv[start : start + XERIAL_BLOCK_SIZE]))
        parts.append(pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def decompress(codec: int, data: Buffer, max_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES) -> bytes:
    """Decompress a batch's records section; raise CorruptRecordError if corrupt or larger than ``max_bytes``."""
    if codec == 0:
        if len(data) > max_bytes:
            raise _too_big("none", max_bytes)
        return bytes(data)
    name = _codec_name(codec)
    mv = memoryview(data).cast("B")
    try:
        if codec == 2:
            if mv[:8].tobytes() == XERIAL_MAGIC:
                return _xerial_decompress(mv, max_bytes)
            return _raw_snappy_decompress(mv, max_bytes)
        module = cramjam.gzip if codec == 1 else cramjam.lz4 if codec == 3 else cramjam.zstd
        return _bounded(module.decompress_into, name, mv, _initial_guess(codec, mv, max_bytes), max_bytes)
    except CorruptRecordError:
        raise
    except Exception as e:  # cramjam raises DecompressionError / OSError / ValueError on bad input
        raise CorruptRecordError(
            f"{name} decompression of a {len(mv)}-byte records section failed: {e}"
        ) from e


def _too_big(name: str, max_bytes: int) -> CorruptRecordError:
    return CorruptRecordError(
        f"{name} records section decompresses to more than {max_bytes} bytes (the configured cap); "
        "the batch is corrupt or a decompression bomb; raise max_bytes if such batches are legitimate"
    )


def _initial_guess(codec: int, mv: memoryview, max_bytes: int) -> int:
    if codec == 1 and len(mv) >= 18:
        isize = int.from_bytes(mv[-4:], "little")  # gzip trailer: input size mod 2**32, a hint only
        if 0 < isize <= max_bytes:
            return isize
    return min(max_bytes, max(_INITIAL_GUESS_MIN, 8 * len(mv)))


def _bounded(decompress_into: object, name: str, mv: memoryview, size: int, max_bytes: int) -> bytes:
    """Decompress into a buffer of ``size``, doubling up to ``max_bytes`` when cramjam reports it full."""
    fn = decompress_into
    assert callable(fn)
    while True:
        out = bytearray(size)
        try:
            n = int(fn(mv, out))
        except Exception as e:
            if _TOO_SMALL not in str(e):
                raise
            if size >= max_bytes:
                raise _too_big(name, max_bytes) from None
            size = min(max_bytes, size * 2)
            continue
        if n < size:
            del out[n:]
        return bytes(out)


def _raw_snappy_decompress(mv: memoryview, max_bytes: int) -> bytes:
    size = int(cramjam.snappy.decompress_raw_len(mv))
    if size > max_bytes:
        raise _too_big("snappy", max_bytes)
    out = bytearray(size)
    n = int(cramjam.snappy.decompress_raw_into(mv, out))
    if n != size:
        raise CorruptRecordError(f"raw snappy block declares {size} bytes but produced {n}")
    return bytes(out)


def _xerial_decompress(mv: memoryview, max_bytes: int) -> bytes:
    end = len(mv)
    if end < _XERIAL_HEADER_SIZE:
        raise CorruptRecordError(f"xerial snappy header truncated: {end} bytes, need {_XERIAL_HEADER_SIZE}")
    # First pass: bounds and declared sizes only, so a bomb is rejected before anything is allocated.
    blocks: list[tuple[memoryview, int]] = []
    total = 0
    pos = _XERIAL_HEADER_SIZE
    raw_len = cramjam.snappy.decompress_raw_len
    while pos < end:
        if end - pos < 4:
            raise CorruptRecordError(f"xerial snappy block length truncated at byte {pos} of {end}")
        length = _I.unpack_from(mv, pos)[0]
        pos += 4
        if length < 0 or length > end - pos:
            raise CorruptRecordError(
                f"xerial snappy block at byte {pos - 4} declares {length} bytes, {end - pos} remain"
            )
        block = mv[pos : pos + length]
        pos += length
        size = int(raw_len(block)) if length else 0
        total += size
        if total > max_bytes:
            raise _too_big("snappy", max_bytes)
        blocks.append((block, size))
    out = bytearray(total)
    view = memoryview(out)
    into = cramjam.snappy.decompress_raw_into
    at = 0
    for block, size in blocks:
        if size:
            n = int(into(block, view[at : at + size]))
            if n != size:
                raise CorruptRecordError(f"xerial snappy block declares {size} bytes but produced {n}")
            at += size
    view.release()
    return bytes(out)
