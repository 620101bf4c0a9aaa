"""The pytest plugin's cluster (``kafka_cluster``: etcd and three broker processes) and its faults, against
confluent-kafka: a leader killed, a leader cut from the cluster. Kafka's documented reaction: the producer's
requests to the lost leader fail or time out, it refreshes its metadata, finds the new leader (elected from the
in-sync replicas) and retries there; with acks=all and idempotence every record is written once."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import KafkaError, Producer

from oncelog.client.admin import Admin
from oncelog.testing.pytest_plugin import KafkaCluster


def _replicated_topic(cluster: KafkaCluster, name: str) -> str:
    topic = cluster.topic(name)
    with Admin({"bootstrap.servers": cluster.bootstrap}) as admin:
        admin.create_topics(topic, 1, replication_factor=3)
    cluster.wait_for_topic(topic)
    return topic


def _produce_across(cluster: KafkaCluster, topic: str, fault: Callable[[int], None]) -> tuple[list[bytes], int]:
    """Records before, during and after ``fault(leader)``; (the values, the old leader)."""
    leader = cluster.leaders(topic)[0]
    errors: list[KafkaError] = []
    p = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 5, "socket.timeout.ms": 3000})
    values = [b"r-%d" % i for i in range(60)]
    for i, v in enumerate(values):
        p.produce(topic, v, on_delivery=lambda err, _: errors.append(err) if err else None)
        if i == 20:
            assert p.flush(30) == 0
            fault(leader)
        if i > 20:
            p.poll(0.02)
    assert p.flush(90) == 0 and errors == [], errors
    return values, leader


def test_leader_killed_producer_moves_to_the_new_leader(kafka_cluster: KafkaCluster) -> None:
    topic = _replicated_topic(kafka_cluster, "killed")
    values, old = _produce_across(kafka_cluster, topic, kafka_cluster.kill)
    assert kafka_cluster.leaders(topic)[0] != old
    kafka_cluster.assert_exactly_once(topic, values)


def test_leader_partitioned_producer_moves_to_the_new_leader(kafka_cluster: KafkaCluster) -> None:
    topic = _replicated_topic(kafka_cluster, "cut")
    values, old = _produce_across(kafka_cluster, topic, kafka_cluster.partition)
    assert kafka_cluster.leaders(topic)[0] != old
    started = time.monotonic()
    kafka_cluster.heal(old)
    kafka_cluster.wait_for_topic(topic, timeout=60)  # the cut broker is back in sync
    assert time.monotonic() - started < 60
    kafka_cluster.assert_exactly_once(topic, values)
