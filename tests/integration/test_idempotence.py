"""Idempotent producers against a real broker: a real client's 30k records, and raw-protocol checks of the
producer-state rules (duplicate batch answered with the original offsets, sequence gap, stale epoch) and of
producer id allocation across clean and SIGKILL restarts."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.testing.pytest_plugin import KafkaBroker

from _txn_raw import (
    INVALID_PRODUCER_EPOCH,
    NONE,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    TxnClient,
    txn_batch,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

TIMEOUT = 20


def make_topic(bootstrap: str, name: str, partitions: int = 3) -> None:
    a = AdminClient({"bootstrap.servers": bootstrap})
    a.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(TIMEOUT)


def check_idempotent_partition(c: TxnClient, topic: str, partition: int, expected: list[bytes]) -> None:
    """The partition holds exactly ``expected`` in order, every batch of one producer with contiguous
    sequences, and read_committed sees the same (no transactions here, so LSO == HW)."""
    batches, _, hw, lso = c.fetch_batches(topic, partition, READ_UNCOMMITTED)
    values = [v for b in batches for _, _, v in b.records]
    assert len(values) == len(expected), f"{topic}-{partition}: {len(values)} records, expected {len(expected)}"
    assert values == expected, f"{topic}-{partition}: records out of order or duplicated"
    pids = {(b.producer_id, b.producer_epoch) for b in batches}
    assert len(pids) == 1 and next(iter(pids))[0] >= 0, f"{topic}-{partition}: producer ids/epochs {pids}"
    seq = 0
    for b in batches:
        assert not b.transactional and not b.control
        assert b.base_sequence == seq, f"{topic}-{partition}@{b.base_offset}: base sequence {b.base_sequence}, " \
                                       f"expected {seq}"
        seq += len(b.records)
    assert hw == lso == len(expected)
    assert [v for _, v in c.read(topic, partition, READ_COMMITTED)] == expected


def test_confluent_idempotent_30k(bootstrap: str, topic_name: str) -> None:
    make_topic(bootstrap, topic_name)
    n = 30_000
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                  "batch.num.messages": 500})
    expected: dict[int, list[bytes]] = {0: [], 1: [], 2: []}
    errors: list[object] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    for i in range(n):
        value = f"idem-{i:06d}".encode()
        part = i % 3
        expected[part].append(value)
        while True:
            try:
                p.produce(topic_name, value=value, partition=part, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.05)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(TIMEOUT * 2) == 0
    assert not errors, errors[:5]
    with TxnClient(bootstrap) as c:
        for part in range(3):
            check_idempotent_partition(c, topic_name, part, expected[part])
        prod = c.describe_producers(topic_name, 0)
        assert prod.error_code == NONE
        assert len(prod.active_producers) == 1
        assert prod.active_producers[0].last_sequence == len(expected[0]) - 1


def test_aiokafka_idempotent(bootstrap: str, topic_name: str) -> None:
    from aiokafka import AIOKafkaProducer

    make_topic(bootstrap, topic_name)
    n = 3000

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, linger_ms=5)
        await p.start()
        try:
            futs = [await p.send(topic_name, value=f"aio-{i:05d}".encode(), partition=i % 3) for i in range(n)]
            await p.flush()
            for f in futs:
                await f
        finally:
            await p.stop()

    asyncio.run(run())
    with TxnClient(bootstrap) as c:
        for part in range(3):
            check_idempotent_partition(c, topic_name, part, [f"aio-{i:05d}".encode() for i in range(part, n, 3)])


def test_raw_duplicate_gap_and_stale_epoch(bootstrap: str, topic_name: str) -> None:
    with TxnClient(bootstrap) as c:
        assert c.create_topic(topic_name, 1) == 0
        code, pid, epoch = c.init_producer_id(None)
        assert code == NONE and pid >= 0 and epoch == 0
        b0 = txn_batch([b"a0", b"a1", b"a2"], pid, epoch, 0, transactional=False)
        b1 = txn_batch([b"b0", b"b1"], pid, epoch, 3, transactional=False)
        r0 = c.produce_batch(topic_name, 0, b0)
        assert r0.error_code == NONE and r0.base_offset == 0
        r1 = c.produce_batch(topic_name, 0, b1)
        assert r1.error_code == NONE and r1.base_offset == 3
        # duplicates of both retained batches: success with the ORIGINAL offsets, nothing appended
        for batch, want in ((b0, 0), (b1, 3), (b0, 0)):
            r = c.produce_batch(topic_name, 0, batch)
            assert (r.error_code, r.base_offset) == (NONE, want)
        assert c.hw(topic_name, 0) == 5
        # a gap in the sequence
        r = c.produce_batch(topic_name, 0, txn_batch([b"gap"], pid, epoch, 7, transactional=False))
        assert r.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER, r
        # same sequence range but not the same batch as a retained one (overlaps b1): out of order as well
        r = c.produce_batch(topic_name, 0, txn_batch([b"x"], pid, epoch, 4, transactional=False))
        assert r.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER, r
        # the producer bumps its epoch (idempotent producers do it locally, KIP-360): new epoch starts at 0
        r = c.produce_batch(topic_name, 0, txn_batch([b"c0"], pid, epoch + 1, 0, transactional=False))
        assert (r.error_code, r.base_offset) == (NONE, 5)
        r = c.produce_batch(topic_name, 0, txn_batch([b"c1"], pid, epoch + 1, 5, transactional=False))
        assert r.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER, "a new epoch must continue from its own sequence 0"
        # the older epoch is fenced now, also for what would have been its next sequence
        r = c.produce_batch(topic_name, 0, txn_batch([b"old"], pid, epoch, 5, transactional=False))
        assert r.error_code == INVALID_PRODUCER_EPOCH, r
        r = c.produce_batch(topic_name, 0, b0)  # a late duplicate from the fenced epoch
        assert r.error_code == INVALID_PRODUCER_EPOCH, r
        values = [v for _, v in c.read(topic_name, 0, READ_UNCOMMITTED)]
        assert values == [b"a0", b"a1", b"a2", b"b0", b"b1", b"c0"]


def test_raw_duplicate_of_older_retained_batches(bootstrap: str, topic_name: str) -> None:
    """The last 5 batches are remembered: each is answered with its own offsets; a 6th-oldest is not a
    duplicate any more (Kafka answers OUT_OF_ORDER_SEQUENCE_NUMBER for it)."""
    with TxnClient(bootstrap) as c:
        assert c.create_topic(topic_name, 1) == 0
        code, pid, epoch = c.init_producer_id(None)
        assert code == NONE
        batches = [txn_batch([f"r{i}-{j}".encode() for j in range(2)], pid, epoch, 2 * i, transactional=False)
                   for i in range(7)]
        for i, b in enumerate(batches):
            r = c.produce_batch(topic_name, 0, b)
            assert (r.error_code, r.base_offset) == (NONE, 2 * i)
        for i in range(2, 7):
            r = c.produce_batch(topic_name, 0, batches[i])
            assert (r.error_code, r.base_offset) == (NONE, 2 * i), f"retry of batch {i}"
        r = c.produce_batch(topic_name, 0, batches[0])
        assert r.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
        assert c.hw(topic_name, 0) == 14


def test_raw_stale_epoch_after_coordinator_bump(bootstrap: str, topic_name: str) -> None:
    """A transactional id re-initialised: the producer state of the partition moves to the new epoch; a
    non-transactional write of the old epoch is INVALID_PRODUCER_EPOCH."""
    tid = f"{topic_name}-tid"
    with TxnClient(bootstrap) as c:
        assert c.create_topic(topic_name, 1) == 0
        pid, e0 = c.init_txn(tid)
        assert c.add_partitions(tid, pid, e0, [(topic_name, 0)]) == {(topic_name, 0): NONE}
        assert c.produce_batch(topic_name, 0, txn_batch([b"t0"], pid, e0, 0), tid).error_code == NONE
        assert c.end_txn(tid, pid, e0, True) == NONE
        pid2, e1 = c.init_txn(tid)
        assert pid2 == pid and e1 == e0 + 1
        assert c.add_partitions(tid, pid, e1, [(topic_name, 0)]) == {(topic_name, 0): NONE}
        assert c.produce_batch(topic_name, 0, txn_batch([b"t1"], pid, e1, 0), tid).error_code == NONE
        r = c.produce_batch(topic_name, 0, txn_batch([b"stale"], pid, e0, 1, transactional=False))
        assert r.error_code == INVALID_PRODUCER_EPOCH, r
        assert c.end_txn(tid, pid, e1, True) == NONE
        assert [v for _, v in c.read(topic_name, 0, READ_COMMITTED)] == [b"t0", b"t1"]


def test_raw_stale_epoch_transactional_produce(bootstrap: str, topic_name: str) -> None:
    """A zombie's transactional write after a re-init: INVALID_PRODUCER_EPOCH (Kafka maps the verification's
    PRODUCER_FENCED to it for Produce; fixed in d8b60d1, it was answered PRODUCER_FENCED)."""
    tid = f"{topic_name}-tid"
    with TxnClient(bootstrap) as c:
        assert c.create_topic(topic_name, 1) == 0
        pid, e0 = c.init_txn(tid)
        assert c.add_partitions(tid, pid, e0, [(topic_name, 0)]) == {(topic_name, 0): NONE}
        batch = txn_batch([b"t0"], pid, e0, 0)
        assert c.produce_batch(topic_name, 0, batch, tid).error_code == NONE
        assert c.end_txn(tid, pid, e0, True) == NONE
        _, e1 = c.init_txn(tid)
        assert e1 == e0 + 1
        # a zombie of epoch e0 writes its next transactional batch, and a late retry of its old one
        for b in (txn_batch([b"zombie"], pid, e0, 1), batch):
            r = c.produce_batch(topic_name, 0, b, tid)
            assert r.error_code == INVALID_PRODUCER_EPOCH, (r.error_code, r.error_message)
        assert [v for _, v in c.read(topic_name, 0, READ_UNCOMMITTED)] == [b"t0"]


def test_pids_never_reused_across_restarts(kafka_broker_factory: Callable[..., KafkaBroker]) -> None:
    """Producer ids from InitProducerId (idempotent and transactional) are never handed out again after a
    clean restart or a SIGKILL; an acked idempotent batch retried after a SIGKILL is not stored twice."""
    proc = kafka_broker_factory({"num.partitions": 1}, in_process=False)  # real SIGKILLs
    try:
        seen: set[int] = set()
        txn_pids: dict[str, int] = {}

        def allocate(c: TxnClient, round_: int) -> list[int]:
            got = []
            for _ in range(3):
                code, pid, epoch = c.init_producer_id(None)
                assert code == NONE and epoch == 0
                got.append(pid)
            tid = f"pid-reuse-{round_}"
            pid, _ = c.init_txn(tid)
            txn_pids[tid] = pid
            got.append(pid)
            return got

        with TxnClient(proc.bootstrap) as c:
            assert c.create_topic("idem", 1) == 0
            first = allocate(c, 0)
            code, ipid, _ = c.init_producer_id(None)
            first.append(ipid)
            batch = txn_batch([b"once-a", b"once-b"], ipid, 0, 0, transactional=False)
            r = c.produce_batch("idem", 0, batch)
            assert (r.error_code, r.base_offset) == (NONE, 0)
        assert len(set(first)) == len(first)
        seen.update(first)

        for round_, how in ((1, "stop"), (2, "kill"), (3, "kill")):
            if how == "stop":
                assert proc.stop() == 0
            else:
                proc.kill()
            proc.start()
            with TxnClient(proc.bootstrap) as c:
                if round_ == 2:
                    r = c.produce_batch("idem", 0, batch)  # retried after the crash
                    assert (r.error_code, r.base_offset) == (NONE, 0), "retry after SIGKILL not deduplicated"
                # a known transactional id keeps its producer id (bumped epoch)
                pid, _ = c.init_txn("pid-reuse-0")
                assert pid == txn_pids["pid-reuse-0"]
                new = allocate(c, round_)
            assert not set(new) & seen, f"after {how}: producer ids {sorted(set(new) & seen)} handed out again"
            assert min(new) > max(seen), f"after {how}: new ids {new} not above the old ones (max {max(seen)})"
            seen.update(new)
        with TxnClient(proc.bootstrap) as c:
            assert [v for _, v in c.read("idem", 0, READ_UNCOMMITTED)] == [b"once-a", b"once-b"]
    finally:
        proc.kill()
