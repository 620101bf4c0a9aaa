"""The columnar batch encoder gives byte for byte what RecordBatchBuilder gives, and the decoder reads it back."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oncelog.protocol import record_batch_columnar as columnar
from oncelog.protocol.record_batch_columnar import build_batch_columnar, records_section
from oncelog.protocol.records import (
    BATCH_HEADER_SIZE,
    Compression,
    RecordBatchBuilder,
    decode_records,
    validate_batches,
)

Headers = list[tuple[str, bytes | None]]


def _reference(
    values: list[bytes | None],
    keys: list[bytes | None] | None,
    timestamps: int | list[int],
    headers: list[Headers] | None = None,
    **kw: Any,
) -> bytes:
    b = RecordBatchBuilder(**kw)
    for i, v in enumerate(values):
        b.append(
            timestamps if isinstance(timestamps, int) else timestamps[i],
            None if keys is None else keys[i],
            v,
            headers[i] if headers is not None else (),
        )
    return b.build()


# bytes of any size class of a varint length: 1 byte (< 64), 2 bytes (> 63 after zig-zag), 3 bytes (> 8191)
_big = st.builds(
    lambda n, fill: (fill * (n // len(fill) + 1))[:n],
    st.sampled_from([100, 127, 128, 8191, 8192, 16383, 16384, 17000]) | st.integers(0, 20_000),
    st.binary(min_size=1, max_size=5),
)
_blob = st.one_of(st.none(), st.just(b""), st.binary(max_size=20), _big)
_small_blob = st.one_of(st.none(), st.just(b""), st.binary(max_size=20))
_header = st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=10))


@st.composite
def _inputs(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(0, 300))
    big = draw(st.booleans())  # big values for a few batches only (keeps the test fast)
    uniform = draw(st.booleans())  # every record alike (the layout-run copy's common case)
    if uniform:
        v = draw(_blob if big else _small_blob)
        values = [v] * n
    else:
        values = draw(st.lists(_blob if big else _small_blob, min_size=n, max_size=n))
    keys = None
    if draw(st.booleans()):
        keys = draw(st.lists(_small_blob | _big if big else _small_blob, min_size=n, max_size=n))
    if draw(st.booleans()):
        timestamps: int | list[int] = draw(st.integers(-(2**62), 2**62))
    else:
        base = draw(st.integers(-(2**62), 2**62))
        step = draw(st.sampled_from([0, 1, 1000]))
        jitter = draw(st.lists(st.integers(-(2**40), 2**40) | st.integers(-100, 100), min_size=n, max_size=n))
        timestamps = [base + i * step + j for i, j in enumerate(jitter)]
    headers = None
    if draw(st.booleans()):
        headers = draw(st.lists(st.lists(_header, max_size=3) | st.just([]), min_size=n, max_size=n))
    return {
        "values": values,
        "keys": keys,
        "timestamps": timestamps,
        "headers": headers,
        "compression": draw(st.integers(0, 4)),
        "producer": draw(
            st.sampled_from([(-1, -1, -1), (0, 0, 0), (4711, 3, 2**31 - 5), (2**40, 32767, 123)])
        ),
        "transactional": draw(st.booleans()),
        "form": draw(st.sampled_from(["list", "binary", "large_binary", "sliced", "chunked", "numpy_ts"])),
        "records_per_run": draw(st.sampled_from([0, 64, 10**12])),  # always / default / never the run copy
    }


def _as_column(col: list[bytes | None], form: str, type_: Any) -> Any:
    if form in ("list", "numpy_ts"):
        return col
    if form == "sliced":
        return pa.array([b"x" * 7, *col, None], type_).slice(1, len(col))
    if form == "chunked":
        half = len(col) // 2
        return pa.chunked_array([col[:half], col[half:]], type_)
    return pa.array(col, type_)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(_inputs())
def test_columnar_batch_is_byte_identical_to_builder_and_decodes(inp: dict[str, Any]) -> None:
    values, keys, timestamps, headers = inp["values"], inp["keys"], inp["timestamps"], inp["headers"]
    pid, epoch, seq = inp["producer"]
    kw = dict(
        compression=inp["compression"],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=inp["transactional"],
    )
    form = inp["form"]
    type_ = pa.large_binary() if form == "large_binary" else pa.binary()
    ts_arg: Any = timestamps
    if form == "numpy_ts" and not isinstance(timestamps, int):
        ts_arg = np.array(timestamps, np.int64)
    saved = columnar._RECORDS_PER_RUN
    columnar._RECORDS_PER_RUN = inp["records_per_run"]
    try:
        if not values:
            with pytest.raises(ValueError, match="without records"):
                build_batch_columnar(values, keys, timestamps=ts_arg, headers=headers, **kw)
            return
        got = build_batch_columnar(
            _as_column(values, form, type_),
            None if keys is None else _as_column(keys, form, type_),
            timestamps=ts_arg,
            headers=headers,
            **kw,
        )
    finally:
        columnar._RECORDS_PER_RUN = saved
    assert got == _reference(values, keys, timestamps, headers, **kw)

    (h,) = validate_batches(got, from_client=False)
    assert h.records_count == len(values)
    records = decode_records(got)
    assert [r.offset for r in records] == list(range(len(values)))
    assert [r.value for r in records] == values
    assert [r.key for r in records] == (keys if keys is not None else [None] * len(values))
    ts = [timestamps] * len(values) if isinstance(timestamps, int) else timestamps
    assert [r.timestamp for r in records] == ts
    want_headers = headers if headers is not None else [[] for _ in values]
    assert [r.headers for r in records] == [[(k, v) for k, v in hs] for hs in want_headers]
    if seq >= 0:
        assert [r.sequence for r in records] == [(seq + i) & 0x7FFFFFFF for i in range(len(values))]


@pytest.mark.parametrize("codec", range(5))
@pytest.mark.parametrize("records_per_run", [0, 64, 10**12])
def test_fixed_size_values_many_records(
    codec: int, records_per_run: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """10k records crosses the 1-, 2- and 3-byte offset delta varints (the run copy's run boundaries)."""
    monkeypatch.setattr(columnar, "_RECORDS_PER_RUN", records_per_run)
    n = 10_000
    values: list[bytes | None] = [i.to_bytes(4, "big") * 25 for i in range(n)]
    keys: list[bytes | None] = [b"k%d" % (i % 100) for i in range(n)]
    ts = [1_700_000_000_000 + i for i in range(n)]
    got = build_batch_columnar(
        pa.array(values, pa.binary()), keys, timestamps=np.array(ts), compression=codec,
        producer_id=9, producer_epoch=1, base_sequence=100,
    )
    ref = _reference(values, keys, ts, compression=codec, producer_id=9, producer_epoch=1, base_sequence=100)
    assert got == ref


def test_records_section_alone() -> None:
    values: list[bytes | None] = [b"a", None, b"ccc"]
    s = records_section(values, timestamps=[5, 3, 9])
    ref = _reference(values, None, [5, 3, 9])
    assert s.data == ref[BATCH_HEADER_SIZE:]
    assert (s.count, s.base_timestamp, s.max_timestamp) == (3, 5, 9)


def test_numpy_scalar_timestamp() -> None:
    assert build_batch_columnar([b"x"], timestamps=np.int64(42)) == _reference([b"x"], None, 42)


def test_max_timestamp_is_at_least_minus_one_as_the_builder() -> None:
    got = build_batch_columnar([b"x", b"y"], timestamps=[-50, -70])
    assert got == _reference([b"x", b"y"], None, [-50, -70])


def test_arrow_null_slots_with_bytes_are_dropped() -> None:
    """Arrow allows a null slot to span bytes; they must not reach the batch."""
    data = pa.py_buffer(b"aaXXbb")
    offsets = pa.py_buffer(np.array([0, 2, 4, 6], np.int32).tobytes())
    validity = pa.py_buffer(np.packbits(np.array([1, 0, 1], np.uint8), bitorder="little").tobytes())
    arr = pa.Array.from_buffers(pa.binary(), 3, [validity, offsets, data], null_count=1)
    assert arr.to_pylist() == [b"aa", None, b"bb"]
    want: list[bytes | None] = [b"aa", None, b"bb"]
    assert build_batch_columnar(arr, arr, timestamps=1) == _reference(want, want, 1)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"values": [b"a"], "keys": [b"a", b"b"]}, ValueError),
        ({"values": [b"a"], "timestamps": [1, 2]}, ValueError),
        ({"values": [b"a"], "headers": []}, ValueError),
        ({"values": pa.array(["a"])}, TypeError),
        ({"values": [b"a", 1]}, TypeError),
        ({"values": [b"a"], "timestamps": [1.5]}, TypeError),
        ({"values": [b"a"], "timestamps": 1.5}, TypeError),
        ({"values": [b"a"], "timestamps": 2**63}, OverflowError),
        ({"values": [b"a", b"b"], "timestamps": [-(2**63), 2**63 - 1]}, OverflowError),
        ({"values": [b"a"], "compression": 5}, ValueError),
        ({"values": b"abc"}, TypeError),
    ],
)
def test_bad_input(kwargs: dict[str, Any], error: type[Exception]) -> None:
    kwargs.setdefault("timestamps", 0)
    with pytest.raises(error):
        build_batch_columnar(**kwargs)


