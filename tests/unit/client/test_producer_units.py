"""Partitioner, accumulator and config validation without a network."""

from __future__ import annotations

import random

import pytest

from oncelog.client.config import parse_consumer_config, parse_producer_config
from oncelog.client.connection import negotiate_versions
from oncelog.client.consumer.fetcher import ReadUncommittedFilter, decode_fetched
from oncelog.client.errors import ConfigError, KafkaError
from oncelog.client.producer.accumulator import RecordAccumulator
from oncelog.client.producer.partitioner import Partitioner
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.records import (
    Compression,
    RecordBatchBuilder,
    build_control_batch,
    decode_records,
    set_base_offset,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# Java's DefaultPartitioner: Utils.toPositive(Utils.murmur2(key)) % numPartitions; values checked with Kafka 3.x
@pytest.mark.parametrize("key,n,expected", [(b"21", 10, (-973932308 & 0x7FFFFFFF) % 10), (b"", 3, None)])
def test_keyed_partition_is_murmur2(key: bytes, n: int, expected: int | None) -> None:
    from oncelog.protocol.murmur2 import murmur2
    p = Partitioner(lambda t, q: False)
    got = p.partition("t", key, list(range(n)))
    assert got == (expected if expected is not None else (murmur2(key) & 0x7FFFFFFF) % n)


def test_keyed_partition_ignores_availability_and_is_stable() -> None:
    p = Partitioner(lambda t, q: False)
    first = [p.partition("t", f"k{i}".encode(), list(range(7)), available=[0]) for i in range(50)]
    again = [p.partition("t", f"k{i}".encode(), list(range(7))) for i in range(50)]
    assert first == again
    assert len(set(first)) > 3  # spread, not forced onto the only available partition


def test_sticky_partition_holds_while_batch_open_then_moves() -> None:
    open_batches: set[tuple[str, int]] = set()
    p = Partitioner(lambda t, q: (t, q) in open_batches, rng=random.Random(1))
    first = p.partition("t", None, [0, 1, 2, 3])
    open_batches.add(("t", first))
    assert all(p.partition("t", None, [0, 1, 2, 3]) == first for _ in range(20))
    open_batches.clear()  # the batch was closed (full or sent)
    second = p.partition("t", None, [0, 1, 2, 3])
    assert second != first
    assert p.sticky_partition("t") == second


def test_sticky_partition_prefers_available() -> None:
    p = Partitioner(lambda t, q: False, rng=random.Random(3))
    assert {p.partition("t", None, [0, 1, 2], available=[2]) for _ in range(10)} == {2}


def test_accumulator_batches_by_size_and_linger() -> None:
    clock = FakeClock()
    acc = RecordAccumulator(batch_size=200, linger_ms=10, compression=Compression.NONE, monotonic=clock)
    tp = ("t", 0)
    full, new = acc.append(tp, 1, b"k", b"v" * 10, [], None)
    assert (full, new) == (False, True)
    assert acc.ready(set()) == ([], pytest.approx(0.01))
    clock.now += 0.011
    assert acc.ready(set())[0] == [tp]
    assert acc.ready({tp})[0] == []  # muted partitions are never ready
    for _ in range(10):
        acc.append(tp, 2, None, b"x" * 30, [("h", b"1")], None)
    (first,) = acc.drain([tp])
    assert first.closed and first.size <= 200 + 60
    recs = decode_records(first.build())
    assert recs[0].key == b"k" and recs[1].headers == [("h", b"1")]
    assert acc.pending_records == 11
    rest = []
    while batch := acc.drain([tp]):  # one batch per partition per drain
        rest += batch
    assert len(rest) >= 2 and all(b.size <= 200 for b in rest)
    assert sum(len(b.records) for b in [first, *rest]) == 11


def test_accumulator_flush_makes_fresh_batches_ready_and_reenqueue_keeps_order() -> None:
    clock = FakeClock()
    acc = RecordAccumulator(batch_size=10_000, linger_ms=1000, compression=Compression.GZIP, monotonic=clock)
    acc.append(("t", 1), 1, None, b"a", [], None)
    assert acc.ready(set())[0] == []
    acc.begin_flush()
    assert acc.ready(set())[0] == [("t", 1)]
    acc.end_flush()
    (b,) = acc.drain([("t", 1)])
    acc.append(("t", 1), 1, None, b"b", [], None)
    acc.reenqueue(b, retry_at=clock.now + 0.1)
    ready, delay = acc.ready(set())
    assert ready == [] and delay == pytest.approx(0.1)
    clock.now += 0.2
    (again,) = acc.drain(acc.ready(set())[0])
    assert again is b


def test_batch_complete_assigns_offsets_and_errors() -> None:
    acc = RecordAccumulator(batch_size=10_000, linger_ms=0, compression=0)
    seen: list = []
    for i in range(3):
        acc.append(("t", 0), 5, None, str(i).encode(), [], lambda e, m: seen.append((e, m)))
    (b,) = acc.drain([("t", 0)])
    for cb, err, msg in b.complete(40, -1, None):
        cb(err, msg)
    assert [m.offset() for _, m in seen] == [40, 41, 42]
    err = KafkaError(ErrorCode.MESSAGE_TOO_LARGE)
    assert all(e is err for _, e, _ in b.complete(-1, -1, err))
    assert not err.retriable() and KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER).retriable()


