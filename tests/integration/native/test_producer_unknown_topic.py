"""``Producer.produce()`` to a topic whose metadata is not known never blocks the caller (issue 17, finding 4: it
waited 121 s for a missing topic with auto-create off). As with confluent-kafka, the records wait in order while
the topic is looked up and fail through their delivery callback if it never appears."""

from __future__ import annotations

import time
from collections.abc import Callable

from oncelog.client import Producer
from oncelog.client.errors import KafkaError
from oncelog.client.message import Message
from oncelog.protocol.errors import ErrorCode
from oncelog.testing.pytest_plugin import KafkaBroker


def test_produce_to_a_missing_topic_returns_at_once_and_fails_in_the_callback(
        kafka_broker_factory: Callable[..., KafkaBroker]) -> None:
    broker = kafka_broker_factory({"auto.create.topics.enable": "false"})
    try:
        reports: list[tuple[KafkaError | None, Message]] = []
        p = Producer({"bootstrap.servers": broker.bootstrap, "topic.metadata.propagation.max.ms": 2000})
        started = time.monotonic()
        for i in range(3):
            p.produce("missing", f"v{i}", on_delivery=lambda err, msg: reports.append((err, msg)))
        assert time.monotonic() - started < 1.0, "produce() blocked on the topic's metadata"
        assert len(p) == 3
        assert p.flush(30) == 0
        assert [m.value() for _, m in reports] == [b"v0", b"v1", b"v2"]
        assert all(err is not None and err.code() == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION for err, _ in reports)
        assert "missing" in str(reports[0][0]) and time.monotonic() - started < 15
        p.close()
    finally:
        broker.stop()


def test_records_for_a_topic_being_created_keep_their_order(bootstrap: str, topic_name: str) -> None:
    """The first records of an auto-created topic wait for its metadata; later ones must not overtake them."""
    delivered: list[Message] = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    started = time.monotonic()
    for i in range(200):
        p.produce(topic_name, f"{i}", key="same", on_delivery=lambda err, msg: delivered.append(msg) if err is None
                  else None)
    assert time.monotonic() - started < 1.0
    assert p.flush(30) == 0
    p.close()
    assert [m.value() for m in sorted(delivered, key=lambda m: m.offset())] == [f"{i}".encode() for i in range(200)]


def test_a_transaction_commits_records_produced_before_their_topic_was_known(bootstrap: str,
                                                                             topic_name: str) -> None:
    """commit_transaction() waits for records still waiting for their topic's metadata and commits them with the
    transaction. (It used to flush only the records already queued: the waiting ones were left out of the commit and
    lost, and commit_transaction() still succeeded.)"""
    import confluent_kafka as ck

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic_name}-tx"})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic_name, f"v{i}", partition=0)  # auto-created: its metadata is not known yet
    p.commit_transaction(30)
    p.close()
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic_name}-check",
                     "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    c.assign([ck.TopicPartition(topic_name, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(got) < 3 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    assert got == [b"v0", b"v1", b"v2"]


def test_a_record_whose_topic_never_appears_makes_the_transaction_abortable(
        kafka_broker_factory: Callable[..., KafkaBroker]) -> None:
    """A record of the transaction that fails (its topic does not exist) makes commit_transaction() fail with an
    abortable error instead of committing the transaction without it."""
    broker = kafka_broker_factory({"auto.create.topics.enable": "false"})
    try:
        p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tx-missing",
                      "topic.metadata.propagation.max.ms": 1000})
        p.init_transactions(30)
        p.begin_transaction()
        p.produce("missing", b"lost")
        try:
            p.commit_transaction(30)
        except Exception as e:  # noqa: BLE001 - the error's shape is checked below
            err = e.args[0] if e.args and hasattr(e.args[0], "txn_requires_abort") else e
            assert getattr(err, "txn_requires_abort", lambda: False)(), repr(e)
        else:
            raise AssertionError("commit_transaction() succeeded although a record of the transaction failed")
        p.abort_transaction(30)
        p.close()
    finally:
        broker.stop()
