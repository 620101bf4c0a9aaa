"""``Producer.produce_batch``: records given as columns, encoded column-wise into pre-built batches, queued behind
the records produced one by one, and sent with the same idempotent/transactional sequences: read back in order
(native consumer), and every record's producer sequence equals its offset (raw fetch of the stored batches)."""

from __future__ import annotations

import itertools
import time
import uuid
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from helpers.rawclient import RawClient

from oncelog.client import OFFSET_BEGINNING, Admin, Consumer, KafkaError, Message, Producer
from oncelog.client.producer import BatchMessage
from oncelog.protocol.murmur2 import partition_for_key

pytestmark = pytest.mark.timeout(180)
N = 10_000
T = 30.0


def _columns(n: int, tag: str) -> tuple[list[bytes], list[bytes | None], np.ndarray]:
    values = [f"{tag}-{i:06d}-".encode() + b"x" * 88 for i in range(n)]  # 100 bytes each
    keys: list[bytes | None] = [None if i % 5 == 0 else f"k{i}".encode() for i in range(n)]
    timestamps = np.arange(n, dtype=np.int64) + 1_700_000_000_000
    return values, keys, timestamps


def _consume(bootstrap: str, topic: str, want: int, isolation: str = "read_uncommitted") -> list[Message]:
    with Consumer({"bootstrap.servers": bootstrap, "isolation.level": isolation}) as c:
        c.assign([(topic, 0, OFFSET_BEGINNING)])
        got: list[Message] = []
        deadline = time.monotonic() + T
        while len(got) < want and time.monotonic() < deadline:
            got += c.consume(2000, 1.0)
        assert c.poll(0.5) is None  # nothing more
    return got


def _check_sequences(bootstrap: str, topic: str, offsets: list[int], sequences: list[int] | None = None) -> None:
    """A fresh producer on a fresh partition: its records (at ``offsets``; transaction markers, which carry no
    sequence, aside) have the sequences 0, 1, 2... (or ``sequences``) exactly as if produced one by one."""
    with RawClient(bootstrap) as raw:
        records = [r for r in raw.fetch_all(topic, 0) if r.sequence >= 0]
    assert [r.offset for r in records] == offsets
    assert [r.sequence for r in records] == (list(range(len(offsets))) if sequences is None else sequences)


@pytest.mark.parametrize("compression", ["none", "lz4"])
def test_idempotent_produce_batch_between_single_records(bootstrap: str, topic_name: str, compression: str) -> None:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics(topic_name, 1)
    values, keys, ts = _columns(N, "b")
    reports: list[tuple[KafkaError | None, Message]] = []
    errors: list[KafkaError] = []
    conf = {"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": compression,
            "message.max.bytes": 300_000}  # several batches of the 10k records
    with Producer(conf) as p:
        assert p.config.enable_idempotence
        for i in range(3):
            p.produce(topic_name, f"before-{i}", partition=0,
                      on_delivery=lambda e, m: errors.append(e) if e else None)
        batches = p.produce_batch(topic_name, pa.array(values, pa.binary()), keys, partition=0, timestamps=ts,
                                  on_delivery=lambda e, m: reports.append((e, m)))
        for i in range(3):
            p.produce(topic_name, f"after-{i}", partition=0,
                      on_delivery=lambda e, m: errors.append(e) if e else None)
        assert p.flush(T) == 0
    assert not errors
    assert batches >= 4 and len(reports) == batches
    assert all(e is None and isinstance(m, BatchMessage) for e, m in reports)
    firsts = [(m.offset(), m.count) for _, m in reports if isinstance(m, BatchMessage)]
    assert sum(c for _, c in firsts) == N
    offset = 3
    for first, count in firsts:  # consecutive, in order, after the 3 records before
        assert first == offset
        offset += count

    got = _consume(bootstrap, topic_name, N + 6)
    assert [m.offset() for m in got] == list(range(N + 6))
    assert [m.value() for m in got] == [f"before-{i}".encode() for i in range(3)] + values + [
        f"after-{i}".encode() for i in range(3)]
    assert [m.key() for m in got[3:-3]] == keys
    assert [m.timestamp()[1] for m in got[3:-3]] == ts.tolist()
    _check_sequences(bootstrap, topic_name, list(range(N + 6)))


def test_transactional_produce_batch_commit_and_abort(bootstrap: str, topic_name: str) -> None:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics(topic_name, 1)
    committed, _, ts = _columns(N, "c")
    aborted, _, _ = _columns(100, "a")
    errors: list[KafkaError] = []
    with Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex}",
                   "linger.ms": 5}) as p:
        p.init_transactions(T)
        p.begin_transaction()
        p.produce(topic_name, b"first", partition=0)
        assert p.produce_batch(topic_name, committed, partition=0, timestamps=ts,
                               on_delivery=lambda e, m: errors.append(e) if e else None) >= 2
        p.produce(topic_name, b"last", partition=0)
        p.commit_transaction(T)
        p.begin_transaction()
        p.produce_batch(topic_name, aborted, partition=0, timestamps=5)
        assert p.flush(T) == 0  # written, then aborted
        p.abort_transaction(T)
    assert not errors
    got = _consume(bootstrap, topic_name, N + 2, isolation="read_committed")
    assert [m.value() for m in got] == [b"first", *committed, b"last"]
    assert [m.offset() for m in got] == list(range(N + 2))
    assert [m.key() for m in got] == [None] * (N + 2)
    # the aborted records were written after the commit marker (offset N + 2); with transactions V2 (KIP-890 part 2, which the native client uses when the broker offers it) the commit
    # moved the producer to its next epoch, whose sequences start again at 0
    _check_sequences(bootstrap, topic_name, list(range(N + 2)) + list(range(N + 3, N + 103)),
                     list(range(N + 2)) + list(range(100)))


