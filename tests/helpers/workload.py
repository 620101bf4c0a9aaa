"""The randomized exactly-once workload (tests/eos, tests/cluster): transactional writers that commit or abort at
random, idempotent writers, and live read_committed / read_uncommitted readers, all recorded in one history for the
checker. The tests around it kill, power-cut or partition the broker(s) meanwhile."""

from __future__ import annotations

import random
import threading
import time
from typing import Any

from helpers.checker import (
    ABORT,
    COMMIT,
    FAIL,
    OK,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    UNKNOWN,
    History,
    Send,
    TxnEnd,
)
from helpers.checker.kafka_io import LiveConsumer, read_to_end

TOPIC = "eos-random"
PARTITIONS = 3
TXN_PRODUCERS = 3
IDEMPOTENT_PRODUCERS = 2


def on_delivery_into(send: Send) -> Any:
    from confluent_kafka import KafkaError

    def cb(err: Any, msg: Any) -> None:
        if err is None:
            send.outcome, send.offset, send.partition = OK, msg.offset(), msg.partition()
        elif err.code() == KafkaError._PURGE_QUEUE:
            send.outcome = FAIL  # purged before it was ever sent
        else:
            send.outcome = UNKNOWN
    return cb


class TxnWriter(threading.Thread):
    def __init__(self, history: History, bootstrap: str, tid: str, seed: int, stop: threading.Event,
                 conf: dict[str, Any] | None = None) -> None:
        super().__init__(daemon=True, name=tid)
        self.history, self.bootstrap, self.tid, self.stop = history, bootstrap, tid, stop
        self.conf = dict(conf or {})  # more producer settings (the network fault variant's timeouts)
        self.rnd = random.Random(seed)
        self.log: list[str] = []
        self.error: BaseException | None = None
        self.n = 0

    def producer(self) -> Any:
        from confluent_kafka import KafkaException, Producer

        while True:
            p = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": self.tid,
                          "transaction.timeout.ms": 15_000, "linger.ms": self.rnd.choice([0, 2, 10]),
                          "message.timeout.ms": 12_000, "reconnect.backoff.ms": 50,
                          "reconnect.backoff.max.ms": 500, **self.conf})
            try:
                p.init_transactions(30)
                return p
            except KafkaException as e:
                self.log.append(f"init: {e}")
                time.sleep(0.2)

    def end(self, txn: str, outcome: str) -> None:
        self.history.add(TxnEnd(txn, outcome))
        self.log.append(f"{txn}: {outcome}")

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # noqa: BLE001
            self.error = e

    def _run(self) -> None:
        from confluent_kafka import KafkaException

        gen = 0
        p = self.producer()
        while not self.stop.is_set():
            self.n += 1
            txn = f"{self.tid}.{gen}.{self.n}"
            abort = self.rnd.random() < 0.3
            try:
                p.begin_transaction()
                for k in range(self.rnd.randrange(1, 25)):
                    s = self.history.add(Send(self.tid, TOPIC, self.rnd.randrange(PARTITIONS), f"{txn}:{k}",
                                              UNKNOWN, txn=txn))
                    p.produce(TOPIC, value=s.value.encode(), partition=s.partition,  # type: ignore[union-attr]
                              on_delivery=on_delivery_into(s))  # type: ignore[arg-type]
                    p.poll(0)
                if self.rnd.random() < 0.5:
                    p.flush(20)
                if abort:
                    p.abort_transaction(20)
                    p.poll(0)
                    self.end(txn, ABORT)
                else:
                    p.flush(20)
                    p.commit_transaction(20)
                    p.poll(0)
                    self.end(txn, COMMIT)
            except KafkaException as e:
                err = e.args[0]
                self.log.append(f"{txn}: {err}")
                try:
                    p.poll(0)
                except KafkaException:  # a fatally failed producer raises its error again from poll()
                    pass
                if err.txn_requires_abort():
                    try:
                        p.abort_transaction(20)
                        p.poll(0)
                        self.end(txn, ABORT)
                        continue
                    except KafkaException as e2:
                        self.log.append(f"{txn}: abort failed: {e2}")
                # retriable (e.g. a timed out commit: its fate is unknown) or fatal: start over with a new
                # producer; InitProducerId settles the last transaction (completes a prepared commit, else aborts).
                # Fatal happens legitimately: an AddPartitionsToTxn lost with a broker kill leaves librdkafka unsure
                # it was registered, so its abort sends EndTxn(abort), which a coordinator whose last transaction is
                # CompleteCommit answers INVALID_TXN_STATE, as Kafka does (it cannot tell that from an abort of a
                # transaction that was in fact committed).
                self.end(txn, UNKNOWN)
                try:
                    p.purge()
                    p.poll(0)
                except KafkaException:  # a fenced / fatally failed producer may raise its error again
                    pass
                del p
                gen += 1
                p = self.producer()
        try:
            p.flush(5)
            p.poll(0)
        except KafkaException:
            pass


