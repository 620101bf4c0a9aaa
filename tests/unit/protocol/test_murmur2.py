"""murmur2 must equal Java's Utils.murmur2 bit for bit: it decides which partition a keyed record lands on."""

from __future__ import annotations

import random

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from oncelog.protocol.murmur2 import murmur2, partition_for_key, to_positive

# Vectors from apache/kafka clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java (testMurmur2)
JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("key", "expected"), JAVA_VECTORS.items())
def test_java_vectors(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


def test_result_is_signed_int32() -> None:
    values = [murmur2(bytes([i % 256]) * i) for i in range(300)]
    assert all(-(2**31) <= v < 2**31 for v in values)
    assert any(v < 0 for v in values)


def test_matches_kafka_python_on_random_keys() -> None:
    rng = random.Random(1234)
    for _ in range(3000):
        key = rng.randbytes(rng.randrange(0, 80))
        # kafka-python returns the same 32 bits as an unsigned int
        assert murmur2(key) & 0xFFFFFFFF == kafka_python_murmur2(key), key


def test_accepts_bytearray_and_memoryview() -> None:
    assert murmur2(bytearray(b"foobar")) == murmur2(memoryview(b"xfoobar")[1:]) == -790332482


def test_to_positive_clears_sign_bit_like_java() -> None:
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0
    assert to_positive(5) == 5


def test_partition_for_key() -> None:
    assert partition_for_key(b"21", 7) == to_positive(-973932308) % 7
    rng = random.Random(7)
    for _ in range(500):
        key = rng.randbytes(rng.randrange(1, 40))
        n = rng.randrange(1, 100)
        assert partition_for_key(key, n) == (kafka_python_murmur2(key) & 0x7FFFFFFF) % n
    with pytest.raises(ValueError, match="num_partitions"):
        partition_for_key(b"k", 0)
