"""``Producer.produce()`` to a topic whose metadata is not known never blocks the caller (issue 17, finding 4: it
waited 121 s for a missing topic with auto-create off). As with confluent-kafka, the records wait in order while
the topic is looked up and fail through their delivery callback if it never appears."""

from __future__ import annotations

import time
from pathlib import Path

from oncelog.client import Producer
from oncelog.client.errors import KafkaError
from oncelog.client.message import Message
from oncelog.protocol.errors import ErrorCode
from oncelog.testing.broker_process import BrokerProcess


def test_produce_to_a_missing_topic_returns_at_once_and_fails_in_the_callback(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", settings={"auto.create.topics.enable": "false"}).start()
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
