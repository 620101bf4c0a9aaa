"""The invoicer: reads orders, writes one invoice per order, exactly once. Each batch is one Kafka transaction that
holds the invoices and the consumer's offsets (KIP-98's consume-transform-produce loop, as confluent-kafka's
eos-transactions example does it): a crash, a retry or a broker failure at any point leaves every order invoiced
once, as a read_committed consumer sees the invoices."""

from __future__ import annotations

import json
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, Producer, TopicPartition


def invoice(order: bytes) -> bytes:
    o = json.loads(order)
    return json.dumps({"invoice": f"inv-{o['id']}", "customer": o["customer"], "due": o["amount"]}).encode()


class Invoicer:
    def __init__(self, bootstrap: str, orders: str, invoices: str, group: str, transactional_id: str) -> None:
        self.invoices = invoices
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
        self.producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                                  "transaction.timeout.ms": 30000})
        self.producer.init_transactions(60)
        self.consumer.subscribe([orders])
        self.invoiced = 0
        self.aborted = 0

    def run(self, idle: float = 3.0, batch: int = 50) -> int:
        """Invoice until no order has come for ``idle`` seconds since the group assigned partitions to this
        member; how many invoices were committed."""
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < idle:
            records = [m for m in self.consumer.consume(batch, 0.5) if m.error() is None]
            if records or not self.consumer.assignment():  # joining the group: not idle yet
                quiet_since = time.monotonic()
                self._transaction(records)
        return self.invoiced

    def _transaction(self, records: list[Message]) -> None:
        try:
            self.producer.begin_transaction()
            for m in records:
                self.producer.produce(self.invoices, invoice(m.value() or b"{}"), key=m.key())
            self.producer.send_offsets_to_transaction(self.consumer.position(self.consumer.assignment()),
                                                      self.consumer.consumer_group_metadata(), 30)
            self._commit()
            self.invoiced += len(records)
        except KafkaException as e:
            error = e.args[0]
            if error.fatal():
                raise
            if error.txn_requires_abort():
                self.producer.abort_transaction(60)
            self.aborted += 1
            self._rewind()  # the aborted batch is read again from the committed offsets

    def _commit(self) -> None:
        while True:
            try:
                self.producer.commit_transaction(60)
                return
            except KafkaException as e:
                if not e.args[0].retriable():
                    raise

    def _rewind(self) -> None:
        assignment = self.consumer.assignment()
        for tp in self.consumer.committed(assignment, 30):
            self.consumer.seek(TopicPartition(tp.topic, tp.partition,
                                              tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))

    def close(self) -> None:
        self.consumer.close()
        self.producer.flush(10)
