"""The column-wise key partitioner picks, for every key, the partition the per-record partitioner picks (Java's
default partitioner: ``toPositive(murmur2(key)) % n``), and ``Column.take`` gathers entries exactly."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.protocol.murmur2 import murmur2, partition_for_key
from oncelog.protocol.partition_columnar import murmur2_column, partition_column
from oncelog.protocol.record_batch_columnar import as_column

_key = st.none() | st.binary(max_size=40)


@st.composite
def _keys(draw: st.DrawFn) -> list[bytes | None]:
    if draw(st.booleans()):  # all of one length (the 2-D path), maybe with nulls
        size = draw(st.integers(0, 24))
        return draw(st.lists(st.none() | st.binary(min_size=size, max_size=size), max_size=60))
    return draw(st.lists(_key, max_size=60))


@settings(max_examples=300, deadline=None)
@given(keys=_keys(), partitions=st.integers(1, 100), arrow=st.booleans())
def test_same_partition_as_the_per_record_partitioner(keys: list[bytes | None], partitions: int,
                                                      arrow: bool) -> None:
    col = as_column(pa.array(keys, pa.binary()) if arrow else keys)
    assert partition_column(col, partitions).tolist() == [
        -1 if k is None else partition_for_key(k, partitions) for k in keys]
    hashes = murmur2_column(col).tolist()
    assert [h for h, k in zip(hashes, keys, strict=True) if k is not None] == [
        murmur2(k) & 0xFFFFFFFF for k in keys if k is not None]


def test_java_vectors_in_one_column() -> None:
    # apache/kafka UtilsTest.testMurmur2, as in test_murmur2.py
    vectors = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
               b"a-little-bit-longer-string": -1486304829, b"abc": 479470107,
               b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971}
    got = murmur2_column(as_column(list(vectors))).astype(np.int64)
    assert (got - (got >= 2**31) * 2**32).tolist() == list(vectors.values())


@settings(max_examples=200, deadline=None)
@given(values=st.lists(_key, max_size=40) | st.lists(st.binary(min_size=3, max_size=3), max_size=40),
       data=st.data())
def test_take_gathers_entries(values: list[bytes | None], data: st.DataObject) -> None:
    rows = data.draw(st.lists(st.integers(0, max(len(values) - 1, 0)), max_size=50 if values else 0))
    col = as_column(values)
    if data.draw(st.booleans()) and len(values) > 2:  # a slice of a bigger column
        col, values = as_column([b"x", *values, b"yy"]).slice(1, len(values) + 1), values
    taken = col.take(np.array(rows, np.int64))
    want = [values[r] for r in rows]
    assert taken.lens.tolist() == [-1 if v is None else len(v) for v in want]
    assert taken.data.tobytes() == b"".join(v for v in want if v is not None)
