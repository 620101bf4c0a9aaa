"""Publishing orders: one record per order, keyed by customer, with an idempotent producer (a retried batch is
never written twice)."""

from __future__ import annotations

import json
from collections.abc import Iterable

from confluent_kafka import KafkaError, Producer


def encode(order: dict[str, object]) -> bytes:
    return json.dumps(order, sort_keys=True).encode()


def publish(bootstrap: str, topic: str, orders: Iterable[dict[str, object]]) -> int:
    """Send every order and wait until each is acknowledged by the broker; returns how many were sent. Raises
    RuntimeError with the first failure."""
    failures: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    sent = 0
    for order in orders:
        producer.produce(topic, encode(order), key=str(order["customer"]).encode(),
                         on_delivery=lambda err, _msg: failures.append(err) if err else None)
        sent += 1
        producer.poll(0)
    left = producer.flush(30)
    if failures or left:
        raise RuntimeError(f"{len(failures)} order(s) failed, {left} not acknowledged: {failures[:1]}")
    return sent
