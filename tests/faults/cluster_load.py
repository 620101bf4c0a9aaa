"""The load of the cluster fault tests: idempotent producers and a live read_committed reader, recorded in a checker
History, plus the liveness measures each fault test asserts after its heal.

``Load(h, bootstrap, topic, partitions, acks=...)`` starts two idempotent librdkafka producers (each record a unique
value, on an explicit partition, round robin), with ``transactional=True`` a transactional one too, and a live reader
(assign, from offset 0); ``finish()`` stops them (settling the last transaction) and
reads every partition to its end (a complete ``ReadToEnd`` for the checker). Producers use short request timeouts, so
a request stuck behind a fault fails within the fault and is retried after it.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from checker import ABORT, COMMIT, FAIL, OK, READ_COMMITTED, UNKNOWN, History, Send, TxnEnd
from checker.kafka_io import LiveConsumer, read_to_end

from oncelog.cluster.model import ClusterView
from oncelog.testing.cluster import ClusterProcess, topic_ready

__all__ = ["CLIENT_CONF", "Load", "TxnWriter", "Writer", "wait_live"]

#: requests stuck behind a fault time out (and are retried) well within it
CLIENT_CONF: dict[str, Any] = {"request.timeout.ms": 2000, "socket.timeout.ms": 3000, "message.timeout.ms": 60_000,
                               "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500,
                               "topic.metadata.refresh.interval.ms": 1000}


class Writer(threading.Thread):
    def __init__(self, h: History, boot: str, topic: str, partitions: int, name: str, acks: str,
                 stop: threading.Event) -> None:
        super().__init__(daemon=True, name=name)
        self.h, self.boot, self.topic, self.partitions, self.acks, self.stop_flag = h, boot, topic, partitions, \
            acks, stop
        self.errors: list[str] = []
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # noqa: BLE001
            self.failure = e

    def _run(self) -> None:
        from confluent_kafka import KafkaError, Producer

        def deliver(s: Send) -> Callable[[Any, Any], None]:
            def cb(err: Any, msg: Any) -> None:
                if err is None:
                    s.outcome, s.offset = OK, msg.offset()
                else:
                    s.outcome = FAIL if err.code() == KafkaError._PURGE_QUEUE else UNKNOWN
            return cb

        idempotent = self.acks == "all"  # the mutation (acks=1) cannot be idempotent
        p = Producer({"bootstrap.servers": self.boot, "acks": self.acks, "enable.idempotence": idempotent,
                      "linger.ms": 2, **CLIENT_CONF, "error_cb": lambda e: self.errors.append(str(e))})
        i = 0
        while not self.stop_flag.is_set():
            s = self.h.add(Send(self.name, self.topic, i % self.partitions, f"{self.name}-{i}", UNKNOWN))
            try:
                p.produce(self.topic, value=s.value.encode(), partition=s.partition,  # type: ignore[union-attr]
                          on_delivery=deliver(s))  # type: ignore[arg-type]
            except BufferError:
                s.outcome = FAIL  # type: ignore[union-attr]
            i += 1
            p.poll(0.004)
        p.flush(70)


class TxnWriter(threading.Thread):
    """A transactional producer: transactions of 1-10 records over the partitions, one in five aborted on purpose;
    an abortable error aborts, anything else (a timed out commit: fate unknown) starts over with InitProducerId,
    which settles the last transaction."""

    def __init__(self, h: History, boot: str, topic: str, partitions: int, tid: str, stop: threading.Event) -> None:
        super().__init__(daemon=True, name=tid)
        self.h, self.boot, self.topic, self.partitions, self.tid, self.stop_flag = h, boot, topic, partitions, tid, \
            stop
        self.log: list[str] = []
        self.failure: BaseException | None = None
        self.committed = 0

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # noqa: BLE001
            self.failure = e

    def producer(self) -> Any:
        from confluent_kafka import KafkaException, Producer

        while True:
            p = Producer({"bootstrap.servers": self.boot, "transactional.id": self.tid, "linger.ms": 2,
                          "transaction.timeout.ms": 20_000, **CLIENT_CONF, "message.timeout.ms": 15_000})
            try:
                p.init_transactions(30)
                return p
            except KafkaException as e:
                self.log.append(f"init: {e}")

    def _run(self) -> None:
        from confluent_kafka import KafkaError, KafkaException

        def deliver(s: Send) -> Callable[[Any, Any], None]:
            def cb(err: Any, msg: Any) -> None:
                if err is None:
                    s.outcome, s.offset = OK, msg.offset()
                else:
                    s.outcome = FAIL if err.code() == KafkaError._PURGE_QUEUE else UNKNOWN
            return cb

        p, n = self.producer(), 0
        while not self.stop_flag.is_set():
            n += 1
            txn = f"{self.tid}.{n}"
            try:
                p.begin_transaction()
                for k in range(1 + n % 10):
                    s = self.h.add(Send(self.tid, self.topic, (n + k) % self.partitions, f"{txn}:{k}", UNKNOWN,
                                        txn=txn))
                    p.produce(self.topic, value=s.value.encode(), partition=s.partition,  # type: ignore[union-attr]
                              on_delivery=deliver(s))  # type: ignore[arg-type]
                if n % 5 == 0:
                    p.abort_transaction(30)
                    self.h.add(TxnEnd(txn, ABORT))
                else:
                    p.commit_transaction(30)
                    self.h.add(TxnEnd(txn, COMMIT))
                    self.committed += 1
                p.poll(0)
            except KafkaException as e:
                err = e.args[0]
                self.log.append(f"{txn}: {err}")
                if err.txn_requires_abort():
                    try:
                        p.abort_transaction(30)
                        self.h.add(TxnEnd(txn, ABORT))
                        continue
                    except KafkaException as e2:
                        self.log.append(f"{txn}: abort failed: {e2}")
                self.h.add(TxnEnd(txn, UNKNOWN))
                with contextlib.suppress(KafkaException):
                    p.purge()
                    p.poll(0)
                del p
                p = self.producer()
        with contextlib.suppress(KafkaException):
            p.flush(10)

    def settle(self) -> None:
        """InitProducerId once more: the coordinator completes or aborts the last transaction."""
        from confluent_kafka import Producer

        Producer({"bootstrap.servers": self.boot, "transactional.id": self.tid}).init_transactions(30)


class Load:
    def __init__(self, h: History, boot: str, topic: str, partitions: int, acks: str = "all",
                 transactional: bool = False) -> None:
        self.h, self.boot, self.topic, self.partitions = h, boot, topic, partitions
        self.stop = threading.Event()
        self.writers: list[Writer | TxnWriter] = [Writer(h, boot, topic, partitions, f"{topic}-w{i}", acks, self.stop)
                                                  for i in range(2)]
        if transactional:
            self.writers.append(TxnWriter(h, boot, topic, partitions, f"{topic}-tx", self.stop))
        self.reader = LiveConsumer(h, boot, topic, list(range(partitions)), READ_COMMITTED, f"{topic}-live")
        for t in (*self.writers, self.reader):
            t.start()

    def acked(self) -> int:
        return sum(1 for s in self.h.of(Send) if s.outcome == OK)

    def acked_by_partition(self) -> dict[int, int]:
        out = dict.fromkeys(range(self.partitions), 0)
        for s in self.h.of(Send):
            if s.outcome == OK and s.partition is not None:
                out[s.partition] += 1
        return out

    def finish(self) -> dict[int, int]:
        self.stop.set()
        for w in self.writers:
            w.join(90)
            assert not w.is_alive(), f"writer {w.name} is stuck"
            assert w.failure is None, f"{w.name} crashed: {w.failure!r}"
            if isinstance(w, TxnWriter):
                w.settle()
        self.reader.stop_flag.set()
        self.reader.join(30)
        return read_to_end(self.h, self.boot, self.topic, list(range(self.partitions)), READ_COMMITTED,
                           f"{self.topic}-final")


def wait_live(cluster: ClusterProcess, load: Load, topic: str, healed_at: float, bound: float = 10.0,
              extra: Callable[[ClusterView], bool] | None = None) -> dict[str, float]:
    """Liveness after a heal: every partition of ``topic`` led with its full ISR, every partition acknowledged a
    write again, and the live reader read again; seconds from ``healed_at`` to each (AssertionError past
    ``bound``)."""
    out: dict[str, float] = {}
    acked, read = load.acked_by_partition(), load.reader.count
    deadline = healed_at + bound
    while time.monotonic() < deadline and len(out) < 3:
        now = time.monotonic()
        if "in_sync_s" not in out:
            try:
                v = cluster.view(timeout=1.0)
                if topic_ready(v, topic, 3) and (extra is None or extra(v)):
                    out["in_sync_s"] = round(now - healed_at, 2)
            except Exception:  # noqa: BLE001 - etcd busy: try again
                pass
        if "producing_s" not in out and all(n > acked[p] for p, n in load.acked_by_partition().items()):
            out["producing_s"] = round(now - healed_at, 2)
        if "consuming_s" not in out and load.reader.count > read:
            out["consuming_s"] = round(now - healed_at, 2)
        time.sleep(0.05)
    assert len(out) == 3, (f"not live {bound:g} s after the heal: {out} (acked per partition {acked} -> "
                           f"{load.acked_by_partition()}, read {read} -> {load.reader.count})")
    return out
