"""Our read_committed consumer against confluent-kafka's (librdkafka) on one real oncelog log: several
transactional producers committing and aborting interleaved transactions across partitions, plus a plain
producer writing between them. Both consumers must return exactly the same records per partition, and those
must be exactly the committed + plain records (the model)."""

from __future__ import annotations

import random
import time

import confluent_kafka as ck
import pytest

from oncelog.client import Admin, Consumer

PARTITIONS = 3
TIMEOUT = 30.0


def write_interleaving(bootstrap: str, topic: str, seed: int) -> tuple[set[bytes], set[bytes]]:
    """Random interleaving of transactions of 3 producers + plain records; returns (visible, aborted) values."""
    rng = random.Random(seed)
    txn = [ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-tx{i}", "linger.ms": 2})
           for i in range(3)]
    plain = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "enable.idempotence": False})
    for p in txn:
        p.init_transactions(TIMEOUT)
    open_: dict[int, list[bytes]] = {}
    visible: set[bytes] = set()
    aborted: set[bytes] = set()
    n = 0

    def value() -> bytes:
        nonlocal n
        n += 1
        return f"{seed}-{n}".encode()

    for _ in range(60):
        action = rng.choice(["plain", "send", "send", "send", "end"])
        i = rng.randrange(3)
        if action == "plain":
            v = value()
            plain.produce(topic, value=v, key=b"k", partition=rng.randrange(PARTITIONS))
            assert plain.flush(TIMEOUT) == 0
            visible.add(v)
        elif action == "send":
            if i not in open_:
                txn[i].begin_transaction()
                open_[i] = []
            for _ in range(rng.randint(1, 4)):
                v = value()
                txn[i].produce(topic, value=v, partition=rng.randrange(PARTITIONS), headers={"p": str(i)})
                open_[i].append(v)
            assert txn[i].flush(TIMEOUT) == 0  # in the log before the transaction ends, even if aborted
        elif i in open_:
            if rng.random() < 0.5:
                txn[i].commit_transaction(TIMEOUT)
                visible.update(open_.pop(i))
            else:
                txn[i].abort_transaction(TIMEOUT)
                aborted.update(open_.pop(i))
    for i, vals in sorted(open_.items()):
        if rng.random() < 0.5:
            txn[i].commit_transaction(TIMEOUT)
            visible.update(vals)
        else:
            txn[i].abort_transaction(TIMEOUT)
            aborted.update(vals)
    return visible, aborted


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "isolation.level": "read_committed"})
    try:
        return {p: c.get_watermark_offsets(ck.TopicPartition(topic, p), TIMEOUT)[1] for p in range(PARTITIONS)}
    finally:
        c.close()


Rec = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def read_ours(bootstrap: str, topic: str, ends: dict[int, int], fetch_bytes: int = 1 << 20) -> dict[int, list[Rec]]:
    out: dict[int, list[Rec]] = {p: [] for p in range(PARTITIONS)}
    with Consumer({"bootstrap.servers": bootstrap, "isolation.level": "read_committed",
                   "max.partition.fetch.bytes": fetch_bytes}) as c:
        c.assign([(topic, p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + TIMEOUT
        while any((c.position(topic, p) or 0) < ends[p] for p in range(PARTITIONS)):
            assert time.monotonic() < deadline, "our consumer did not reach the end of the log"
            for m in c.consume(500, 0.2):
                out[m.partition()].append((m.offset(), m.key(), m.value(), list(m.headers() or [])))
    return out


def read_confluent(bootstrap: str, topic: str, ends: dict[int, int]) -> dict[int, list[Rec]]:
    out: dict[int, list[Rec]] = {p: [] for p in range(PARTITIONS)}
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                     "isolation.level": "read_committed", "enable.partition.eof": True})
    try:
        c.assign([ck.TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        at_eof: set[int] = set()
        deadline = time.monotonic() + TIMEOUT
        while len(at_eof) < PARTITIONS:
            assert time.monotonic() < deadline, "confluent-kafka did not reach the end of the log"
            for m in c.consume(500, 0.2):
                if m.error() is not None:
                    assert m.error().code() == ck.KafkaError._PARTITION_EOF, m.error()
                    if m.offset() >= ends[m.partition()]:
                        at_eof.add(m.partition())
                    continue
                out[m.partition()].append((m.offset(), m.key(), m.value(), list(m.headers() or [])))
    finally:
        c.close()
    return out


@pytest.mark.timeout(180)
@pytest.mark.parametrize("seed", [1, 2])
def test_read_committed_matches_confluent_and_model(bootstrap: str, topic_name: str, seed: int) -> None:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics(topic_name, PARTITIONS)
    visible, aborted = write_interleaving(bootstrap, topic_name, seed)
    assert aborted and visible, "the interleaving should both commit and abort"
    ends = end_offsets(bootstrap, topic_name)
    ours = read_ours(bootstrap, topic_name, ends)
    theirs = read_confluent(bootstrap, topic_name, ends)
    assert ours == theirs
    # one batch per fetch: aborted transactions and their markers arrive in different fetch responses
    assert read_ours(bootstrap, topic_name, ends, fetch_bytes=1) == theirs
    got = [v for recs in ours.values() for _, _, v, _ in recs]
    assert len(got) == len(set(got)) and set(got) == visible
    # and read_uncommitted sees the aborted records too (they really are in the log)
    with Consumer({"bootstrap.servers": bootstrap}) as c:
        c.assign([(topic_name, p, 0) for p in range(PARTITIONS)])
        seen: set[bytes] = set()
        deadline = time.monotonic() + TIMEOUT
        while not (visible | aborted) <= seen and time.monotonic() < deadline:
            seen.update(m.value() for m in c.consume(500, 0.2) if m.value() is not None)
        assert seen == visible | aborted