class IdempotentWriter(threading.Thread):
    def __init__(self, history: History, bootstrap: str, name: str, seed: int, stop: threading.Event,
                 conf: dict[str, Any] | None = None) -> None:
        super().__init__(daemon=True, name=name)
        self.history, self.bootstrap, self.stop = history, bootstrap, stop
        self.conf = dict(conf or {})  # more producer settings (the network fault variant's timeouts)
        self.rnd = random.Random(seed)
        self.error: BaseException | None = None
        self.fatal: list[str] = []

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # noqa: BLE001
            self.error = e

    def _run(self) -> None:
        from confluent_kafka import Producer

        gen = 0
        i = 0
        while not self.stop.is_set():
            errors: list[str] = []
            p = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                          "linger.ms": self.rnd.choice([0, 5]), "message.timeout.ms": 30_000,
                          "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500, **self.conf,
                          "error_cb": lambda e, errors=errors: errors.append(str(e)) if e.fatal() else None})
            while not self.stop.is_set() and not errors:
                s = self.history.add(Send(self.name, TOPIC, self.rnd.randrange(PARTITIONS), f"{self.name}.{gen}.{i}",
                                          UNKNOWN))
                i += 1
                try:
                    p.produce(TOPIC, value=s.value.encode(), partition=s.partition,  # type: ignore[union-attr]
                              on_delivery=on_delivery_into(s))  # type: ignore[arg-type]
                except BufferError:
                    s.outcome = FAIL  # type: ignore[union-attr]
                p.poll(0.002)
            p.flush(30)
            p.poll(0)
            if errors:
                self.fatal.extend(errors)
                gen += 1


class Workload:
    """The writers (transactional and idempotent) and the live readers of one run, started together."""

    def __init__(self, h: History, boot: str, rnd: random.Random, stop: threading.Event,
                 txn_conf: dict[str, Any] | None = None, idem_conf: dict[str, Any] | None = None) -> None:
        self.h, self.boot = h, boot
        self.writers: list[Any] = [TxnWriter(h, boot, f"tx{i}", rnd.randrange(1 << 30), stop, txn_conf)
                                   for i in range(TXN_PRODUCERS)]
        self.writers += [IdempotentWriter(h, boot, f"idem{i}", rnd.randrange(1 << 30), stop, idem_conf)
                         for i in range(IDEMPOTENT_PRODUCERS)]
        self.readers = [LiveConsumer(h, boot, TOPIC, list(range(PARTITIONS)), iso, f"live-{iso}")
                        for iso in (READ_COMMITTED, READ_UNCOMMITTED)]
        for t in self.writers + self.readers:
            t.start()

    def finish(self) -> dict[str, dict[int, int]]:
        """Once ``stop`` is set: wait for the writers, settle every transactional id's last transaction, stop the
        live readers and read every partition to its end both ways (the ends, per isolation level)."""
        from confluent_kafka import Producer

        for t in self.writers:
            t.join(90)
            assert not t.is_alive(), f"writer {t.name} is stuck"
        for i in range(TXN_PRODUCERS):
            Producer({"bootstrap.servers": self.boot, "transactional.id": f"tx{i}"}).init_transactions(30)
        time.sleep(1.0)  # let the live consumers catch up a bit
        for r in self.readers:
            r.stop_flag.set()
            r.join(30)
        return {iso: read_to_end(self.h, self.boot, TOPIC, list(range(PARTITIONS)), iso, f"final-{iso}")
                for iso in (READ_COMMITTED, READ_UNCOMMITTED)}

    def stats(self) -> dict[str, Any]:
        """What the report shows of the clients."""
        return {"live_polls": {r.name: r.count for r in self.readers},
                "consumer_errors": {r.name: r.errors[:5] for r in self.readers},
                "idempotent_fatal": {w.name: w.fatal[:5] for w in self.writers if isinstance(w, IdempotentWriter)},
                "txn_log_tail": {w.name: w.log[-8:] for w in self.writers if isinstance(w, TxnWriter)}}
