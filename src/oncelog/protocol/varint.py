"""Zigzag varints as used by Kafka record v2 (protobuf-style, little-endian base-128).

``varint`` is Kafka's ``ByteUtils.writeVarint``/``readVarint`` (int32, at most 5 bytes) and ``varlong`` the
int64 variant (at most 10 bytes). Decoders return ``(value, new_position)`` and raise ``ValueError`` subclass
``VarintError`` on truncated or over-long input; callers translate that into their own error.
"""

from __future__ import annotations

__all__ = [
    "VarintError",
    "decode_varint",
    "decode_varlong",
    "encode_varint",
    "encode_varlong",
    "varint_size",
    "zigzag_decode",
    "zigzag_encode",
]

_CACHE_LIMIT = 1 << 13  # signed values in [-8192, 8192) are served from a table (1-2 bytes each)


class VarintError(ValueError):
    """A varint is truncated or longer than its type allows."""


def zigzag_encode(n: int) -> int:
    """Map a signed int64 onto an unsigned one: 0,-1,1,-2,... -> 0,1,2,3,..."""
    return ((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF


def zigzag_decode(z: int) -> int:
    return (z >> 1) ^ -(z & 1)


def _encode_unsigned(z: int) -> bytes:
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


_CACHE: tuple[bytes, ...] = tuple(
    _encode_unsigned(zigzag_encode(n)) for n in range(-_CACHE_LIMIT, _CACHE_LIMIT)
)


def encode_varlong(n: int) -> bytes:
    """Zigzag varint bytes of a signed 64-bit value."""
    if -_CACHE_LIMIT <= n < _CACHE_LIMIT:
        return _CACHE[n + _CACHE_LIMIT]
    if not -(1 << 63) <= n < (1 << 63):
        raise OverflowError(f"{n} does not fit in a signed 64-bit varlong")
    return _encode_unsigned(zigzag_encode(n))


def encode_varint(n: int) -> bytes:
    """Zigzag varint bytes of a signed 32-bit value."""
    if -_CACHE_LIMIT <= n < _CACHE_LIMIT:
        return _CACHE[n + _CACHE_LIMIT]
    if not -(1 << 31) <= n < (1 << 31):
        raise OverflowError(f"{n} does not fit in a signed 32-bit varint")
    return _encode_unsigned(zigzag_encode(n))


def varint_size(n: int) -> int:
    """Encoded size in bytes of the signed value ``n``."""
    z = zigzag_encode(n)
    size = 1
    while z > 0x7F:
        z >>= 7
        size += 1
    return size


def _decode(buf: bytes | bytearray | memoryview, pos: int, max_bytes: int) -> tuple[int, int]:
    result = 0
    shift = 0
    end = len(buf)
    for i in range(max_bytes):
        if pos >= end:
            raise VarintError(f"varint truncated at position {pos}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
    raise VarintError(f"varint longer than {max_bytes} bytes ending at position {pos}")


def decode_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Read a signed 32-bit zigzag varint (at most 5 bytes)."""
    value, pos = _decode(buf, pos, 5)
    if not -(1 << 31) <= value < (1 << 31):
        raise VarintError(f"varint value {value} overflows int32 before position {pos}")
    return value, pos


def decode_varlong(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Read a signed 64-bit zigzag varint (at most 10 bytes)."""
    value, pos = _decode(buf, pos, 10)
    if not -(1 << 63) <= value < (1 << 63):
        raise VarintError(f"varlong value {value} overflows int64 before position {pos}")
    return value, pos
