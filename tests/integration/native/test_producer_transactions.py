"""The native transactional producer against the shared oncelog broker, checked with confluent-kafka readers:
commit/abort across two topics (read_committed vs read_uncommitted), fencing by a second instance, abortable
errors, and send_offsets_to_transaction visible to ``committed()`` only after the commit."""

from __future__ import annotations

import time
import uuid
from collections import Counter

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from oncelog.client import Admin, KafkaError, Producer
from oncelog.client.group_metadata import ConsumerGroupMetadata
from oncelog.client.producer import TxnState

pytestmark = [pytest.mark.timeout(120), pytest.mark.filterwarnings("ignore::DeprecationWarning")]
T = 20.0


def read_values(bootstrap: str, topics: list[str], want: int, isolation: str, *, partitions: int = 3,
                settle: float = 1.5, timeout: float = 30.0) -> list[bytes]:
    """Every record value of ``topics`` as confluent-kafka sees it with ``isolation``; waits for ``want`` records
    and then ``settle`` seconds more, so extra (wrongly visible) records are seen too."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"chk-{uuid.uuid4().hex}", "enable.auto.commit": False,
                  "isolation.level": isolation, "enable.partition.eof": False})
    try:
        c.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t in topics for p in range(partitions)])
        out: list[bytes] = []
        deadline = time.monotonic() + timeout
        settled_at: float | None = None
        while time.monotonic() < deadline:
            for m in c.consume(1000, 0.2):
                assert m.error() is None, m.error()
                out.append(m.value())
            if len(out) >= want:
                settled_at = settled_at or time.monotonic() + settle
                if time.monotonic() > settled_at:
                    break
        return out
    finally:
        c.close()


def txn_producer(bootstrap: str, txn_id: str, **extra: object) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 2, **extra})


@pytest.fixture
def two_topics(bootstrap: str, topic_name: str) -> list[str]:
    topics = [topic_name + "-a", topic_name + "-b"]
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        for t in topics:
            admin.create_topics(t, 3)
    return topics


def test_commit_and_abort_across_two_topics(bootstrap: str, two_topics: list[str]) -> None:
    a, b = two_topics
    with txn_producer(bootstrap, f"tx-{uuid.uuid4().hex}") as p:
        p.init_transactions(T)
        assert p.transaction_state is TxnState.READY
        p.begin_transaction()
        for i in range(100):
            p.produce(a, f"c1-{i}", key=str(i))
            p.produce(b, f"c1-{i}", key=str(i))
        p.commit_transaction(T)
        p.begin_transaction()
        for i in range(50):
            p.produce(a, f"ab-{i}", key=str(i))
            p.produce(b, f"ab-{i}", key=str(i))
        assert p.flush(T) == 0  # written, then aborted
        p.abort_transaction(T)
        p.begin_transaction()
        for i in range(10):
            p.produce(a, f"c2-{i}")
            p.produce(b, f"c2-{i}")
        p.commit_transaction(T)
        assert p.transaction_state is TxnState.READY
    committed = Counter(read_values(bootstrap, [a, b], 220, "read_committed"))
    expected = Counter([f"c1-{i}".encode() for i in range(100)] * 2 + [f"c2-{i}".encode() for i in range(10)] * 2)
    assert committed == expected
    everything = Counter(read_values(bootstrap, [a, b], 320, "read_uncommitted"))
    assert everything == expected + Counter([f"ab-{i}".encode() for i in range(50)] * 2)


def test_fencing_by_a_second_instance(bootstrap: str, topic_name: str) -> None:
    txn_id = f"fence-{uuid.uuid4().hex}"
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics(topic_name, 3)
    old = txn_producer(bootstrap, txn_id)
    new = txn_producer(bootstrap, txn_id)
    try:
        old.init_transactions(T)
        old.begin_transaction()
        for i in range(20):
            old.produce(topic_name, f"zombie-{i}")
        assert old.flush(T) == 0
        new.init_transactions(T)  # fences old and aborts its transaction
        with pytest.raises(KafkaError) as exc:
            old.commit_transaction(T)
        assert exc.value.name() in ("PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"), exc.value
        assert old.transaction_state is TxnState.FATAL_ERROR
        with pytest.raises(KafkaError, match="create a new producer"):
            old.begin_transaction()
        with pytest.raises(KafkaError, match="create a new producer"):
            old.abort_transaction(T)
        new.begin_transaction()
        for i in range(5):
            new.produce(topic_name, f"live-{i}")
        new.commit_transaction(T)
    finally:
        old.close(5)
        new.close(5)
    got = read_values(bootstrap, [topic_name], 5, "read_committed")
    assert sorted(got) == [f"live-{i}".encode() for i in range(5)]
    assert len(read_values(bootstrap, [topic_name], 25, "read_uncommitted")) == 25


def test_abortable_error_requires_abort_then_the_producer_goes_on(bootstrap: str, topic_name: str) -> None:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics(topic_name, 3)
    errors: list[KafkaError] = []
    with txn_producer(bootstrap, f"abortable-{uuid.uuid4().hex}", **{"message.max.bytes": 8 << 20,
                                                                     "batch.size": 8 << 20}) as p:
        p.init_transactions(T)
        p.begin_transaction()
        p.produce(topic_name, "small", partition=0)
        # larger than the broker's message.max.bytes: the broker rejects the batch (MESSAGE_TOO_LARGE)
        p.produce(topic_name, b"x" * (3 << 20), partition=1,
                  on_delivery=lambda err, msg: errors.append(err) if err else None)
        with pytest.raises(KafkaError, match="abort_transaction"):
            p.commit_transaction(T)
        assert p.transaction_state is TxnState.ABORTABLE_ERROR
        assert errors and errors[0].name() in ("MSG_SIZE_TOO_LARGE", "RECORD_LIST_TOO_LARGE")
        with pytest.raises(KafkaError, match="abort_transaction"):
            p.produce(topic_name, "more")
        p.abort_transaction(T)
        p.begin_transaction()
        p.produce(topic_name, "after", partition=2)
        p.commit_transaction(T)
    assert read_values(bootstrap, [topic_name], 1, "read_committed") == [b"after"]


def test_illegal_calls_say_what_to_do(bootstrap: str, topic_name: str) -> None:
    with txn_producer(bootstrap, f"illegal-{uuid.uuid4().hex}") as p:
        with pytest.raises(KafkaError, match="init_transactions"):
            p.begin_transaction()
        with pytest.raises(KafkaError, match="init_transactions"):
            p.produce(topic_name, "x")
        p.init_transactions(T)
        with pytest.raises(KafkaError, match="IN_TRANSACTION"):
            p.produce(topic_name, "x")
        with pytest.raises(KafkaError, match="IN_TRANSACTION"):
            p.commit_transaction(T)
        with pytest.raises(KafkaError, match="two.phase"):
            p.begin_transaction()
            p.prepare_transaction()
        p.commit_transaction(T)  # an empty transaction commits without a request
    with Producer({"bootstrap.servers": bootstrap}) as plain, pytest.raises(KafkaError, match="transactional.id"):
        plain.init_transactions(T)


@pytest.mark.parametrize("metadata_kind", ["object", "string"])
def test_send_offsets_visible_only_after_commit(bootstrap: str, topic_name: str, metadata_kind: str) -> None:
    group = f"g-{uuid.uuid4().hex[:10]}"
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics(topic_name, 3)
    meta: object = ConsumerGroupMetadata(group) if metadata_kind == "object" else group
    checker = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    tps = [TopicPartition(topic_name, p) for p in range(3)]

    def committed() -> list[int]:
        return [tp.offset for tp in checker.committed(tps, timeout=10)]

    try:
        with txn_producer(bootstrap, f"offsets-{uuid.uuid4().hex}") as p:
            p.init_transactions(T)
            p.begin_transaction()
            p.produce(topic_name, "out")
            p.send_offsets_to_transaction({(topic_name, 0): 17, (topic_name, 2): 5}, meta, T)
            p.send_offsets_to_transaction([(topic_name, 1, 9)], meta, T)
            assert p.flush(T) == 0
            assert all(o < 0 for o in _committed_or_pending(checker, tps))  # pending: not yet visible
            p.commit_transaction(T)
            assert committed() == [17, 9, 5]
            # an aborted transaction's offsets never become visible
            p.begin_transaction()
            p.send_offsets_to_transaction([(topic_name, 0, 99)], meta, T)
            p.abort_transaction(T)
            assert committed() == [17, 9, 5]
    finally:
        checker.close()


def _committed_or_pending(checker: Consumer, tps: list[TopicPartition]) -> list[int]:
    """committed() offsets; a broker answering UNSTABLE_OFFSET_COMMIT for pending offsets counts as not visible."""
    try:
        return [tp.offset for tp in checker.committed(tps, timeout=3)]
    except Exception as e:  # noqa: BLE001 - librdkafka gives up on the pending (unstable) offsets
        assert "UNSTABLE" in str(e) or "Timed out" in str(e), e
        return [-1] * len(tps)


def test_close_in_a_transaction_does_not_abort_it(bootstrap: str, topic_name: str) -> None:
    """As in Kafka: close() leaves an open transaction to the broker (its timeout, or the next instance)."""
    txn_id = f"close-{uuid.uuid4().hex}"
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics(topic_name, 3)
        with txn_producer(bootstrap, txn_id) as p:
            p.init_transactions(T)
            p.begin_transaction()
            p.produce(topic_name, "pending", partition=0)
        # closed: flushed, not aborted
        d = admin.describe_transactions(txn_id)[txn_id]
        assert d.state == "Ongoing" and [tuple(tp) for tp in d.topic_partitions] == [(topic_name, 0)]
        assert read_values(bootstrap, [topic_name], 0, "read_committed", settle=1.0) == []
        with txn_producer(bootstrap, txn_id) as p2:
            p2.init_transactions(T)  # the next instance aborts it
        assert admin.describe_transactions(txn_id)[txn_id].state in ("CompleteAbort", "Empty")
    assert read_values(bootstrap, [topic_name], 1, "read_uncommitted") == [b"pending"]
    assert read_values(bootstrap, [topic_name], 0, "read_committed", settle=1.0) == []


def test_async_producer_transactions(bootstrap: str, topic_name: str) -> None:
    import asyncio

    from oncelog.client import AsyncProducer

    async def go() -> None:
        async with AsyncProducer({"bootstrap.servers": bootstrap, "transactional.id": f"async-{uuid.uuid4().hex}",
                                  "linger.ms": 1}) as p:
            await p.init_transactions(T)
            p.begin_transaction()
            futs = [await p.produce(topic_name, f"a{i}", partition=i % 3) for i in range(9)]
            await p.send_offsets_to_transaction([(topic_name, 0, 3)], f"g-{uuid.uuid4().hex[:8]}", T)
            await p.commit_transaction(T)
            assert all(f.done() and f.result().offset() is not None for f in futs)
            p.begin_transaction()
            await p.produce(topic_name, "dropped", partition=0)
            await p.abort_transaction(T)
            assert p.transaction_state is TxnState.READY

    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics(topic_name, 3)
    asyncio.run(go())
    assert sorted(read_values(bootstrap, [topic_name], 9, "read_committed")) == [f"a{i}".encode() for i in range(9)]
