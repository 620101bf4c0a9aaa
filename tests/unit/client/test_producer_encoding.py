"""The producer's deferred encoding: ``RecordBatchBuilder.extend`` writes the bytes ``append`` writes one record
at a time, and the accumulator's counted batch size is the built batch's exact size."""

from __future__ import annotations

import random

import pytest

from oncelog.client.producer.accumulator import RecordAccumulator
from oncelog.protocol.records import Compression, RecordBatchBuilder, decode_records

Rec = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int, None]


def _random_records(rng: random.Random, n: int) -> list[Rec]:
    base = rng.randrange(0, 2**41)
    out: list[Rec] = []
    for _ in range(n):
        key = None if rng.random() < 0.4 else rng.randbytes(rng.choice([0, 1, 63, 64, 200, 9000]))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.choice([0, 5, 63, 64, 100, 8191, 8192, 20000]))
        headers: list[tuple[str, bytes | None]] = []
        if rng.random() < 0.2:
            headers = [(rng.choice(["h", "ünï", "x" * 70]), rng.choice([None, b"", b"v" * 100]))
                       for _ in range(rng.randrange(1, 3))]
        ts = base + rng.choice([0, 1, -1, 63, 64, -65, 8191, -8193, 10**6, -(10**7)])
        out.append((key, value, headers, ts, None))
    return out


def _columns(records: list[Rec]) -> tuple[list[bytes | None], list[bytes | None], list[int],
                                          dict[int, list[tuple[str, bytes | None]]]]:
    return ([r[0] for r in records], [r[1] for r in records], [r[3] for r in records],
            {i: r[2] for i, r in enumerate(records) if r[2]})


@pytest.mark.parametrize("seed", range(12))
def test_extend_writes_what_append_writes(seed: int) -> None:
    rng = random.Random(seed)
    records = _random_records(rng, rng.choice([1, 2, 30, 200]))
    for compression in (Compression.NONE, Compression.GZIP):
        one = RecordBatchBuilder(compression)
        for key, value, headers, ts, _ in records:
            one.append(ts, key, value, headers)
        bulk = RecordBatchBuilder(compression)
        split = rng.randrange(len(records) + 1)
        for part in (records[:split], records[split:]):
            bulk.extend(*_columns(part))
        assert bulk.build() == one.build()
        assert bulk.size_in_bytes == one.size_in_bytes


def test_extend_past_the_small_varint_table() -> None:
    """More than 8192 records: offset deltas leave the table of small varints."""
    records: list[Rec] = [(None, b"v", [], 5 + (i % 3), None) for i in range(9000)]
    one = RecordBatchBuilder()
    for key, value, headers, ts, _ in records:
        one.append(ts, key, value, headers)
    bulk = RecordBatchBuilder()
    bulk.extend(*_columns(records))
    assert bulk.build() == one.build()


@pytest.mark.parametrize("seed", range(10))
def test_keyless_records_take_the_column_encoder(seed: int) -> None:
    """Keyless records without headers (the producer's common case) are encoded column-wise
    (``protocol/record_encode.py``) into the bytes ``append`` writes: value lengths and timestamp deltas (from the
    batch's first record) around the varint widths and the table's edges (beyond them the loop encodes), offset
    deltas past 8192."""
    rng = random.Random(seed)
    base = rng.randrange(0, 2**41)
    n = rng.choice([1, 5, 64, 300, 9000])
    lengths = [0, 5, 63, 64, 100, 8100, 8175, 8176, 9000]
    wide = rng.random() < 0.3  # some records beyond the table: the whole call goes through the loop
    records: list[Rec] = [(None, rng.randbytes(rng.choice(lengths if wide else lengths[:7])), [],
                           base + rng.choice([0, 1, -1, 63, 64, -65, 4095, -4096] + ([9000, -9000] if wide else [])),
                           None) for _ in range(n)]
    one = RecordBatchBuilder()
    for key, value, headers, ts, _ in records:
        one.append(ts, key, value, headers)
    bulk = RecordBatchBuilder()
    split = rng.randrange(n + 1)
    for part in (records[:split], records[split:]):
        bulk.extend(*_columns(part))
    assert bulk.build() == one.build()


