"""Which ``__transaction_state`` / ``__consumer_offsets`` partition owns a key: Kafka's
``Utils.abs(key.hashCode) % partitionCount`` with Java's String.hashCode."""

from __future__ import annotations

from functools import lru_cache

__all__ = ["java_abs", "java_string_hash", "partition_for"]

_INT_MIN = -(1 << 31)


def java_string_hash(s: str) -> int:
    """Java ``String.hashCode()``: s[0]*31^(n-1) + ... over UTF-16 code units, wrapped to a signed int32."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def java_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: like Math.abs, but Integer.MIN_VALUE maps to 0 instead of itself."""
    return 0 if n == _INT_MIN else abs(n)


@lru_cache(maxsize=1 << 16)  # asked on every request of a transactional id or group; ids are few and reused
def partition_for(key: str, num_partitions: int) -> int:
    if num_partitions <= 0:
        raise ValueError("num_partitions must be positive")
    return java_abs(java_string_hash(key)) % num_partitions