def test_prebuilt_batches_queue_after_the_open_batch_and_report_once() -> None:
    """produce_batch's path: the open batch is closed and goes first, the pre-encoded batches follow in order,
    count their records (for sequences and pending_records), are stamped like built ones and report once."""
    from oncelog.client.producer.accumulator import BatchMessage
    from oncelog.client.producer.idempotence import stamp_batch
    from oncelog.protocol.record_batch_columnar import build_batch_columnar

    clock = FakeClock()
    acc = RecordAccumulator(batch_size=10_000, linger_ms=1000, compression=0, monotonic=clock)
    acc.append(("t", 0), 7, None, b"one", [], None)
    raw1 = build_batch_columnar([b"a", b"b"], timestamps=11)
    raw2 = build_batch_columnar([b"c"], [b"k"], timestamps=[12])
    seen: list = []
    acc.append_prebuilt(("t", 0), [(raw1, 2, 11), (raw2, 1, 12)], lambda e, m: seen.append((e, m)))
    assert acc.pending_records == 4
    assert acc.ready(set())[0] == [("t", 0)]  # closed batches: no linger
    acc.append(("t", 0), 8, None, b"two", [], None)  # a new open batch after them
    first, b1, b2, last = (acc.drain([("t", 0)])[0] for _ in range(4))
    assert [x.record_count for x in (first, b1, b2, last)] == [1, 2, 1, 1]
    assert first.prebuilt is None and last.prebuilt is None and b1.size == len(raw1)
    assert b1.build() == raw1
    b1.set_producer(42, 3, 100, True)
    ref = RecordBatchBuilder(producer_id=42, producer_epoch=3, base_sequence=100, is_transactional=True)
    ref.append(11, None, b"a")
    ref.append(11, None, b"b")
    assert b1.build() == stamp_batch(raw1, 42, 3, 100, True) == ref.build()
    assert [r.sequence for r in decode_records(b1.build())] == [100, 101]
    for cb, err, msg in b1.complete(500, -1, None) + b2.complete(-1, -1, KafkaError(ErrorCode.MESSAGE_TOO_LARGE)):
        cb(err, msg)
    (e1, m1), (e2, m2) = seen
    assert isinstance(m1, BatchMessage) and (e1, m1.offset(), m1.count, m1.timestamp()[1]) == (None, 500, 2, 11)
    assert isinstance(m2, BatchMessage) and e2 is not None and m2.error() is e2 and m2.offset() is None and m2.count == 1
    for b in (first, b1, b2, last):
        acc.done(b)
    assert acc.pending_records == 0


def test_producer_config_validation() -> None:
    c = parse_producer_config({"bootstrap.servers": "h:1", "acks": "all", "linger.ms": "7",
                               "compression.type": "zstd", "enable.idempotence": False})
    assert (c.acks, c.linger_ms, c.compression) == (-1, 7, Compression.ZSTD)
    with pytest.raises(ConfigError, match="did you mean 'linger.ms'"):
        parse_producer_config({"bootstrap.servers": "h:1", "linger.mss": 1})
    with pytest.raises(ConfigError, match="acks"):
        parse_producer_config({"bootstrap.servers": "h:1", "acks": 2})
    with pytest.raises(ConfigError, match="compression.type"):
        parse_producer_config({"bootstrap.servers": "h:1", "compression.type": "brotli"})
    with pytest.raises(ConfigError, match="bootstrap.servers"):
        parse_producer_config({})
    with pytest.raises(ConfigError, match="batch.size"):
        parse_producer_config({"bootstrap.servers": "h:1", "batch.size": 0})
    assert parse_producer_config({"bootstrap.servers": "h:1", "enable.idempotence": True}).enable_idempotence


def test_consumer_config_validation() -> None:
    c = parse_consumer_config({"bootstrap.servers": "h:1", "auto.offset.reset": "smallest",
                               "isolation.level": "read_committed"})
    assert (c.auto_offset_reset, c.isolation_level) == ("earliest", 1)
    with pytest.raises(ConfigError, match="isolation.level"):
        parse_consumer_config({"bootstrap.servers": "h:1", "isolation.level": "serializable"})


def test_version_negotiation_picks_highest_common() -> None:
    chosen = negotiate_versions({0: (0, 9), 1: (0, 20), 3: (0, 5), 2: (10, 12), 9999: (0, 1)})
    assert chosen[0] == 9  # client 3..11, broker ..9
    assert chosen[1] == 17  # client max
    assert chosen[3] == 5
    assert 2 not in chosen  # no overlap (client 1..9)
    assert 9999 not in chosen


def test_decode_fetched_skips_control_earlier_offsets_and_partial_tail() -> None:
    b = RecordBatchBuilder()
    for i in range(4):
        b.append(100 + i, None, f"v{i}".encode())
    data = bytearray(b.build())
    marker = bytearray(build_control_batch(producer_id=1, producer_epoch=0, commit=True, coordinator_epoch=0,
                                           timestamp_ms=5))
    set_base_offset(marker, 0, 4)
    b2 = RecordBatchBuilder(base_offset=5)
    b2.append(200, b"k", b"tail")
    tail = b2.build()
    blob = bytes(data + marker + tail[:-3])  # last batch cut short, as brokers may send
    msgs, nxt = decode_fetched("t", 0, blob, 2, ReadUncommittedFilter())
    assert [m.offset() for m in msgs] == [2, 3]
    assert [m.value() for m in msgs] == [b"v2", b"v3"]
    assert nxt == 5  # past the control batch, before the partial one
