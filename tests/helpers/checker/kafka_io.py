"""Recording helpers over confluent-kafka: a live consumer thread that records every poll, and a complete
read-to-the-end reader (the ``ReadToEnd`` the checker's lost-write and copy checks rely on)."""

from __future__ import annotations

import threading
import time
from typing import Any

from .history import History, Poll, ReadToEnd, Seek

__all__ = ["LiveConsumer", "read_to_end", "text"]


def text(b: bytes | None) -> str:
    return "" if b is None else b.decode("utf-8", "replace")


def _consumer(bootstrap: str, isolation: str, extra: dict[str, Any] | None = None) -> Any:
    from confluent_kafka import Consumer

    conf = {"bootstrap.servers": bootstrap, "group.id": "eos-checker-unused", "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "isolation.level": isolation, "enable.partition.eof": True,
            "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500, "fetch.wait.max.ms": 100}
    conf.update(extra or {})
    return Consumer(conf)


class LiveConsumer(threading.Thread):
    """Assigns ``partitions`` of ``topic`` from offset 0 and records every record it is handed until stopped,
    across broker kills (the client reconnects and resumes from its position)."""

    def __init__(self, history: History, bootstrap: str, topic: str, partitions: list[int], isolation: str,
                 name: str) -> None:
        super().__init__(daemon=True, name=name)
        self.history, self.bootstrap, self.topic, self.partitions = history, bootstrap, topic, partitions
        self.isolation = isolation
        self.stop_flag = threading.Event()
        self.errors: list[str] = []
        self.count = 0

    def run(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

        c = _consumer(self.bootstrap, self.isolation)
        c.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in self.partitions])
        try:
            while not self.stop_flag.is_set():
                for m in c.consume(500, 0.2):
                    err = m.error()
                    if err is not None:
                        if err.code() != KafkaError._PARTITION_EOF:
                            self.errors.append(str(err))
                        continue
                    self.history.add(Poll(self.name, self.name, m.topic(), m.partition(), m.offset(),
                                          text(m.value()), self.isolation))
                    self.count += 1
        finally:
            c.close()


def read_to_end(history: History, bootstrap: str, topic: str, partitions: list[int], isolation: str,
                session: str, timeout: float = 60.0) -> dict[int, int]:
    """Read every partition from offset 0 to its end (the high watermark, which every writer having stopped and
    every transaction being settled, is also the LSO) and record it all, then a ``ReadToEnd``.

    Returns partition -> high watermark. Raises if the end is not reached in time."""
    from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

    c = _consumer(bootstrap, isolation)
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=15)[1] for p in partitions}
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        history.add(Seek(session, topic, None))
        eof: set[int] = set()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for m in c.consume(1000, 0.2):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF and m.offset() >= ends[m.partition()]:
                        eof.add(m.partition())
                    elif err.code() != KafkaError._PARTITION_EOF:
                        raise AssertionError(f"{session}: consumer error {err}")
                    continue
                history.add(Poll(session, session, m.topic(), m.partition(), m.offset(), text(m.value()),
                                 isolation))
            if eof >= set(partitions):
                break
        else:
            pos = {tp.partition: tp.offset for tp in c.position([TopicPartition(topic, p) for p in partitions])}
            raise AssertionError(f"{session} ({isolation}) did not reach the end of {topic}: ends {ends}, at {pos}")
        history.add(ReadToEnd(session, topic, isolation, dict(ends)))
        return ends
    finally:
        c.close()

