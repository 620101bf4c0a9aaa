"""Plain (non-transactional) records between our client and confluent-kafka (librdkafka), on oncelog AND Tansu,
with every codec: keys, values, headers, timestamps and per-partition order arrive identical both ways."""

from __future__ import annotations

import time

import confluent_kafka as ck
import pytest

from oncelog.client import OFFSET_BEGINNING, Admin, Consumer, Producer

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PARTITIONS = 3
TIMEOUT = 30.0
BASE_TS = 1_700_000_000_000

# (offset, key, value, headers, timestamp) per partition
Rec = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]], int]


def records(n: int) -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int | None]]:
    """Edge cases first (null/empty keys and values, null/duplicate/unicode headers, large compressible value,
    explicit and default timestamps), then ordinary records."""
    out: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int | None]] = [
        (None, None, [], BASE_TS),
        (b"", b"", [("empty", b"")], BASE_TS + 1),
        (b"k-null-header", b"v", [("n", None)], None),
        (b"dup", b"headers", [("h", b"1"), ("h", b"2"), ("h\u00e9\u4e2d", "\u00fc".encode())], BASE_TS + 3),
        (b"big", b"0123456789" * 5000, [], BASE_TS + 4),
        (bytes(range(256)), bytes(range(255, -1, -1)), [("bin", bytes(range(10)))], None),
    ]
    for i in range(len(out), n):
        key = f"key-{i % 17}".encode() if i % 5 else None
        out.append((key, f"value-{i}".encode() * (1 + i % 4), [("i", str(i).encode())],
                    BASE_TS + i if i % 2 else None))
    return out


def _ck_read(bootstrap: str, topic: str, want: int) -> dict[int, list[Rec]]:
    out: dict[int, list[Rec]] = {p: [] for p in range(PARTITIONS)}
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                     "enable.partition.eof": False})
    try:
        c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(PARTITIONS)])
        deadline = time.monotonic() + TIMEOUT
        n = 0
        while n < want and time.monotonic() < deadline:
            for m in c.consume(500, 0.3):
                assert m.error() is None, m.error()
                out[m.partition()].append((m.offset(), m.key(), m.value(), list(m.headers() or []),
                                           m.timestamp()[1]))
                n += 1
        assert c.consume(10, 0.3) == []  # nothing more
    finally:
        c.close()
    return out


def _our_read(bootstrap: str, topic: str, want: int) -> dict[int, list[Rec]]:
    out: dict[int, list[Rec]] = {p: [] for p in range(PARTITIONS)}
    with Consumer({"bootstrap.servers": bootstrap}) as c:
        c.assign([(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        deadline = time.monotonic() + TIMEOUT
        n = 0
        while n < want and time.monotonic() < deadline:
            for m in c.consume(500, 0.3):
                out[m.partition()].append((m.offset(), m.key(), m.value(), list(m.headers() or []), m.timestamp()[1]))
                n += 1
        assert c.poll(0.3) is None  # nothing more
    return out


@pytest.mark.timeout(120)
@pytest.mark.parametrize("codec", CODECS)
def test_our_producer_to_confluent_consumer(any_bootstrap: str, topic_name: str, codec: str) -> None:
    with Admin({"bootstrap.servers": any_bootstrap}) as admin:
        admin.create_topics(topic_name, PARTITIONS)
    recs = records(120)
    reports: list = []
    with Producer({"bootstrap.servers": any_bootstrap, "compression.type": codec, "linger.ms": 5}) as p:
        for i, (k, v, hs, ts) in enumerate(recs):
            p.produce(topic_name, v, key=k, partition=i % PARTITIONS, headers=hs, timestamp=ts,
                      on_delivery=lambda e, m: reports.append((e, m)))
        assert p.flush(TIMEOUT) == 0
    assert len(reports) == len(recs) and all(e is None for e, _ in reports)
    # what we sent, per partition, in offset order (delivery reports give offsets and the create times used)
    expected: dict[int, list[Rec]] = {p: [] for p in range(PARTITIONS)}
    for i, (k, v, hs, ts) in enumerate(recs):
        m = next(m for _, m in reports if m.partition() == i % PARTITIONS and m.value() == v and m.key() == k)
        assert ts is None or m.timestamp()[1] == ts
        expected[i % PARTITIONS].append((m.offset(), k, v, hs, m.timestamp()[1]))
    for rs in expected.values():
        rs.sort(key=lambda r: r[0])
        assert [r[0] for r in rs] == list(range(len(rs)))  # produce order = offset order
    got = _ck_read(any_bootstrap, topic_name, len(recs))
    if got != expected:  # say whether the log or the reader is short (seen once in CI: librdkafka missed offsets 0-1)
        ours = _our_read(any_bootstrap, topic_name, len(recs))
        short = {p: sorted({r[0] for r in expected[p]} - {r[0] for r in got[p]}) for p in expected}
        raise AssertionError(f"confluent-kafka's read differs; offsets it missed per partition: {short}; "
                             f"our consumer reads the log {'identical to' if ours == expected else 'different from'}"
                             f" what was produced")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("codec", CODECS)
def test_confluent_producer_to_our_consumer(any_bootstrap: str, topic_name: str, codec: str) -> None:
    with Admin({"bootstrap.servers": any_bootstrap}) as admin:
        admin.create_topics(topic_name, PARTITIONS)
    recs = records(120)
    reports: list = []
    p = ck.Producer({"bootstrap.servers": any_bootstrap, "compression.type": codec, "linger.ms": 5,
                     "enable.idempotence": False})
    for i, (k, v, hs, ts) in enumerate(recs):
        p.produce(topic_name, v, key=k, partition=i % PARTITIONS, headers=hs or None, timestamp=ts or 0,
                  on_delivery=lambda e, m: reports.append((e, m)))
    assert p.flush(TIMEOUT) == 0
    assert len(reports) == len(recs) and all(e is None for e, _ in reports)
    # librdkafka's delivery reports carry offsets and timestamps, not headers: take those from what we sent
    sent_headers = {v: hs for _, v, hs, _ in recs}
    assert len(sent_headers) == len(recs)  # values are unique
    expected: dict[int, list[Rec]] = {p: [] for p in range(PARTITIONS)}
    for _, m in reports:
        expected[m.partition()].append((m.offset(), m.key(), m.value(), sent_headers[m.value()], m.timestamp()[1]))
    for part, rs in expected.items():
        rs.sort(key=lambda r: r[0])
        sent = [(k, v) for i, (k, v, _, _) in enumerate(recs) if i % PARTITIONS == part]
        assert [(r[1], r[2]) for r in rs] == sent  # librdkafka kept produce order
    for i, (_, v, _, ts) in enumerate(recs):
        if ts is not None:
            assert any(r[2] == v and r[4] == ts for r in expected[i % PARTITIONS])
    got = _our_read(any_bootstrap, topic_name, len(recs))
    assert got == expected
