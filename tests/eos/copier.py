"""A transactional consume-transform-produce copier, run as its own process by test_copy.py (and SIGKILLed).

Like Kafka's TransactionalMessageCopier: a consumer in group ``--group`` (read_committed, no auto commit,
subscribe) and a producer with ``--transactional-id``. Each loop: poll up to ``--batch`` records, begin a
transaction, produce one output record per input record to ``--output`` (value ``<input value>|<txn name>``,
partition ``int(input) % output partitions``), then either

* commit: ``send_offsets_to_transaction(positions of the assignment, consumer group metadata)`` and commit, or
* on purpose (``--abort-rate``), after producing: flush, abort, and seek the consumer back to the group's
  last committed offsets (``committed()``), as the Kafka copier does.

A rebalance revoking partitions aborts an open transaction. Errors that require an abort are aborted and
sought back; fatal ones (fenced, unknown commit outcome...) exit with status 3 so the test restarts the copier.
SIGTERM: finish (abort an open transaction), leave the group, exit 0. SIGUSR1: print every thread's stack.

librdkafka's ``send_offsets_to_transaction()`` can block past its timeout (librdkafka #5456, open in 2.16: the
coordinator request's timeout is never checked; #5511: a cached coordinator that does not come back up is never
looked up again); seen here after the broker restarted under a running copier, blocking it for minutes and, since
its consumer keeps heartbeating, holding the group's rebalance for its whole rebalance timeout. The confluent
copier's transactional calls therefore run under a watchdog: one still blocked ``WATCHDOG_GRACE_S`` after its own
timeout ends the process the way a crash would (exit status 4, outcome unknown, restarted by the test), as a
liveness probe would in production.

Everything observable goes to ``--history`` (JSON lines of the checker's events, flushed per transaction): each
input record polled (Poll, read_committed), each seek/rebalance (Seek), each output send (Send, outcome
unknown: a commit is what makes them count) and each transaction's outcome (TxnEnd). A SIGKILL loses at most
the end of the current transaction, whose outcome then stays unknown.

Usage: python copier.py --client confluent|kafka-python|oncelog --bootstrap H:P --input T --output T
       --output-partitions N --group G --transactional-id ID --name NAME --history FILE [--abort-rate 0.1]
       [--group-protocol classic|consumer]
       [--max-poll-interval-ms 15000]
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from checker.history import ABORT, COMMIT, READ_COMMITTED, UNKNOWN, History, Poll, Seek, Send, TxnEnd

FATAL_EXIT = 3
HUNG_EXIT = 4
TXN_CALL_TIMEOUT_S = 15.0
WATCHDOG_GRACE_S = 5.0


class Watchdog:
    """Ends the process (status HUNG_EXIT) if a call it guards is still running ``timeout + grace`` seconds after
    it started: a blocked C call cannot be interrupted from Python, not even by SIGTERM."""

    def __init__(self, log: Callable[[str], None]) -> None:
        self.log = log
        self.lock = threading.Lock()
        self.current: tuple[str, float] | None = None  # (what, deadline on the monotonic clock)
        threading.Thread(target=self._watch, daemon=True).start()

    def call(self, what: str, timeout: float, fn: Callable[[], Any]) -> Any:
        with self.lock:
            self.current = (what, time.monotonic() + timeout + WATCHDOG_GRACE_S)
        try:
            return fn()
        finally:
            with self.lock:
                self.current = None

    def _watch(self) -> None:
        while True:
            time.sleep(0.5)
            with self.lock:
                cur = self.current
            if cur is not None and time.monotonic() > cur[1]:
                self.log(f"{cur[0]} is still blocked {WATCHDOG_GRACE_S:g} s after its own timeout (librdkafka "
                         f"#5456); exiting as a crash would")
                os._exit(HUNG_EXIT)


class Recorder:
    def __init__(self, path: str) -> None:
        self.f = open(path, "a")  # noqa: SIM115 - open for the life of the process
        self.buf: list[str] = []

    def add(self, event: Any) -> None:
        self.buf.append(History.to_line(event))

    def flush(self) -> None:
        if self.buf:
            self.f.write("\n".join(self.buf) + "\n")
            self.f.flush()
            self.buf.clear()


class Copier:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.instance = f"{a.name}.{os.getpid()}"
        self.rec = Recorder(a.history)
        self.rnd = random.Random(int.from_bytes(os.urandom(4), "big"))
        self.stop = False
        self.in_txn = False
        self.n = 0
        self.committed_txns = 0
        self.aborted_txns = 0
        signal.signal(signal.SIGTERM, self._on_term)
        faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test asks a stuck copier where it is

    def _on_term(self, *_: object) -> None:
        self.stop = True

    def log(self, msg: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {self.instance}: {msg}", file=sys.stderr, flush=True)

    def txn_name(self) -> str:
        self.n += 1
        return f"{self.instance}.{self.n}"

    def output(self, value: str, txn: str) -> tuple[int, str]:
        return int(value) % self.a.output_partitions, f"{value}|{txn}"

    def seek_event(self, topic: str, partition: int | None) -> None:
        self.rec.add(Seek(self.instance, topic, partition))

    def poll_event(self, topic: str, partition: int, offset: int, value: str) -> None:
        self.rec.add(Poll(self.instance, self.instance, topic, partition, offset, value, READ_COMMITTED))

    def end(self, txn: str, outcome: str) -> None:
        self.rec.add(TxnEnd(txn, outcome))
        self.rec.flush()
        if outcome == COMMIT:
            self.committed_txns += 1
        elif outcome == ABORT:
            self.aborted_txns += 1


# ---------------------------------------------------------------------------------------------- confluent-kafka
class ConfluentCopier(Copier):
    def run(self) -> int:
        from confluent_kafka import Consumer, KafkaException, Producer

        a = self.a
        group_conf: dict[str, Any] = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
        if a.group_protocol == "consumer":  # KIP-848: the session and heartbeats are the broker's settings
            group_conf = {"group.protocol": "consumer"}
        self.consumer = Consumer({
            "bootstrap.servers": a.bootstrap, "group.id": a.group, "isolation.level": "read_committed",
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "max.poll.interval.ms": a.max_poll_interval_ms, "reconnect.backoff.max.ms": 500, **group_conf})
        self.producer = Producer({
            "bootstrap.servers": a.bootstrap, "transactional.id": a.transactional_id, "linger.ms": 5,
            "transaction.timeout.ms": 20_000, "message.timeout.ms": 15_000, "reconnect.backoff.max.ms": 500})
        self.producer.init_transactions(30)
        self.watchdog = Watchdog(self.log)
        self.consumer.subscribe([a.input], on_assign=self.on_assign, on_revoke=self.on_revoke)
        self.log("started")
        try:
            while not self.stop:
                msgs = [m for m in self.consumer.consume(a.batch, 0.5) if m.error() is None]
                if not msgs or self.stop:
                    continue
                txn = self.txn_name()
                try:
                    self.transaction(txn, msgs)
                except KafkaException as e:
                    err = e.args[0]
                    self.log(f"{txn}: {err}")
                    if err.txn_requires_abort() and not err.fatal():
                        self.producer.abort_transaction(30)
                        self.in_txn = False
                        self.end(txn, ABORT)
                        self.seek_back()
                        continue
                    self.end(txn, UNKNOWN)
                    return FATAL_EXIT
            if self.in_txn:
                self.producer.abort_transaction(10)
                self.end(f"{self.instance}.{self.n}", ABORT)
        except KafkaException as e:
            self.log(f"fatal: {e}")
            self.rec.flush()
            return FATAL_EXIT
        finally:
            self.rec.flush()
        self.consumer.close()
        self.log(f"stopped: {self.committed_txns} committed, {self.aborted_txns} aborted")
        return 0

    def transaction(self, txn: str, msgs: list[Any]) -> None:
        p, c = self.producer, self.consumer
        p.begin_transaction()
        self.in_txn = True
        for m in msgs:
            value = m.value().decode()
            self.poll_event(m.topic(), m.partition(), m.offset(), value)
            part, out = self.output(value, txn)
            self.rec.add(Send(self.instance, self.a.output, part, out, UNKNOWN, txn=txn))
            p.produce(self.a.output, value=out.encode(), partition=part)
        self.rec.flush()
        if self.rnd.random() < self.a.abort_rate:
            p.flush(30)
            p.abort_transaction(30)
            self.in_txn = False
            self.end(txn, ABORT)
            self.seek_back()
            return
        positions = [tp for tp in c.position(c.assignment()) if tp.offset >= 0]
        meta = c.consumer_group_metadata()
        self.watchdog.call("send_offsets_to_transaction", TXN_CALL_TIMEOUT_S,
                           lambda: p.send_offsets_to_transaction(positions, meta, TXN_CALL_TIMEOUT_S))
        self.watchdog.call("commit_transaction", 30, lambda: p.commit_transaction(30))
        self.in_txn = False
        self.end(txn, COMMIT)

    def seek_back(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        for tp in self.consumer.committed(self.consumer.assignment(), 30):
            off = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
            self.consumer.seek(TopicPartition(tp.topic, tp.partition, off))
            self.seek_event(tp.topic, tp.partition)
        self.rec.flush()

    def on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        self.seek_event(self.a.input, None)
        self.log(f"assigned {[tp.partition for tp in partitions]}")

    def on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        if self.in_txn:
            self.producer.abort_transaction(30)
            self.in_txn = False
            self.end(f"{self.instance}.{self.n}", ABORT)
        self.seek_event(self.a.input, None)
        self.rec.flush()
        self.log(f"revoked {[tp.partition for tp in partitions]}")


# ---------------------------------------------------------------------------------------------- kafka-python
class KafkaPythonCopier(Copier):
    def run(self) -> int:
        from kafka import ConsumerRebalanceListener, KafkaConsumer, KafkaProducer

        a = self.a
        outer = self

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked: Any) -> None:
                if outer.in_txn:
                    outer.producer.abort_transaction()
                    outer.in_txn = False
                    outer.end(f"{outer.instance}.{outer.n}", ABORT)
                outer.seek_event(a.input, None)
                outer.rec.flush()
                outer.log(f"revoked {sorted(tp.partition for tp in revoked)}")

            def on_partitions_assigned(self, assigned: Any) -> None:
                outer.seek_event(a.input, None)
                outer.log(f"assigned {sorted(tp.partition for tp in assigned)}")

        self.consumer = KafkaConsumer(
            bootstrap_servers=a.bootstrap, group_id=a.group, isolation_level="read_committed",
            enable_auto_commit=False, auto_offset_reset="earliest", session_timeout_ms=6000,
            heartbeat_interval_ms=500, max_poll_interval_ms=15_000, request_timeout_ms=20_000)
        self.producer = KafkaProducer(bootstrap_servers=a.bootstrap, transactional_id=a.transactional_id,
                                      linger_ms=5, transaction_timeout_ms=20_000, request_timeout_ms=15_000)
        self.producer.init_transactions()
        self.consumer.subscribe([a.input], listener=Listener())
        self.log("started")
        try:
            while not self.stop:
                batch = self.consumer.poll(timeout_ms=500, max_records=a.batch)
                msgs = sorted((m for recs in batch.values() for m in recs), key=lambda m: (m.partition, m.offset))
                if not msgs or self.stop:
                    continue
                txn = self.txn_name()
                try:
                    self.transaction(txn, msgs)
                except Exception as e:  # noqa: BLE001 - kafka-python raises many types; abort if it can
                    self.log(f"{txn}: {e!r}")
                    try:
                        self.producer.abort_transaction()
                    except Exception as e2:  # noqa: BLE001
                        self.log(f"{txn}: abort failed: {e2!r}")
                        self.end(txn, UNKNOWN)
                        return FATAL_EXIT
                    self.in_txn = False
                    self.end(txn, ABORT)
                    self.seek_back()
            if self.in_txn:
                self.producer.abort_transaction()
                self.end(f"{self.instance}.{self.n}", ABORT)
        except Exception as e:  # noqa: BLE001
            self.log(f"fatal: {e!r}")
            self.rec.flush()
            return FATAL_EXIT
        finally:
            self.rec.flush()
        self.consumer.close()
        self.producer.close(timeout=5)
        self.log(f"stopped: {self.committed_txns} committed, {self.aborted_txns} aborted")
        return 0

    def transaction(self, txn: str, msgs: list[Any]) -> None:
        from kafka.structs import OffsetAndMetadata

        p, c = self.producer, self.consumer
        p.begin_transaction()
        self.in_txn = True
        futures = []
        for m in msgs:
            value = m.value.decode()
            self.poll_event(m.topic, m.partition, m.offset, value)
            part, out = self.output(value, txn)
            self.rec.add(Send(self.instance, self.a.output, part, out, UNKNOWN, txn=txn))
            futures.append(p.send(self.a.output, value=out.encode(), partition=part))
        self.rec.flush()
        if self.rnd.random() < self.a.abort_rate:
            p.flush(30)
            p.abort_transaction()
            self.in_txn = False
            self.end(txn, ABORT)
            self.seek_back()
            return
        p.flush(30)
        for f in futures:
            f.get(30)
        offsets = {tp: OffsetAndMetadata(c.position(tp), "", -1) for tp in c.assignment()}
        p.send_offsets_to_transaction(offsets, c.group_metadata())
        p.commit_transaction()
        self.in_txn = False
        self.end(txn, COMMIT)

    def seek_back(self) -> None:
        for tp in self.consumer.assignment():
            off = self.consumer.committed(tp)
            if off is None:
                self.consumer.seek_to_beginning(tp)
            else:
                self.consumer.seek(tp, off)
            self.seek_event(tp.topic, tp.partition)
        self.rec.flush()


# ---------------------------------------------------------------------------------------------- oncelog (ours)
class OncelogCopier(Copier):
    """The same copier on oncelog's own client: Consumer (group, read_committed) + transactional Producer."""

    def run(self) -> int:
        from oncelog.client import Consumer, KafkaError, Producer

        a = self.a
        group_conf: dict[str, Any] = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
        if a.group_protocol == "consumer":  # KIP-848: the session and heartbeats are the broker's settings
            group_conf = {"group.protocol": "consumer"}
        self.consumer = Consumer({
            "bootstrap.servers": a.bootstrap, "group.id": a.group, "isolation.level": "read_committed",
            "enable.auto.commit": False, "auto.offset.reset": "earliest", "max.poll.interval.ms": 15_000,
            "fetch.max.wait.ms": 200, "client.id": self.instance, **group_conf})
        self.producer = Producer({
            "bootstrap.servers": a.bootstrap, "transactional.id": a.transactional_id, "linger.ms": 5,
            "transaction.timeout.ms": 20_000, "delivery.timeout.ms": 15_000, "client.id": self.instance})
        try:
            self.producer.init_transactions(30)
            self.consumer.subscribe([a.input], on_assign=self.on_assign, on_revoke=self.on_revoke,
                                    on_lost=self.on_lost)
            self.log("started")
            while not self.stop:
                msgs = self.consumer.consume(a.batch, 0.5)
                if not msgs or self.stop:
                    continue
                txn = self.txn_name()
                try:
                    self.transaction(txn, msgs)
                except KafkaError as e:
                    self.log(f"{txn}: {e}")
                    if self.abortable():
                        self.producer.abort_transaction(30)
                        self.in_txn = False
                        self.end(txn, ABORT)
                        self.seek_back()
                        continue
                    self.end(txn, UNKNOWN)
                    return FATAL_EXIT
            if self.in_txn:
                self.producer.abort_transaction(10)
                self.end(f"{self.instance}.{self.n}", ABORT)
        except KafkaError as e:
            self.log(f"fatal: {e}")
            self.rec.flush()
            return FATAL_EXIT
        finally:
            self.rec.flush()
        self.consumer.close()
        self.producer.close(5)
        self.log(f"stopped: {self.committed_txns} committed, {self.aborted_txns} aborted")
        return 0

    def abortable(self) -> bool:
        from oncelog.client.producer.txn_state import TxnState

        return self.producer.transaction_state in (TxnState.ABORTABLE_ERROR, TxnState.IN_TRANSACTION)

    def transaction(self, txn: str, msgs: list[Any]) -> None:
        p, c = self.producer, self.consumer
        p.begin_transaction()
        self.in_txn = True
        for m in msgs:
            value = m.value().decode()
            self.poll_event(m.topic(), m.partition(), m.offset(), value)
            part, out = self.output(value, txn)
            self.rec.add(Send(self.instance, self.a.output, part, out, UNKNOWN, txn=txn))
            p.produce(self.a.output, value=out.encode(), partition=part)
        self.rec.flush()
        if self.rnd.random() < self.a.abort_rate:
            p.flush(30)
            p.abort_transaction(30)
            self.in_txn = False
            self.end(txn, ABORT)
            self.seek_back()
            return
        positions = [tp for tp in c.position(c.assignment()) if tp.offset >= 0]
        p.send_offsets_to_transaction(positions, c.consumer_group_metadata(), 30)
        p.commit_transaction(30)
        self.in_txn = False
        self.end(txn, COMMIT)

    def seek_back(self) -> None:
        from oncelog.client import OFFSET_BEGINNING, TopicPartition

        for tp in self.consumer.committed(self.consumer.assignment(), 30):
            self.consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))
            self.seek_event(tp.topic, tp.partition)
        self.rec.flush()

    def on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        self.seek_event(self.a.input, None)
        self.log(f"assigned {[tp.partition for tp in partitions]}")

    def on_revoke(self, consumer: Any, partitions: list[Any], what: str = "revoked") -> None:
        if self.in_txn:
            self.producer.abort_transaction(30)
            self.in_txn = False
            self.end(f"{self.instance}.{self.n}", ABORT)
        self.seek_event(self.a.input, None)
        self.rec.flush()
        self.log(f"{what} {[tp.partition for tp in partitions]}")

    def on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        self.on_revoke(consumer, partitions, "lost")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--client", choices=["confluent", "kafka-python", "oncelog"], default="confluent")
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--output-partitions", type=int, required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--transactional-id", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--history", required=True)
    ap.add_argument("--abort-rate", type=float, default=0.1)
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--max-poll-interval-ms", type=int, default=15_000,
                    help="confluent only: librdkafka's max.poll.interval.ms, its JoinGroup rebalance timeout")
    ap.add_argument("--group-protocol", choices=["classic", "consumer"], default="classic",
                    help="confluent and oncelog: group.protocol (consumer: KIP-848)")
    a = ap.parse_args()
    classes: dict[str, type[ConfluentCopier | KafkaPythonCopier | OncelogCopier]] = {
        "confluent": ConfluentCopier, "kafka-python": KafkaPythonCopier, "oncelog": OncelogCopier}
    return classes[a.client](a).run()


if __name__ == "__main__":
    sys.exit(main())
