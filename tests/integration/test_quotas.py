"""Client quotas against a real broker, set and read with kafka-python's AlterClientQuotas / DescribeClientQuotas
(confluent-kafka's AdminClient does not expose them): a confluent-kafka producer and consumer over their byte rate
are throttled as Kafka throttles them (throttle_time_ms seen by the client's throttle_cb, the achieved rate near the
quota) while another client id is not, and a client over its request percentage is muted for the throttle time.

A broker of its own: ``quota.window.num=2`` keeps the burst a quota allows at first (``quota.window.num - 1``
windows of it) to one second, so the tests last seconds.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest

from oncelog.protocol.messages.metadata_request import MetadataRequest
from oncelog.testing.pytest_plugin import KafkaBroker

from helpers.cli import oncelog
from helpers.rawclient import RawClient

METADATA = 3
INVALID_REQUEST = 42
QUOTA = 100_000  # bytes a second
MESSAGE = 10_000


@pytest.fixture(scope="module")
def qbroker(kafka_module_broker_factory: Callable[..., KafkaBroker]) -> Iterator[KafkaBroker]:
    # a process: throttle times are measured against the broker's clock, apart from the clients' load
    proc = kafka_module_broker_factory({"num.partitions": 1, "quota.window.num": 2}, in_process=False)
    yield proc
    rc = proc.stop()
    assert rc == 0, f"broker did not shut down cleanly (exit {rc}):\n{proc.log_tail()}"


@pytest.fixture(scope="module")
def admin(qbroker: KafkaBroker) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=qbroker.bootstrap, client_id="quota-admin")
    yield client
    client.close()


def _send(admin: KafkaAdminClient, request: Any) -> Any:
    return admin._manager.run(admin._manager.send, request)


def alter(admin: KafkaAdminClient, entries: list[tuple[dict[str, str | None], dict[str, float | None]]],
          validate_only: bool = False) -> list[tuple[dict[str, str | None], int, str | None]]:
    """AlterClientQuotas; a value of None removes the key. (entity, error code, message) of each entity."""
    E = AlterClientQuotasRequest.EntryData
    request = AlterClientQuotasRequest(validate_only=validate_only, entries=[
        E(entity=[E.EntityData(entity_type=t, entity_name=n) for t, n in entity.items()],
          ops=[E.OpData(key=k, value=0.0 if v is None else float(v), remove=v is None) for k, v in ops.items()])
        for entity, ops in entries])
    return [({e.entity_type: e.entity_name for e in entry.entity}, entry.error_code, entry.error_message)
            for entry in _send(admin, request).entries]


def describe(admin: KafkaAdminClient, components: list[tuple[str, int, str | None]],
             strict: bool = False) -> Any:
    C = DescribeClientQuotasRequest.ComponentData
    return _send(admin, DescribeClientQuotasRequest(strict=strict, components=[
        C(entity_type=t, match_type=m, match=name) for t, m, name in components]))


def quotas_of(response: Any) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    assert response.error_code == 0, response.error_message
    return {tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)): {v.key: v.value for v in entry.values}
            for entry in response.entries}


def produce(bootstrap: str, topic: str, client_id: str, total: int) -> tuple[float, list[float]]:
    """Produce ``total`` bytes in 10 kB records (two to a request); (seconds taken, throttle times seen)."""
    throttles: list[float] = []
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "acks": 1, "linger.ms": 5,
                         "batch.size": 2 * MESSAGE, "throttle_cb": lambda e: throttles.append(e.throttle_time)})
    producer.produce(topic, b"first")
    assert producer.flush(10) == 0  # connected, topic created: not timed
    payload = b"x" * MESSAGE
    start = time.monotonic()
    for _ in range(total // MESSAGE):
        producer.produce(topic, payload)
        producer.poll(0)
    assert producer.flush(60) == 0
    elapsed = time.monotonic() - start
    producer.poll(0.1)
    return elapsed, throttles


def consume(bootstrap: str, topic: str, client_id: str, count: int) -> tuple[float, list[float]]:
    """Read ``count`` 10 kB records from the start; (seconds from the first to the last, throttle times seen)."""
    throttles: list[float] = []
    consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": client_id, "group.id": client_id,
                         "enable.auto.commit": False,
                         "throttle_cb": lambda e: throttles.append(e.throttle_time)})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got, first = 0, 0.0
    deadline = time.monotonic() + 60
    try:
        while got < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None or msg.error() or len(msg.value() or b"") < MESSAGE:
                continue
            first = first or time.monotonic()
            got += 1
    finally:
        consumer.close()
    assert got == count, f"{client_id} read {got} of {count} records"
    return time.monotonic() - first, throttles


def test_alter_and_describe_round_trip_with_kafkas_validation(admin: KafkaAdminClient) -> None:
    app = f"app-{uuid.uuid4().hex[:6]}"
    results = alter(admin, [({"client-id": app}, {"producer_byte_rate": 1024, "request_percentage": 12.5}),
                            ({"user": None, "client-id": app}, {"consumer_byte_rate": 2048}),
                            ({"client-id": app + "-x"}, {"producer_bytes_rate": 1}),
                            ({"user": "alice"}, {"consumer_byte_rate": -1}),
                            ({"ip": "127.0.0.9"}, {"connection_creation_rate": 5})])
    assert results == [
        ({"client-id": app}, 0, None),
        ({"user": None, "client-id": app}, 0, None),
        ({"client-id": app + "-x"}, INVALID_REQUEST, "Invalid configuration key producer_bytes_rate"),
        ({"user": "alice"}, INVALID_REQUEST, "Quota consumer_byte_rate must be greater than 0"),
        ({"ip": "127.0.0.9"}, 0, None)]
    assert alter(admin, [({"client-id": app}, {"producer_byte_rate": 1})], validate_only=True)[0][1] == 0
    found = quotas_of(describe(admin, [("client-id", 0, app)]))
    assert found == {(("client-id", app),): {"producer_byte_rate": 1024.0, "request_percentage": 12.5},
                     (("client-id", app), ("user", None)): {"consumer_byte_rate": 2048.0}}
    assert quotas_of(describe(admin, [("client-id", 0, app)], strict=True)) == {
        (("client-id", app),): {"producer_byte_rate": 1024.0, "request_percentage": 12.5}}  # validate_only: same
    assert quotas_of(describe(admin, [("user", 1, None), ("client-id", 0, app)])) == {
        (("client-id", app), ("user", None)): {"consumer_byte_rate": 2048.0}}
    assert quotas_of(describe(admin, [("ip", 2, None)]))[(("ip", "127.0.0.9"),)] == {"connection_creation_rate": 5.0}
    assert not quotas_of(describe(admin, [("user", 0, "alice")]))  # the refused entity was not written
    bad = describe(admin, [("user", 0, None)])
    assert (bad.error_code, bad.error_message) == (
        INVALID_REQUEST, "Request specified MATCH_TYPE_EXACT, but set match string to null.")
    alter(admin, [({"client-id": app}, {"producer_byte_rate": None, "request_percentage": None}),
                  ({"user": None, "client-id": app}, {"consumer_byte_rate": None}),
                  ({"ip": "127.0.0.9"}, {"connection_creation_rate": None})])
    assert not quotas_of(describe(admin, [("client-id", 0, app)]))


def test_a_producer_over_its_byte_rate_is_throttled_and_another_client_id_is_not(
        qbroker: KafkaBroker, admin: KafkaAdminClient) -> None:
    topic = f"produce-{uuid.uuid4().hex[:8]}"
    assert alter(admin, [({"client-id": "slow-producer"}, {"producer_byte_rate": QUOTA})])[0][1] == 0
    total = 4 * QUOTA
    elapsed, throttles = produce(qbroker.bootstrap, topic, "slow-producer", total)
    # the quota's first window is a burst (one window of the quota); the rest at the quota: about 3 s
    assert any(t > 0 for t in throttles), "the client saw no throttle_time_ms"
    assert QUOTA / 2 <= total / elapsed <= 2 * QUOTA, f"{total / elapsed:.0f} B/s with a quota of {QUOTA} B/s"
    free_elapsed, free_throttles = produce(qbroker.bootstrap, topic, "free-producer", total)
    assert not free_throttles and total / free_elapsed > 2 * QUOTA


def test_a_consumer_over_its_byte_rate_is_throttled_and_another_client_id_is_not(
        qbroker: KafkaBroker, admin: KafkaAdminClient) -> None:
    topic = f"consume-{uuid.uuid4().hex[:8]}"
    total = 4 * QUOTA
    produce(qbroker.bootstrap, topic, "filler", total)
    assert alter(admin, [({"client-id": "slow-consumer"}, {"consumer_byte_rate": 2 * QUOTA})])[0][1] == 0
    elapsed, throttles = consume(qbroker.bootstrap, topic, "slow-consumer", total // MESSAGE)
    # a fetch reads at most one window of the quota; the next is throttled (answered empty) for about a second
    assert any(t > 0 for t in throttles), "the consumer saw no throttle_time_ms"
    assert elapsed >= 0.8, f"read {total} B in {elapsed:.2f} s with a quota of {2 * QUOTA} B/s"
    free_elapsed, free_throttles = consume(qbroker.bootstrap, topic, "free-consumer", total // MESSAGE)
    assert not free_throttles and free_elapsed < elapsed


def test_a_client_over_its_request_percentage_is_muted_for_the_throttle_time(
        qbroker: KafkaBroker, admin: KafkaAdminClient) -> None:
    # the default user with this client id: a tiny share of the broker's time
    assert alter(admin, [({"user": None, "client-id": "busy"}, {"request_percentage": 0.0001})])[0][1] == 0
    with RawClient(qbroker.bootstrap, client_id="busy") as busy, RawClient(qbroker.bootstrap, client_id="idle") as idle:
        first = busy.request(METADATA, 9, MetadataRequest(topics=[]))
        muted = time.monotonic()
        assert 0 < first.throttle_time_ms <= 1000  # a request throttle is at most quota.window.size.seconds
        idle_response = idle.request(METADATA, 9, MetadataRequest(topics=[]))
        assert idle_response.throttle_time_ms == 0 and time.monotonic() - muted < 0.5  # others are served
        busy.request(METADATA, 9, MetadataRequest(topics=[]))  # read only once the mute is over
        assert time.monotonic() - muted >= first.throttle_time_ms / 1000 * 0.9
    alter(admin, [({"user": None, "client-id": "busy"}, {"request_percentage": None})])


def test_the_cli_sets_lists_and_removes_quotas(qbroker: KafkaBroker) -> None:
    b = ["-b", qbroker.bootstrap]
    app = f"cli-{uuid.uuid4().hex[:6]}"
    r = oncelog("quota", "set", "--client-id", app, "--user-default", "producer_byte_rate=1048576",
                "request_percentage=25", *b)
    assert r.exit_code == 0, r.stderr
    r = oncelog("quota", "list", "--client-id", app, "--json", *b)
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout) == [{"entity": {"user": None, "client-id": app},
                                     "quotas": {"producer_byte_rate": 1048576.0, "request_percentage": 25.0}}]
    r = oncelog("quota", "list", "--client-id", app, *b)
    assert "user=<default>, client-id=" + app in r.stdout and "producer_byte_rate=1048576, request_percentage=25" in r.stdout
    bad = oncelog("quota", "set", "--client-id", app, "producer_byte_rate=-1", *b)
    assert bad.exit_code == 1 and bad.stderr.strip() == (
        f"error: cannot change the quotas of client-id={app}: Quota producer_byte_rate must be greater than 0")
    usage = oncelog("quota", "set", "producer_byte_rate=1", *b)
    assert usage.exit_code == 2 and usage.stderr.startswith("error: name the entity")
    r = oncelog("quota", "remove", "--client-id", app, "--user-default", "producer_byte_rate", "request_percentage",
                *b)
    assert r.exit_code == 0, r.stderr
    assert json.loads(oncelog("quota", "list", "--client-id", app, "--json", *b).stdout) == []
