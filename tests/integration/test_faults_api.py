"""Each fault of the broker handle's API (``oncelog.testing``: docs/testing-your-code.md) against a third-party
client, which must react as it does to the same fault from Kafka: retry, fence, rejoin, reconnect, and leave every
record written once.

The brokers are the plugin's: fresh in-process ones from ``kafka_broker_factory`` (faults sent in the test's
process), and a broker process where the fault goes over the control channel."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import ProducerFenced
from confluent_kafka import Consumer, KafkaError, Producer

from oncelog.testing.faults import FaultError
from oncelog.testing.pytest_plugin import KafkaBroker

Factory = Callable[..., KafkaBroker]


def _produce_all(bootstrap: str, topic: str, values: list[bytes], **conf: object) -> list[KafkaError]:
    """An idempotent confluent-kafka producer sends ``values``; the delivery errors."""
    errors: list[KafkaError] = []
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0, **conf})
    for v in values:
        p.produce(topic, v, on_delivery=lambda err, _: errors.append(err) if err else None)
    assert p.flush(60) == 0
    return errors


@pytest.mark.parametrize("in_process", [True, False], ids=["in-process", "process"])
def test_not_leader_answers_are_retried_and_every_record_is_written_once(kafka_broker_factory: Factory,
                                                                         in_process: bool) -> None:
    """Kafka's documented reaction to NOT_LEADER_OR_FOLLOWER (a retriable error): the producer refreshes its
    metadata and retries the batch; with idempotence nothing is written twice."""
    broker = kafka_broker_factory(in_process=in_process)
    topic = broker.create_topic("orders")
    broker.fail_next("Produce", "NOT_LEADER_OR_FOLLOWER", times=3)
    values = [b"order-%d" % i for i in range(20)]
    assert _produce_all(broker.bootstrap, topic, values, **{"retry.backoff.ms": 20}) == []
    assert broker.fault_rules() == []  # the three answers were given
    broker.assert_exactly_once(topic, values)


def test_lost_produce_answer_is_retried_and_deduplicated(kafka_broker_factory: Factory) -> None:
    """The broker appends the batch but its answer never comes: the producer times the request out (librdkafka:
    socket.timeout.ms for a Produce) and sends the batch again on a new connection; the broker recognises its
    sequence (idempotence) and nothing is doubled."""
    broker = kafka_broker_factory()
    topic = broker.create_topic("payments")
    broker.drop("Produce", on="response", times=1)
    values = [b"pay-%d" % i for i in range(5)]
    assert _produce_all(broker.bootstrap, topic, values, **{"socket.timeout.ms": 1000}) == []
    assert len(broker.read_committed(topic)) == 5
    broker.assert_exactly_once(topic, values)


def test_end_txn_delayed_past_the_transaction_timeout_fails_and_nothing_is_visible(
        kafka_broker_factory: Factory) -> None:
    """The transaction coordinator aborts a transaction that outlives transaction.timeout.ms and bumps the
    producer's epoch (Kafka's TransactionCoordinator.abortTimedOutTransactions); the commit that arrives later is
    refused as coming from an old epoch: the producer is fenced (aiokafka: ProducerFenced), and a read_committed
    consumer sees none of the transaction. (aiokafka waits for the EndTxn answer for request_timeout_ms;
    librdkafka gives an EndTxn up after transaction.timeout.ms and retries it, so its retry, not the delayed
    request, would meet the abort.)"""
    broker = kafka_broker_factory({"transaction.abort.timed.out.transaction.cleanup.interval.ms": 100})
    topic = broker.create_topic("ledger")

    async def commit_late() -> BaseException | None:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=broker.transactional_id(),
                                    transaction_timeout_ms=1000)
        await producer.start()
        try:
            await producer.begin_transaction()
            await producer.send_and_wait(topic, b"never-visible")
            await asyncio.to_thread(broker.delay, "EndTxn", 2.5)
            try:
                await producer.commit_transaction()
            except Exception as e:  # noqa: BLE001 - checked by the caller
                return e
            return None
        finally:
            await producer.stop()

    failed = asyncio.run(commit_late())
    assert isinstance(failed, ProducerFenced), repr(failed)
    assert broker.read_committed(topic) == []
    assert broker.open_transactions() == []


def test_heartbeat_answered_rebalance_in_progress_makes_the_member_rejoin(kafka_broker_factory: Factory) -> None:
    """REBALANCE_IN_PROGRESS in a Heartbeat answer: the consumer rejoins the group (a new assignment comes) and
    goes on consuming."""
    broker = kafka_broker_factory({"group.initial.rebalance.delay.ms": 0})
    topic = broker.create_topic("events")
    assignments: list[int] = []
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": broker.group(), "auto.offset.reset": "earliest",
                  "heartbeat.interval.ms": 100, "session.timeout.ms": 6000})
    c.subscribe([topic], on_assign=lambda _, parts: assignments.append(len(parts)))
    try:
        deadline = time.monotonic() + 30
        while not assignments and time.monotonic() < deadline:
            c.poll(0.1)
        assert assignments == [1]
        broker.fail_next("Heartbeat", "REBALANCE_IN_PROGRESS")
        while len(assignments) < 2 and time.monotonic() < deadline:
            c.poll(0.1)
        assert assignments == [1, 1], "the member did not rejoin"
    finally:
        c.close()


def test_delayed_fetch_answers_late_and_the_consumer_waits(kafka_broker_factory: Factory) -> None:
    """A slow broker (Fetch answers 1 s late): the consumer gets the records, later; nothing is lost or doubled."""
    broker = kafka_broker_factory()
    topic = broker.create_topic("slow")
    assert _produce_all(broker.bootstrap, topic, [b"a", b"b"]) == []
    broker.delay("Fetch", 1.0, on="response")
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": broker.group(), "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got: list[bytes] = []
    started, deadline = time.monotonic(), time.monotonic() + 30
    while len(got) < 2 and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            got.append(m.value())
    took = time.monotonic() - started
    c.close()
    assert got == [b"a", b"b"] and took >= 1.0, (got, took)


@pytest.mark.parametrize("in_process", [True, False], ids=["in-process", "process"])
def test_kill_and_restart_keep_the_data_and_the_producer_goes_on(kafka_broker_factory: Factory,
                                                                  in_process: bool) -> None:
    """A broker killed (SIGKILL for a process) mid-stream and restarted on its data: acknowledged records are
    there, the idempotent producer reconnects and retries what was in flight, each record once."""
    broker = kafka_broker_factory(in_process=in_process)
    topic = broker.create_topic("stream", partitions=2)
    errors: list[KafkaError] = []
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 5,
                  "retry.backoff.ms": 50})
    values = [b"v-%d" % i for i in range(400)]
    for i, v in enumerate(values):
        p.produce(topic, v, on_delivery=lambda err, _: errors.append(err) if err else None)
        if i == 200:
            p.flush(10)
            broker.kill()
            broker.restart()
    assert p.flush(60) == 0 and errors == []
    broker.assert_exactly_once(topic, values)


def test_pause_holds_every_answer_until_it_ends(kafka_broker_factory: Factory) -> None:
    """A paused broker (a stopped process, or its loop blocked) answers nothing, then everything: an acks=all
    delivery made during a 1.5 s pause completes after it, once."""
    broker = kafka_broker_factory()
    topic = broker.create_topic("paused")
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 0})
    p.produce(topic, b"before")
    assert p.flush(10) == 0
    broker.pause(1.5)
    started = time.monotonic()
    p.produce(topic, b"during")
    assert p.flush(30) == 0
    assert time.monotonic() - started >= 1.2
    broker.assert_exactly_once(topic, [b"before", b"during"])


def test_close_connections_clients_reconnect(kafka_broker_factory: Factory) -> None:
    """Every client connection closed by the broker (as a restart or an idle timeout does): aiokafka reconnects on
    its next request."""
    broker = kafka_broker_factory()
    topic = broker.create_topic("reconnect")

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True)
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"one")
            closed = await asyncio.to_thread(broker.close_connections)
            assert closed >= 1
            await producer.send_and_wait(topic, b"two")
        finally:
            await producer.stop()

    asyncio.run(run())
    broker.assert_exactly_once(topic, [b"one", b"two"])


def test_faults_are_refused_with_kafkas_names_and_cleared(kafka_broker_factory: Factory) -> None:
    broker = kafka_broker_factory()
    with pytest.raises(FaultError, match="unknown Kafka API 'Produc'"):
        broker.fail_next("Produc", "NOT_LEADER_OR_FOLLOWER")
    with pytest.raises(FaultError, match="unknown Kafka error"):
        broker.fail_next("Produce", "NOT_A_LEADER")
    with pytest.raises(FaultError, match="cannot answer Metadata with an error; fail\\(\\) answers"):
        broker.fail_next("Metadata", "LEADER_NOT_AVAILABLE")
    broker.delay("Fetch", 5.0)
    broker.drop("Produce")
    assert [r["api"] for r in broker.fault_rules()] == ["Fetch", "Produce"]
    assert broker.clear_faults("Fetch") == 1 and broker.clear_faults() == 1 and broker.fault_rules() == []


def test_a_dropped_request_is_released_when_cleared(kafka_broker_factory: Factory) -> None:
    """A held request goes on when the test clears the fault (the fixture clears them after every test)."""
    broker = kafka_broker_factory()
    topic = broker.create_topic("held")
    broker.drop("Produce")
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 0})
    p.produce(topic, b"held")
    threading.Timer(1.0, broker.clear_faults).start()
    assert p.flush(30) == 0
    broker.assert_exactly_once(topic, [b"held"])
