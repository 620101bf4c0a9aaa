"""Kafka's key hash: ``org.apache.kafka.common.utils.Utils.murmur2`` and the default key partitioner.

Java computes in wrapping 32-bit ints; here every product is masked to 32 bits and the result is returned as a
signed int32, so values compare equal to the Java ones (e.g. murmur2(b"21") == -973932308).
"""

from __future__ import annotations

import struct

__all__ = ["murmur2", "partition_for_key", "to_positive"]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """32-bit murmur2 of ``data`` exactly as Kafka's Java client computes it (signed int32 result)."""
    length = len(data)
    m = _M
    h = (_SEED ^ length) & _MASK
    n4 = length >> 2
    for k in struct.unpack_from(f"<{n4}I", data, 0):
        k = (k * m) & _MASK
        k ^= k >> 24
        k = (k * m) & _MASK
        h = ((h * m) & _MASK) ^ k
    tail = length & 3
    base = length & ~3
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * m) & _MASK
    h ^= h >> 13
    h = (h * m) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not abs(); -1 maps to 0x7fffffff)."""
    return n & 0x7FFFFFFF


def partition_for_key(key: bytes | bytearray | memoryview, num_partitions: int) -> int:
    """Partition of a non-null key under Java's default partitioner and librdkafka's ``murmur2_random``."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return to_positive(murmur2(key)) % num_partitions
