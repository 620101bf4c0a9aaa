"""One benchmark scenario against one broker, run as a child process of bench/run.py.

Running each scenario in its own process lets run.py enforce a hard time cap (a hung broker or a
client stuck in a retry loop is killed with the process) and keeps librdkafka state from leaking
between rounds. The last line on stdout is a JSON object: {"ok": true, "metrics": {...}} or
{"ok": false, "error": "...", "kind": "error"|"unsupported"}.

Usage (normally only via run.py):
    python bench/scenarios.py SCENARIO --bootstrap 127.0.0.1:9092 --topic t --messages 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
import uuid
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

PARTITIONS = 3
POOL = 1 << 16  # distinct random values, cycled (values are incompressible; compression is off)


class Unsupported(Exception):
    """The broker answered that it doesn't implement what the scenario needs."""


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


CLIENT_ERRORS: list[KafkaError] = []  # every error_cb error, to name the cause when a scenario fails


def on_client_error(err: KafkaError) -> None:
    CLIENT_ERRORS.append(err)
    log(f"client error_cb: {err}")


def unsupported_cause(exc: BaseException) -> str | None:
    """The broker lacks a feature the client needs (e.g. idempotence, transactions) -> its message."""
    seen: BaseException | None = exc
    errs = list(CLIENT_ERRORS)
    while seen is not None:
        if isinstance(seen, KafkaException) and seen.args and isinstance(seen.args[0], KafkaError):
            errs.append(seen.args[0])
        seen = seen.__cause__ or seen.__context__
    for e in errs:
        if e.code() in (KafkaError._UNSUPPORTED_FEATURE, KafkaError.UNSUPPORTED_VERSION):
            return str(e.str())
    return None


def values(size: int) -> list[bytes]:
    blob = os.urandom(size * POOL)
    return [blob[i * size:(i + 1) * size] for i in range(POOL)]


def create_topic(bootstrap: str, topic: str, timeout: float = 30.0) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)],
                              operation_timeout=timeout, request_timeout=timeout)[topic]
    fut.result(timeout)
    # Wait until every partition has a leader in metadata, so no scenario times the topic's birth.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=5).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == PARTITIONS and all(
            p.leader >= 0 and p.error is None for p in md.partitions.values()
        ):
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {topic} has no leaders for all {PARTITIONS} partitions after {timeout}s")


def delete_topic(bootstrap: str, topic: str) -> None:
    """Best effort: frees the memory-only broker's storage between rounds."""
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.delete_topics([topic], operation_timeout=10, request_timeout=10)[topic].result(15)
    except Exception as e:  # noqa: BLE001
        log(f"delete_topics({topic}) failed (ignored): {e}")


