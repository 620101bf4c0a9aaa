"""Committed offsets and group metadata survive a broker SIGKILL (they are durable before OffsetCommit and
SyncGroup are answered)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.testing.pytest_plugin import KafkaBroker


def _consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                     "auto.offset.reset": "earliest", "session.timeout.ms": 6000})


def test_offsets_and_group_survive_sigkill(kafka_broker_factory: Callable[..., KafkaBroker]) -> None:
    broker = kafka_broker_factory({"group.initial.rebalance.delay.ms": 0}, in_process=False)  # a real SIGKILL
    try:
        topic, group = f"gk-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_topics([NewTopic(topic, 2, 1)]).values():
            f.result(10)
        p = Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(40):
            p.produce(topic, value=b"%d" % i, partition=i % 2)
        assert p.flush(10) == 0

        c = _consumer(broker.bootstrap, group)
        c.subscribe([topic])
        seen, deadline = 0, time.time() + 30
        while seen < 25 and time.time() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                seen += 1
        assert seen >= 25
        c.commit(asynchronous=False)  # answered => durable
        committed = {tp.partition: tp.offset for tp in c.committed(
            [TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=10)}
        assert sum(committed.values()) == seen
        # no clean close: the member and the broker die together
        broker.kill()
        broker.start()

        admin2 = AdminClient({"bootstrap.servers": broker.bootstrap})  # keep a reference: futures die with it
        desc = admin2.describe_consumer_groups([group])[group].result(15)
        assert desc.group_id == group and str(desc.state).rsplit(".", 1)[-1] in ("STABLE", "EMPTY",
                                                                                 "PREPARING_REBALANCE")
        c2 = _consumer(broker.bootstrap, group)
        after = {tp.partition: tp.offset for tp in c2.committed(
            [TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=15)}
        assert after == committed
        c2.close()
        c.close()
    finally:
        broker.stop()