def test_accumulator_append_value_counts_the_exact_batch_size() -> None:
    """The producer's shortcut for keyless records (``append_value``) counts sizes as ``append`` does."""
    rng = random.Random(7)
    acc = RecordAccumulator(batch_size=50_000, linger_ms=0, compression=0)
    tp = ("t", 0)
    sent: list[tuple[bytes, int]] = []
    for i in range(3000):
        value, ts = rng.randbytes(rng.choice([0, 1, 63, 64, 100, 300])), 10**12 + rng.choice([0, 63, 64, 9000])
        batch = acc.open_batch(tp)
        if batch is None or acc.append_value(batch, ts, value, None) is None:
            acc.append(tp, ts, None, value, [], None)
        sent.append((value, ts))
    got: list[tuple[bytes | None, int]] = []
    while batches := acc.drain([tp]):
        (b,) = batches
        raw = b.build()
        assert b.size == len(raw)
        got += [(r.value, r.timestamp) for r in decode_records(raw)]
    assert got == sent


def test_keyed_records_between_keyless_ones_keep_their_keys() -> None:
    """A keyless record adds nothing to the key column (it ends at the last keyed record): the built batch and the
    delivery reports still give each record its own key, through both ways of appending."""
    acc = RecordAccumulator(batch_size=1_000_000, linger_ms=0, compression=0)
    tp = ("t", 0)
    keys = [None, None, b"k2", None, b"k4", None, None]
    reports: list[bytes | None] = []
    acc.append(tp, 1, None, b"v0", [], lambda e, m: reports.append(m.key()))
    for i, key in enumerate(keys[1:], 1):
        batch = acc.open_batch(tp)
        if key is not None or batch is None or acc.append_value(batch, 1 + i, b"v%d" % i,
                                                                lambda e, m: reports.append(m.key())) is None:
            acc.append(tp, 1 + i, key, b"v%d" % i, [], lambda e, m: reports.append(m.key()))
    (b,) = acc.drain([tp])
    assert b.keys == [None, None, b"k2", None, b"k4"]  # nothing for the two keyless records at the end
    assert [r.key for r in decode_records(b.build())] == keys
    for cb, err, msg in b.complete(100, -1, None):
        cb(err, msg)
    assert reports == keys


def test_a_batch_aborted_while_open_takes_no_more_records() -> None:
    """abort_all() (abort_transaction(), close()) takes the open batch away: the shortcut that held it appends no
    record to it any more (it would never be sent)."""
    acc = RecordAccumulator(batch_size=10_000, linger_ms=1000, compression=0)
    acc.append(("t", 0), 1, None, b"a", [], None)
    batch = acc.open_batch(("t", 0))
    assert batch is not None and acc.append_value(batch, 2, b"b", None) is False
    assert acc.abort_all() == [batch]
    assert acc.append_value(batch, 3, b"c", None) is None and acc.open_batch(("t", 0)) is None
    assert batch.values == [b"a", b"b"]


@pytest.mark.parametrize("seed", range(8))
def test_accumulator_counts_the_exact_batch_size(seed: int) -> None:
    rng = random.Random(seed)
    acc = RecordAccumulator(batch_size=rng.choice([300, 16384, 200_000]), linger_ms=0, compression=0)
    tp = ("t", 0)
    records = _random_records(rng, 150)
    for key, value, headers, ts, _ in records:
        acc.append(tp, ts, key, value, headers, None)
    got: list[Rec] = []
    while batches := acc.drain([tp]):
        (b,) = batches
        raw = b.build()
        assert b.size == len(raw)
        got += [(r.key, r.value, r.headers, r.timestamp, None) for r in decode_records(raw)]
    assert got == [(k, v, h or [], ts, cb) for k, v, h, ts, cb in records]


def test_extend_checks_the_columns() -> None:
    with pytest.raises(ValueError, match="same length"):
        RecordBatchBuilder().extend([None], [b"a", b"b"], [1, 2])