class DeliveryErrors:
    """Counts failed deliveries. With delivery.report.only.error=true only failures reach Python."""

    def __init__(self) -> None:
        self.count = 0
        self.first: KafkaError | None = None

    def __call__(self, err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            self.count += 1
            if self.first is None:
                self.first = err

    def check(self) -> None:
        if self.count:
            raise RuntimeError(f"{self.count} deliveries failed, first: {self.first}")


def produce_all(p: Producer, topic: str, n: int, vals: list[bytes]) -> None:
    produce = p.produce
    mask = POOL - 1
    for i in range(n):
        v = vals[i & mask]
        try:
            produce(topic, v)
        except BufferError:
            while True:
                p.poll(0.005)
                try:
                    produce(topic, v)
                    break
                except BufferError:
                    continue
    left = p.flush(600)
    if left:
        raise RuntimeError(f"{left} messages still undelivered after flush")


def warm_up(p: Producer, topic: str, vals: list[bytes]) -> None:
    """One record per partition, outside the timed region: connection, metadata, producer id."""
    for i in range(PARTITIONS):
        p.produce(topic, vals[i], partition=i)
    if p.flush(30):
        raise RuntimeError("warm-up records not delivered within 30s")


def producer_conf(a: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    errs = DeliveryErrors()
    conf: dict[str, Any] = {
        "bootstrap.servers": a.bootstrap,
        "acks": "all",
        "linger.ms": 5,
        "delivery.report.only.error": True,
        "on_delivery": errs,
        "error_cb": on_client_error,
    }
    conf.update(extra)
    return conf


def throughput(n: int, size: int, secs: float) -> dict[str, float]:
    return {"msg_s": n / secs, "mb_s": n * size / secs / 1e6, "seconds": secs, "messages": n}


def sc_produce(a: argparse.Namespace, idempotent: bool = False) -> dict[str, float]:
    vals = values(a.value_size)
    conf = producer_conf(a, **({"enable.idempotence": True} if idempotent else {}))
    errs: DeliveryErrors = conf["on_delivery"]
    p = Producer(conf)
    warm_up(p, a.topic, vals)
    t0 = time.perf_counter()
    produce_all(p, a.topic, a.messages, vals)
    secs = time.perf_counter() - t0
    errs.check()
    return throughput(a.messages, a.value_size, secs)


def sc_consume(a: argparse.Namespace) -> dict[str, float]:
    vals = values(a.value_size)
    conf = producer_conf(a)
    errs: DeliveryErrors = conf["on_delivery"]
    p = Producer(conf)
    t0 = time.perf_counter()
    produce_all(p, a.topic, a.messages, vals)  # preload, not timed
    errs.check()
    log(f"preloaded {a.messages} records in {time.perf_counter() - t0:.1f}s")
    del p
    c = Consumer({
        "bootstrap.servers": a.bootstrap,
        "group.id": f"bench-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "fetch.queue.backoff.ms": 10,
        "error_cb": on_client_error,
    })
    n = 0
    nbytes = 0
    deadline = time.monotonic() + a.timeout
    t0 = time.perf_counter()
    c.assign([TopicPartition(a.topic, i, 0) for i in range(PARTITIONS)])
    while n < a.messages:
        for m in c.consume(10000, 1.0):
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(err)
            n += 1
            nbytes += len(m.value() or b"")
        if time.monotonic() > deadline:
            raise RuntimeError(f"consumed only {n}/{a.messages}")
    secs = time.perf_counter() - t0
    c.close()
    if nbytes != n * a.value_size:
        raise RuntimeError(f"consumed {nbytes} value bytes, expected {n * a.value_size}")
    return throughput(n, a.value_size, secs)


def sc_latency(a: argparse.Namespace) -> dict[str, float]:
    vals = values(a.value_size)
    conf = producer_conf(a, **{"linger.ms": 0})
    errs: DeliveryErrors = conf["on_delivery"]
    p = Producer(conf)
    for i in range(a.warmup):
        p.produce(a.topic, vals[i], partition=i % PARTITIONS)
        p.flush(30)
    samples = []
    for i in range(a.latency_samples):
        t0 = time.perf_counter()
        p.produce(a.topic, vals[i & (POOL - 1)], partition=i % PARTITIONS)
        left = p.flush(30)
        samples.append(time.perf_counter() - t0)
        if left:
            raise RuntimeError("single-record flush timed out after 30s")
    errs.check()
    samples.sort()

    def pct(q: float) -> float:
        return samples[min(len(samples) - 1, int(q * len(samples)))] * 1000

    return {"p50_ms": pct(0.50), "p99_ms": pct(0.99), "max_ms": samples[-1] * 1000,
            "mean_ms": sum(samples) / len(samples) * 1000, "samples": len(samples)}


def sc_txn(a: argparse.Namespace, per_txn: int, n_txn: int) -> dict[str, float]:
    vals = values(a.value_size)
    n_txn = max(1, n_txn)
    conf = producer_conf(a, **{"transactional.id": f"bench-{a.topic}", "enable.idempotence": True})
    errs: DeliveryErrors = conf["on_delivery"]
    p = Producer(conf)
    try:
        p.init_transactions(30)
    except KafkaException as e:
        # A broker without transactions fails here (unsupported API, no coordinator, time-out...).
        raise Unsupported(f"init_transactions: {e}") from e
    mask = POOL - 1
    produce = p.produce
    k = 0
    p.begin_transaction()  # warm-up transaction, not timed: coordinator lookup, AddPartitionsToTxn paths
    for i in range(PARTITIONS):
        produce(a.topic, vals[i], partition=i)
    p.commit_transaction(60)
    t0 = time.perf_counter()
    for _ in range(n_txn):
        p.begin_transaction()
        for _ in range(per_txn):
            v = vals[k & mask]
            k += 1
            try:
                produce(a.topic, v)
            except BufferError:
                p.poll(0.01)
                produce(a.topic, v)
        p.commit_transaction(60)
    secs = time.perf_counter() - t0
    errs.check()
    return {"txn_s": n_txn / secs, "msg_s": n_txn * per_txn / secs, "transactions": n_txn,
            "records_per_txn": per_txn, "seconds": secs}


SCENARIOS = {
    "produce": lambda a: sc_produce(a),
    "idempotent": lambda a: sc_produce(a, idempotent=True),
    "consume": sc_consume,
    "latency": sc_latency,
    # At --messages 1000000: 1000 transactions x 1000 records, and 10,000 transactions x 10 records.
    "txn1000": lambda a: sc_txn(a, 1000, a.messages // 1000),
    "txn10": lambda a: sc_txn(a, 10, a.messages // 100),
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario", choices=sorted(SCENARIOS))
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--latency-samples", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--keep-topic", action="store_true")
    a = ap.parse_args()
    result: dict[str, Any]
    try:
        create_topic(a.bootstrap, a.topic)
        try:
            result = {"ok": True, "metrics": SCENARIOS[a.scenario](a)}
        finally:
            if not a.keep_topic:
                delete_topic(a.bootstrap, a.topic)
    except Unsupported as e:
        result = {"ok": False, "kind": "unsupported", "error": str(e)}
    except Exception as e:  # noqa: BLE001 - reported, never crashes the run
        traceback.print_exc(file=sys.stderr)
        why = unsupported_cause(e)
        if why is not None:
            result = {"ok": False, "kind": "unsupported", "error": why}
        else:
            result = {"ok": False, "kind": "error", "error": f"{type(e).__name__}: {e}"}
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    # librdkafka handles may block interpreter shutdown on a wedged broker; results are already out.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
