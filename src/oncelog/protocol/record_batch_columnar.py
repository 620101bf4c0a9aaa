"""Build a v2 record batch from columns (values, keys, timestamps) without per-record Python.

The bulk counterpart of :class:`oncelog.protocol.records.RecordBatchBuilder`: for the same records, same
producer fields and same codec, :func:`build_batch_columnar` returns the very same bytes (same attributes,
baseTimestamp = the first record's timestamp, maxTimestamp = max(-1, largest timestamp), consecutive offset
deltas from 0, CRC32C via ``crc32c``, compression by :func:`oncelog.protocol.compression.compress`).
``tests/unit/protocol/test_record_batch_columnar.py`` checks the identity on random inputs.

How: every record is ``length | 0x00 | timestampDelta | offsetDelta | keyLength | key | valueLength | value |
headers`` (zig-zag varints). The sizes of all varints are computed for all records at once (``searchsorted``
on the 7-bit thresholds), which gives each record's length and, by a cumulative sum, where each record starts.
The small fields of all records (the varints, the attributes byte, headerCount 0) are written column by
column into a compact array (one vectorised scatter per varint byte position, at most 10 per field; the array
is about 8 bytes a record, so the scatters stay in cache). Then the small bytes, keys and values are interleaved into
the output in one of two ways:

* runs of consecutive records whose field sizes are all equal (fixed-size values: the offset and timestamp
  deltas change their varint size only at 64, 8192, ... so a 100k-record batch is a handful of runs) are
  copied as 2-D blocks, one row per record, one numpy copy per field and run;
* otherwise (runs shorter than ``_RECORDS_PER_RUN`` records on average) by a per-byte selector built with
  ``np.repeat`` from the field sizes and one masked assignment per column (``out[sel == 2] = values``).

Nothing loops over records in Python, except reading a list of ``bytes`` (``map(len, ...)`` and one
``b"".join``) and encoding headers: records that carry headers have them encoded one by one with the
per-record encoder (``records._encode_headers``), the resulting bytes are then placed like a third column.

Inputs: ``values`` (and optional ``keys``) are pyarrow ``binary`` / ``large_binary`` arrays (or chunked
arrays of them), sequences of ``bytes``/``None`` (``None`` = a null value/key), or a :class:`Column` (what
:func:`as_column` reads them into, which slices cheaply: a producer cuts one column into several batches).
``timestamps`` is one timestamp for every record, or one per record (a sequence of ints or an integer numpy
array).

Dependencies: the broker imports :mod:`oncelog.protocol` and its install (``pip install -e .``) has neither
numpy nor pyarrow (they come with the ``spark`` extra), so this module imports numpy lazily inside its
functions (importing the module costs nothing and needs neither), and never imports pyarrow: an Arrow array
is read through its buffers, so only a caller that already holds Arrow arrays needs pyarrow.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import crc32c as _crc32c

from oncelog.protocol import compression as _compression
from oncelog.protocol.record_batch import (
    ATTR_TRANSACTIONAL,
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_SIZE,
    CRC_OFFSET,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    Compression,
)
from oncelog.protocol.records import _encode_headers
from oncelog.protocol.varint import encode_varlong

if TYPE_CHECKING:
    import numpy as np

    _Arr = np.ndarray[Any, Any]

__all__ = ["Column", "ColumnarSection", "as_column", "build_batch_columnar", "records_section"]

_INT32_MAX = 0x7FFFFFFF
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1

#: a column of keys or values: a pyarrow binary/large_binary (chunked) array, bytes/None per record, or a Column
BinaryColumn = Any
#: one header list per record (empty: no headers); header values may be None
HeadersColumn = Sequence[Sequence[tuple[str, "bytes | bytearray | memoryview | None"]]]


@dataclass(slots=True)
class ColumnarSection:
    """An uncompressed records section and the batch header fields that depend on its records."""

    data: bytes
    count: int
    base_timestamp: int
    max_timestamp: int


@dataclass(slots=True)
class Column:
    """A binary column read once (:func:`as_column`): the non-null entries' bytes back to back and the length of
    every entry (-1: null). Slicing is cheap, so a caller can cut one column into several batches."""

    data: _Arr  # uint8
    lens: _Arr  # int64, -1 for null
    _offsets: _Arr | None = None  # where each entry starts in data (n + 1), made by the first slice

    def __len__(self) -> int:
        return len(self.lens)

    def byte_sizes(self) -> _Arr:
        """Bytes of each entry (0 for null)."""
        sizes: _Arr = _np().maximum(self.lens, 0)
        return sizes

    def slice(self, start: int, stop: int) -> Column:
        """Entries ``start`` to ``stop`` (exclusive)."""
        np = _np()
        if self._offsets is None:
            offsets = np.zeros(len(self.lens) + 1, np.int64)
            np.cumsum(np.maximum(self.lens, 0), out=offsets[1:])
            self._offsets = offsets
        o = self._offsets
        a, b = int(o[start]), int(o[stop])
        return Column(self.data[a:b], self.lens[start:stop], o[start : stop + 1] - a)

    def take(self, rows: _Arr) -> Column:
        """The entries at ``rows`` (an integer array), in that order: one gather of the bytes (a 2-D one when
        every entry has the same size, else through a per-byte index built with ``np.repeat``)."""
        np = _np()
        lens = self.lens[rows]
        sizes = np.maximum(lens, 0)
        n = len(self.lens)
        width = int(self.lens[0]) if n else 0
        if n and len(self.data) == n * width and (self.lens == width).all():
            data = self.data.reshape(n, width)[rows].reshape(-1) if width else self.data[:0]
            return Column(data, lens)
        if self._offsets is None:
            self.slice(0, 0)
        assert self._offsets is not None
        starts = self._offsets[:-1][rows]
        out_starts = np.cumsum(sizes) - sizes
        index = np.repeat(starts - out_starts, sizes) + np.arange(int(sizes.sum()), dtype=np.int64)
        return Column(self.data[index], lens)



def _np() -> Any:
    try:
        import numpy
    except ImportError as e:  # pragma: no cover - numpy is in the spark extra and in the test environment
        raise ImportError(
            "oncelog.protocol.record_batch_columnar needs numpy (pip install 'oncelog[spark]' or numpy)"
        ) from e
    return numpy


def as_column(col: BinaryColumn, what: str = "column") -> Column:
    """Read a pyarrow binary/large_binary (chunked) array or a sequence of bytes/None into a :class:`Column`."""
    return _column(col, None, what)


def _column(col: BinaryColumn, n: int | None, what: str) -> Column:
    np = _np()
    if isinstance(col, Column):
        if n is not None and len(col) != n:
            raise ValueError(f"{what} has {len(col)} entries for {n} records")
        return col
    if hasattr(col, "combine_chunks") and hasattr(col, "num_chunks"):  # pyarrow.ChunkedArray
        col = col.combine_chunks()
    if hasattr(col, "buffers") and hasattr(col, "type"):  # pyarrow.Array
        return _arrow_column(np, col, n, what)
    if isinstance(col, (str, bytes, bytearray, memoryview)):
        raise TypeError(f"{what} must be a column (a sequence of bytes or None, or an Arrow binary array)")
    items = col if isinstance(col, Sequence) else list(col)
    if n is not None and len(items) != n:
        raise ValueError(f"{what} has {len(items)} entries for {n} records")
    count = len(items)
    try:  # no None: lengths and bytes from C-level iteration
        lens = np.fromiter(map(len, items), np.int64, count)
        data = b"".join(items)
    except TypeError:
        for v in items:
            if v is not None and not isinstance(v, (bytes, bytearray, memoryview)):
                raise TypeError(
                    f"{what} entries must be bytes-like or None, got {type(v).__name__}"
                ) from None
        lens = np.array([-1 if v is None else len(v) for v in items], np.int64)
        data = b"".join([v for v in items if v is not None])
    return Column(np.frombuffer(data, np.uint8), lens)


def _arrow_column(np: Any, arr: Any, n: int | None, what: str) -> Column:
    type_id = str(arr.type)
    if type_id == "binary":
        off_dtype = np.int32
    elif type_id == "large_binary":
        off_dtype = np.int64
    else:
        raise TypeError(f"{what} must be an Arrow binary or large_binary array, got {type_id}")
    count = len(arr)
    if n is not None and count != n:
        raise ValueError(f"{what} has {count} entries for {n} records")
    validity, offsets_buf, data_buf = arr.buffers()
    if count == 0:
        return Column(np.zeros(0, np.uint8), np.zeros(0, np.int64))
    offsets = np.frombuffer(offsets_buf, off_dtype, count + 1, arr.offset * off_dtype().itemsize)
    offsets = offsets.astype(np.int64)
    raw = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    lens = np.diff(offsets)
    data = raw[offsets[0] : offsets[-1]]
    if validity is not None and arr.null_count:
        nulls = ~arr.is_valid().to_numpy(zero_copy_only=False)
        if lens[nulls].any():  # Arrow allows null slots with bytes: drop them
            keep = lens.copy()
            keep[nulls] = 0
            data = data[_runs_mask(np, offsets[:-1] - offsets[0], keep, len(data))]
        lens = lens.copy()
        lens[nulls] = -1
    return Column(np.ascontiguousarray(data), lens)


def _runs_mask(np: Any, starts: _Arr, lens: _Arr, total: int) -> _Arr:
    """Mask of ``total`` bytes, True on ``[starts[i], starts[i] + lens[i])`` (sorted, disjoint ranges)."""
    n = len(starts)
    counts = np.empty(2 * n + 1, np.int64)
    ends = starts + lens
    counts[0] = starts[0] if n else total
    if n:
        counts[2:-1:2] = starts[1:] - ends[:-1]
        counts[1:-1:2] = lens
        counts[-1] = total - ends[-1]
    pattern = np.zeros(2 * n + 1, np.bool_)
    pattern[1::2] = True
    mask: _Arr = np.repeat(pattern, counts)
    return mask


_THRESHOLDS: Any = None


def _varint_sizes(np: Any, z: _Arr) -> _Arr:
    """Encoded sizes (1-10) of the unsigned (already zig-zagged) uint64 values ``z``."""
    global _THRESHOLDS
    if _THRESHOLDS is None:
        _THRESHOLDS = np.array([1 << (7 * k) for k in range(1, 10)], np.uint64)
    sizes: _Arr = np.searchsorted(_THRESHOLDS, z, side="right").astype(np.int64) + 1
    return sizes


def _zigzag(np: Any, v: _Arr) -> _Arr:
    """Zig-zag of int64 values as uint64."""
    return ((v << 1) ^ (v >> 63)).view(np.uint64)


def _put_varints(np: Any, out: _Arr, pos: _Arr, z: _Arr, sizes: _Arr) -> None:
    """Write the varint of ``z[i]`` (``sizes[i]`` bytes) at ``out[pos[i]:]`` for every i."""
    if not len(z):
        return
    top = int(sizes.max())
    if top == 1:
        out[pos] = z.astype(np.uint8)
        return
    for k in range(top):
        if k:
            sel = sizes > k
            p, zz, ss = pos[sel], z[sel], sizes[sel]
        else:
            p, zz, ss = pos, z, sizes
        b = ((zz >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
        b |= (ss > k + 1).astype(np.uint8) << np.uint8(7)
        out[p + k] = b


def _encode_section(
    values: BinaryColumn,
    keys: BinaryColumn | None = None,
    *,
    timestamps: int | Sequence[int] | Any,
    headers: HeadersColumn | None = None,
    header_room: int = 0,
) -> tuple[Any, ColumnarSection]:
    """The uncompressed records section of ``len(values)`` records at offset deltas 0..n-1.

    Returns ``(buffer, section)``: ``buffer`` is a numpy uint8 array of ``header_room`` bytes (left for the
    caller: the batch header) followed by the section; ``section.data`` is left empty."""
    np = _np()
    val = _column(values, None, "values")
    n = len(val.lens)
    if n > _INT32_MAX:
        raise OverflowError("a record batch holds at most 2**31 - 1 records")
    key = _column(keys, n, "keys") if keys is not None else None

    # timestamps: deltas from the first record's, as RecordBatchBuilder
    if not isinstance(timestamps, int) and np.ndim(timestamps) == 0:  # a numpy integer
        timestamps = operator.index(timestamps)  # type: ignore[arg-type]
    if isinstance(timestamps, int):
        if not _INT64_MIN <= timestamps <= _INT64_MAX:
            raise OverflowError(f"timestamp {timestamps} does not fit in int64")
        base_ts = timestamps
        max_ts = max(-1, timestamps) if n else -1
        ts_z = None
    else:
        ts = np.asarray(timestamps)
        if ts.ndim != 1 or len(ts) != n:
            raise ValueError(f"timestamps has shape {ts.shape} for {n} records")
        if n and ts.dtype.kind not in "iu":
            if ts.dtype == object:
                ts = np.array([int(t) for t in ts], np.int64)  # raises OverflowError beyond int64
            else:
                raise TypeError(f"timestamps must be integers, got {ts.dtype}")
        if ts.dtype == np.uint64 and n and int(ts.max()) > _INT64_MAX:
            raise OverflowError("a timestamp does not fit in int64")
        ts = ts.astype(np.int64, copy=False)
        base_ts = int(ts[0]) if n else 0
        max_ts = max(-1, int(ts.max())) if n else -1
        if n and (int(ts.max()) - base_ts > _INT64_MAX or int(ts.min()) - base_ts < _INT64_MIN):
            raise OverflowError("a timestamp delta from the first record's does not fit in int64")
        ts_z = _zigzag(np, ts - np.int64(base_ts))

    if headers is not None:
        if len(headers) != n:
            raise ValueError(f"headers has {len(headers)} entries for {n} records")
        hdr_blobs = [_encode_headers(h) if h else b"\x00" for h in headers]
        hdr: Column | None = Column(
            np.frombuffer(b"".join(hdr_blobs), np.uint8), np.fromiter(map(len, hdr_blobs), np.int64, n)
        )
        if hdr is not None and len(hdr.data) == n:  # every record without headers
            hdr = None
    else:
        hdr = None

    # field sizes
    one = np.ones(n, np.int64)
    ts_size = one if ts_z is None else _varint_sizes(np, ts_z)
    off_z = (np.arange(n, dtype=np.int64) << 1).view(np.uint64)
    off_size = _varint_sizes(np, off_z)
    if key is None:
        klen_z = None
        klen_size = one
        kbytes = np.zeros(n, np.int64)
    else:
        klen_z = _zigzag(np, key.lens)
        klen_size = _varint_sizes(np, klen_z)
        kbytes = np.maximum(key.lens, 0)
    vlen_z = _zigzag(np, val.lens)
    vlen_size = _varint_sizes(np, vlen_z)
    vbytes = np.maximum(val.lens, 0)
    hbytes = one if hdr is None else hdr.lens

    body = 1 + ts_size + off_size + klen_size + kbytes + vlen_size + vbytes + hbytes
    body_z = (body << 1).view(np.uint64)
    body_size = _varint_sizes(np, body_z)
    rec_size = body_size + body
    rec_end = np.cumsum(rec_size)
    total = int(rec_end[-1]) if n else 0
    out = np.empty(header_room + total, np.uint8)
    if not n:
        return out, ColumnarSection(b"", 0, base_ts, max_ts)
    if hdr is None:
        # runs of records of one layout (varint sizes, key and value lengths): each run is written as a 2-D block
        # of rows, its small fields column by column (constant ones broadcast), keys and values as blocks
        klens = key.lens if key is not None else np.full(n, -1, np.int64)
        shape = np.stack([ts_size, off_size, klens, val.lens])
        change = np.flatnonzero((shape[:, 1:] != shape[:, :-1]).any(axis=0)) + 1
        if (len(change) + 1) * _RECORDS_PER_RUN <= n:
            _write_runs(np, out, rec_end - rec_size + header_room, shape, change, n, ts_z, off_z, key, val)
            return out, ColumnarSection(b"", n, base_ts, max_ts)

    # The small bytes of every record, packed: A = length, attributes, timestampDelta, offsetDelta, keyLength
    # (before the key), B = valueLength (between key and value), C = headerCount 0 (after the value; none when
    # headers are a data column). Written into a compact array: scattered writes into it stay in cache.
    a_size = body_size + 1 + ts_size + off_size + klen_size
    c = 1 if hdr is None else 0
    small_size = a_size + vlen_size + c
    small_end = np.cumsum(small_size)
    small = np.empty(int(small_end[-1]), np.uint8)
    p = small_end - small_size
    _put_varints(np, small, p, body_z, body_size)
    p = p + body_size
    small[p] = 0  # record attributes
    p = p + 1
    if ts_z is None:
        small[p] = 0
    else:
        _put_varints(np, small, p, ts_z, ts_size)
    p = p + ts_size
    _put_varints(np, small, p, off_z, off_size)
    p = p + off_size
    if klen_z is None:
        small[p] = 1  # zig-zag -1: null key
    else:
        _put_varints(np, small, p, klen_z, klen_size)
    p = p + klen_size
    _put_varints(np, small, p, vlen_z, vlen_size)
    if c:
        small[p + vlen_size] = 0

    # Interleave small bytes, keys, values (and headers) into ``out``
    hdr_bytes = hbytes if hdr is not None else np.zeros(n, np.int64)
    layout = np.stack([a_size, kbytes, vlen_size, vbytes, hdr_bytes])  # sizes of the parts of each record
    change = np.flatnonzero((layout[:, 1:] != layout[:, :-1]).any(axis=0)) + 1
    columns = [key.data if key is not None else None, val.data, hdr.data if hdr is not None else None]
    if (len(change) + 1) * _RECORDS_PER_RUN <= n:
        _copy_runs(np, out, header_room, layout, c, small, columns, change, n)
    else:
        _copy_masked(np, out, header_room, layout, c, small, columns, n)
    return out, ColumnarSection(b"", n, base_ts, max_ts)


#: the run copy is used when runs of records with equal field sizes average at least this many records
_RECORDS_PER_RUN = 64


def _put_constant(o: _Arr, col: int, data: bytes) -> None:
    """Write ``data`` into columns [col, col + len(data)) of every row of ``o`` (a column at a time: numpy's
    broadcast of a short row is several times slower)."""
    for k, b in enumerate(data):
        o[:, col + k] = b


def _put_column_varints(np: Any, o: _Arr, col: int, z: _Arr, size: int) -> None:
    """Write the varints ``z`` (``size`` bytes each) into columns [col, col + size) of the rows of ``o``."""
    for k in range(size):
        b = ((z >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
        if k < size - 1:
            b |= np.uint8(0x80)
        o[:, col + k] = b


def _write_runs(
    np: Any,
    out: _Arr,
    rec_at: _Arr,
    shape: _Arr,
    change: _Arr,
    n: int,
    ts_z: _Arr | None,
    off_z: _Arr,
    key: Column | None,
    val: Column,
) -> None:
    """Write records without header columns run by run: within a run (``shape`` rows equal: timestamp and offset
    delta varint sizes, key and value lengths) every record has one size, so the run is a 2-D block with a record
    per row; the length, attributes, key length, value length and header count bytes are the same in every row."""
    starts = np.concatenate(([0], change))
    ends = np.concatenate((change, [n]))
    rows = ends - starts
    kbytes = np.maximum(shape[2, starts], 0) * rows  # key and value bytes of each run
    vbytes = np.maximum(shape[3, starts], 0) * rows
    k_at = (np.cumsum(kbytes) - kbytes).tolist()
    v_at = (np.cumsum(vbytes) - vbytes).tolist()
    for j, (s, e, at) in enumerate(zip(starts.tolist(), ends.tolist(), rec_at[starts].tolist())):
        r = e - s
        ts_size, off_size, klen, vlen = shape[:, s].tolist()
        klen_b = encode_varlong(klen)
        vlen_b = encode_varlong(vlen)
        kb, vb = max(klen, 0), max(vlen, 0)
        body = 1 + ts_size + off_size + len(klen_b) + kb + len(vlen_b) + vb + 1
        body_b = encode_varlong(body)
        w = len(body_b) + body
        o = out[at : at + r * w].reshape(r, w)
        c = len(body_b)
        _put_constant(o, 0, body_b)
        o[:, c] = 0  # attributes
        c += 1
        if ts_z is None:
            o[:, c] = 0
        else:
            _put_column_varints(np, o, c, ts_z[s:e], ts_size)
        c += ts_size
        _put_column_varints(np, o, c, off_z[s:e], off_size)
        c += off_size
        _put_constant(o, c, klen_b)
        c += len(klen_b)
        if kb:
            assert key is not None
            o[:, c : c + kb] = key.data[k_at[j] : k_at[j] + r * kb].reshape(r, kb)
            c += kb
        _put_constant(o, c, vlen_b)
        c += len(vlen_b)
        if vb:
            o[:, c : c + vb] = val.data[v_at[j] : v_at[j] + r * vb].reshape(r, vb)
            c += vb
        o[:, c] = 0  # header count


def _copy_runs(
    np: Any,
    out: _Arr,
    room: int,
    layout: _Arr,
    c: int,
    small: _Arr,
    columns: list[_Arr | None],
    change: _Arr,
    n: int,
) -> None:
    """Copy runs of records whose field sizes are all equal as 2-D blocks (one row per record)."""
    starts = np.concatenate(([0], change)).tolist()
    ends = np.concatenate((change, [n])).tolist()
    sizes = layout[:, starts].T.tolist()  # a, k, b, v, h of each run
    # where each run starts in out, small and each data column
    lens = np.array(ends) - np.array(starts)
    run_sizes = layout[:, starts] * lens  # bytes of each part per run
    rec = run_sizes[0] + run_sizes[1] + run_sizes[2] + run_sizes[3] + run_sizes[4] + c * lens
    out_at = (np.cumsum(rec) - rec + room).tolist()
    sm = run_sizes[0] + run_sizes[2] + c * lens
    small_at = (np.cumsum(sm) - sm).tolist()
    data_at = [(np.cumsum(run_sizes[i]) - run_sizes[i]).tolist() for i in (1, 3, 4)]
    key_col, val_col, hdr_col = columns
    for j, (s, e) in enumerate(zip(starts, ends)):
        r = e - s
        a, k, b, v, h = sizes[j]
        w = a + k + b + v + h + c
        o = out[out_at[j] : out_at[j] + r * w].reshape(r, w)
        sw = a + b + c
        sb = small[small_at[j] : small_at[j] + r * sw].reshape(r, sw)
        o[:, :a] = sb[:, :a]
        if k:
            assert key_col is not None
            o[:, a : a + k] = key_col[data_at[0][j] : data_at[0][j] + r * k].reshape(r, k)
        o[:, a + k : a + k + b] = sb[:, a : a + b]
        if v:
            assert val_col is not None
            o[:, a + k + b : a + k + b + v] = val_col[data_at[1][j] : data_at[1][j] + r * v].reshape(r, v)
        if h:
            assert hdr_col is not None
            o[:, a + k + b + v :] = hdr_col[data_at[2][j] : data_at[2][j] + r * h].reshape(r, h)
        elif c:
            o[:, -1] = sb[:, -1]


def _copy_masked(
    np: Any, out: _Arr, room: int, layout: _Arr, c: int, small: _Arr, columns: list[_Arr | None], n: int
) -> None:
    """Interleave by a per-byte selector: 0 small bytes, 1 key, 2 value, 3 headers (one masked copy each)."""
    counts = np.empty((6, n), np.int64)
    counts[:5] = layout
    counts[5] = c
    codes = np.array([0, 1, 0, 2, 3, 0], np.uint8)
    sel = np.repeat(np.tile(codes, n), counts.T.ravel())
    view = out[room:]
    view[sel == 0] = small
    for code, col in zip((1, 2, 3), columns):
        if col is not None and len(col):
            view[sel == code] = col


def records_section(
    values: BinaryColumn,
    keys: BinaryColumn | None = None,
    *,
    timestamps: int | Sequence[int] | Any,
    headers: HeadersColumn | None = None,
) -> ColumnarSection:
    """The uncompressed records section of the given columns, as bytes in ``section.data``."""
    buf, section = _encode_section(values, keys, timestamps=timestamps, headers=headers)
    section.data = buf.tobytes()
    return section


def build_batch_columnar(
    values: BinaryColumn,
    keys: BinaryColumn | None = None,
    *,
    timestamps: int | Sequence[int] | Any,
    headers: HeadersColumn | None = None,
    compression: int = Compression.NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """One v2 record batch (CREATE_TIME, not control) of the records given as columns: byte for byte what
    ``RecordBatchBuilder(compression, producer_id, producer_epoch, base_sequence, is_transactional,
    base_offset=base_offset, partition_leader_epoch=...)`` gives after ``append(ts, key, value, headers)`` of
    every record then ``build()``. ``timestamps``: one for all records or one per record."""
    if not 0 <= compression <= Compression.ZSTD:
        raise ValueError(f"unknown compression codec id {compression}; use a Compression constant (0-4)")
    room = 0 if compression else BATCH_HEADER_SIZE
    buf, section = _encode_section(
        values, keys, timestamps=timestamps, headers=headers, header_room=room
    )
    count = section.count
    if count == 0:
        raise ValueError("cannot build a record batch without records; see build_empty_batch")
    if compression:
        out: Any = bytearray(BATCH_HEADER_SIZE)
        out += _compression.compress(compression, memoryview(buf))
    else:
        out = buf
    HEADER_STRUCT.pack_into(
        out,
        0,
        base_offset,
        len(out) - LOG_OVERHEAD,
        partition_leader_epoch,
        MAGIC_V2,
        0,
        compression | (ATTR_TRANSACTIONAL if is_transactional else 0),
        count - 1,
        section.base_timestamp,
        section.max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    )
    mv = memoryview(out)
    crc = int(_crc32c.crc32c(mv[ATTRIBUTES_OFFSET:]))
    mv[CRC_OFFSET : CRC_OFFSET + 4] = crc.to_bytes(4, "big")
    mv.release()
    return bytes(out)