def test_importing_the_module_imports_neither_numpy_nor_pyarrow() -> None:
    """The broker imports oncelog.protocol without the spark extra: the module must load without numpy."""
    code = (
        "import sys; import oncelog.protocol.record_batch_columnar; "
        "print('numpy' in sys.modules, 'pyarrow' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def _gen() -> Iterator[bytes]:
    yield b"a"
    yield b"b"


def test_iterables_and_compression_names() -> None:
    assert build_batch_columnar(_gen(), timestamps=7, compression=Compression.LZ4) == _reference(
        [b"a", b"b"], None, 7, compression=Compression.LZ4
    )


def test_column_slices_encode_like_the_records_they_hold() -> None:
    values: list[bytes | None] = [None if i % 7 == 0 else b"v" * (i % 300) for i in range(1000)]
    col = columnar.as_column(pa.array(values, pa.binary()))
    assert len(col) == 1000 and int(col.byte_sizes().sum()) == sum(len(v or b"") for v in values)
    for a, b in [(0, 1000), (0, 1), (10, 400), (400, 401), (999, 1000), (500, 1000)]:
        part = col.slice(a, b)
        assert build_batch_columnar(part, timestamps=5) == _reference(values[a:b], None, 5)
        assert build_batch_columnar(col.slice(0, 1000).slice(a, b), timestamps=5) == _reference(values[a:b], None, 5)
    with pytest.raises(ValueError, match="entries"):
        build_batch_columnar(col, col.slice(0, 10), timestamps=0)
