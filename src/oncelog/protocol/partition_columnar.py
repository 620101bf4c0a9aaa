"""Kafka's key partitioner for a whole column of keys at once: :func:`murmur2_column` is
:func:`oncelog.protocol.murmur2.murmur2` (Java's ``Utils.murmur2``) computed with numpy for every key of a
:class:`~oncelog.protocol.record_batch_columnar.Column`, :func:`partition_column` the default partitioner's choice
(``toPositive(murmur2(key)) % numPartitions``) for each of them, -1 for a null key.

How: murmur2 reads a key as little-endian 4-byte blocks, then a 0-3 byte tail. All keys are hashed together in
uint32 arithmetic (numpy wraps like Java's int): block ``j`` of every key that has one is mixed in by one
vectorised step, so the Python loop runs ``max(key length) / 4`` times, not once per key. When every key has the
same length (the common case) the blocks are read as a 2-D array with no index arithmetic.

numpy is imported lazily (the broker's install has none); ``tests/unit/protocol/test_partition_columnar.py``
checks the result against the per-record functions on random keys.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from .record_batch_columnar import Column

    _Arr = np.ndarray[Any, Any]

__all__ = ["murmur2_column", "partition_column"]

_SEED = 0x9747B28C
_M = 0x5BD1E995


def murmur2_column(col: Column) -> _Arr:
    """uint32 murmur2 of every entry of ``col`` (a null entry hashes as an empty key; callers mask it)."""
    import numpy as np

    m = np.uint32(_M)
    lens = np.maximum(col.lens, 0)
    n = len(lens)
    data = col.data
    starts = np.zeros(n, np.int64)
    if n > 1:
        np.cumsum(lens[:-1], out=starts[1:])
    h = (np.uint32(_SEED) ^ lens.astype(np.uint32)).astype(np.uint32)
    blocks = lens >> 2
    top = int(blocks.max()) if n else 0
    if n and top and (lens == lens[0]).all() and len(data) == n * int(lens[0]):
        # equal lengths, back to back: every key's blocks are one row of a 2-D view
        width = int(lens[0])
        words = np.ascontiguousarray(data.reshape(n, width)[:, : 4 * top]).view("<u4").astype(np.uint32)
        for j in range(top):
            k = words[:, j] * m
            k ^= k >> np.uint32(24)
            k *= m
            h *= m
            h ^= k
    else:
        for j in range(top):
            idx = np.flatnonzero(blocks > j)
            p = starts[idx] + 4 * j
            k = (data[p].astype(np.uint32) | (data[p + 1].astype(np.uint32) << np.uint32(8))
                 | (data[p + 2].astype(np.uint32) << np.uint32(16)) | (data[p + 3].astype(np.uint32) << np.uint32(24)))
            k *= m
            k ^= k >> np.uint32(24)
            k *= m
            h[idx] = (h[idx] * m) ^ k
    tail = lens & 3
    if tail.any():
        base = starts + (lens & ~3)
        last = max(len(data) - 1, 0)
        for i, shift in ((2, 16), (1, 8), (0, 0)):
            has = tail > i
            if has.any():
                b = data[np.minimum(base + i, last)].astype(np.uint32) if len(data) else np.zeros(n, np.uint32)
                h ^= np.where(has, b << np.uint32(shift), np.uint32(0)).astype(np.uint32)
        h = np.where(tail > 0, h * m, h).astype(np.uint32)
    h ^= h >> np.uint32(13)
    h *= m
    h ^= h >> np.uint32(15)
    return h


def partition_column(col: Column, num_partitions: int) -> _Arr:
    """int64 partition of every key under Java's default partitioner (librdkafka's ``murmur2_random``); -1 where
    the key is null."""
    import numpy as np

    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    positive = (murmur2_column(col) & np.uint32(0x7FFFFFFF)).astype(np.int64)
    out: _Arr = np.where(col.lens < 0, -1, positive % num_partitions)
    return out