def test_produce_batch_rejects_bad_input_before_queueing(bootstrap: str, topic_name: str) -> None:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics(topic_name, 1)
    with Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 1000}) as p:
        with pytest.raises(KafkaError, match="message.max.bytes"):
            p.produce_batch(topic_name, [b"x" * 10, b"y" * 1001], partition=0)
        with pytest.raises(KafkaError, match="partition 3"):
            p.produce_batch(topic_name, [b"x"], partition=3)
        with pytest.raises(ValueError, match="keys"):
            p.produce_batch(topic_name, [b"x"], [b"a", b"b"], partition=0)
        assert len(p) == 0
        assert p.produce_batch(topic_name, [], partition=0) == 0


def test_produce_batch_waits_for_records_waiting_for_the_topic(bootstrap: str, topic_name: str) -> None:
    """A record produced to a topic whose metadata is being looked up (here: auto-created) is queued first."""
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 5}) as p:
        p.produce(topic_name, b"w0", partition=0)
        assert p.produce_batch(topic_name, [b"w1", None, b"w3"], partition=0, timestamps=[3, 1, 2]) == 1
        assert p.flush(T) == 0
    got = _consume(bootstrap, topic_name, 4)
    assert [m.value() for m in got] == [b"w0", b"w1", None, b"w3"]
    assert [m.timestamp()[1] for m in got[1:]] == [3, 1, 2]


def _get(m: Message, name: str) -> Any:
    """A Message field, whether the Message has attributes or confluent-kafka's accessor methods."""
    v = getattr(m, name)
    return v() if callable(v) else v


def _read_all(bootstrap: str, topic: str, partitions: int, want: int) -> list[Message]:
    with Consumer({"bootstrap.servers": bootstrap}) as c:
        c.assign([(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        got: list[Message] = []
        deadline = time.monotonic() + T
        while len(got) < want and time.monotonic() < deadline:
            got += c.consume(2000, 1.0)
    assert len(got) == want
    return got


def test_keyed_produce_batch_partitions_as_produce_does(bootstrap: str, topic_name: str) -> None:
    """No partition given: a keyed record goes where produce() puts the same key (murmur2 of the key column),
    null keys go together to one (sticky) partition, and every partition keeps the records' order."""
    bulk, single = f"{topic_name}-bulk", f"{topic_name}-single"
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([bulk, single], 5)
    n = 3000
    values = [f"v{i:05d}".encode() for i in range(n)]
    keys: list[bytes | None] = [None if i % 10 == 3 else f"key-{i * 7919 % 1000}".encode() for i in range(n)]
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 5}) as p:
        assert p.produce_batch(bulk, pa.array(values, pa.binary()), pa.array(keys, pa.binary())) >= 2
        for k, v in zip(keys, values, strict=True):
            if k is not None:
                p.produce(single, v, k)
        assert p.flush(T) == 0
    got = _read_all(bootstrap, bulk, 5, n)
    where = {_get(m, "value"): (_get(m, "partition"), _get(m, "offset")) for m in got}
    per_record = {_get(m, "value"): _get(m, "partition") for m in _read_all(bootstrap, single, 5, n - n // 10)}
    for k, v in zip(keys, values, strict=True):
        if k is not None:
            assert where[v][0] == per_record[v] == partition_for_key(k, 5), (k, v)
    assert len({where[v][0] for k, v in zip(keys, values, strict=True) if k is None}) == 1
    for part in range(5):  # in order within each partition
        offsets = [where[v][1] for v in values if where[v][0] == part]
        assert offsets == sorted(offsets)


def test_null_keys_move_to_the_next_sticky_partition_after_a_full_batch(bootstrap: str, topic_name: str) -> None:
    """Null-keyed records larger together than message.max.bytes fill a batch of the sticky partition, then one
    of another partition (KIP-480, as produce() does), so a large call spreads over the partitions by whole
    batches; every partition keeps the records' order."""
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics(topic_name, 3)
    n = 3000
    values = [f"{i:05d}".encode() * 20 for i in range(n)]  # 100 B: ~150 records per 20 KB batch
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "message.max.bytes": 20_000}) as p:
        assert p.produce_batch(topic_name, pa.array(values, pa.binary())) >= n // 160
        assert p.flush(T) == 0
    got = _read_all(bootstrap, topic_name, 3, n)
    where = {_get(m, "value"): (_get(m, "partition"), _get(m, "offset")) for m in got}
    parts = [where[v][0] for v in values]
    runs = [len(list(g)) for _, g in itertools.groupby(parts)]
    assert len(runs) >= n // 160 - 1 and min(runs[:-1]) >= 100, runs  # whole batches, one after another
    for part in range(3):
        offsets = [where[v][1] for v in values if where[v][0] == part]
        assert offsets == sorted(offsets)


def test_produce_batch_with_a_partition_per_record(bootstrap: str, topic_name: str) -> None:
    """A partition per record (negative: not given, so by key) wins over the key."""
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics(topic_name, 3)
    values = [f"r{i}".encode() for i in range(300)]
    keys = [b"same-key"] * 300
    parts = np.array([i % 3 if i % 2 else -1 for i in range(300)], np.int32)
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 5}) as p:
        p.produce_batch(topic_name, values, keys, partition=parts)
        with pytest.raises(KafkaError, match="partition 7"):
            p.produce_batch(topic_name, [b"x", b"y"], partition=[0, 7])
        assert p.flush(T) == 0
    by_value = {_get(m, "value"): _get(m, "partition") for m in _read_all(bootstrap, topic_name, 3, 300)}
    keyed = partition_for_key(b"same-key", 3)
    assert [by_value[v] for v in values] == [i % 3 if i % 2 else keyed for i in range(300)]
