"""Programs written once in confluent-kafka's style, run unchanged with ``ck = confluent_kafka`` (and
``admin = confluent_kafka.admin``) or with ``ck = oncelog.client`` (``admin = oncelog.client.admin``).

Each takes the two modules as arguments, the way a user's program would get them from its imports, and returns
what it observed as plain data, so the tests can check the two runs against each other and against the truth.
Nothing in here may know which client it runs with.
"""

from __future__ import annotations

import threading
import time
from types import ModuleType
from typing import Any

T = 30.0  # seconds any wait may take


def wait_all(futures: dict[Any, Any]) -> dict[Any, Any]:
    """Each future's outcome: its result, or ("error", code, name, retriable) of the KafkaException raised."""
    out: dict[Any, Any] = {}
    for key, f in futures.items():
        try:
            out[key] = ("ok", f.result(T))
        except Exception as e:  # noqa: BLE001 - whatever confluent-kafka raises, we must raise too
            err = e.args[0]
            out[key] = ("error", err.code(), err.name(), err.retriable())
    return out


# ------------------------------------------------------------------------------------------------ admin script
def admin_script(ck: ModuleType, admin: ModuleType, bootstrap: str, prefix: str) -> dict[str, Any]:
    a = admin.AdminClient({"bootstrap.servers": bootstrap})
    seen: dict[str, Any] = {}
    t1, t2 = f"{prefix}-a", f"{prefix}-b"
    created = wait_all(a.create_topics([admin.NewTopic(t1, num_partitions=3, replication_factor=1,
                                                       config={"retention.ms": "3600000"}),
                                        admin.NewTopic(t2, num_partitions=1, replication_factor=1)]))
    seen["created"] = {k[len(prefix):]: v for k, v in created.items()}
    again = wait_all(a.create_topics([admin.NewTopic(t1, num_partitions=3, replication_factor=1)]))
    seen["created_again"] = again[t1]
    seen["already_exists_constant"] = again[t1][1] == ck.KafkaError.TOPIC_ALREADY_EXISTS
    seen["grown"] = wait_all(a.create_partitions([admin.NewPartitions(t2, 4)]))[t2]
    seen["partitions"] = {}
    deadline = time.monotonic() + T
    while time.monotonic() < deadline:
        md = a.list_topics(timeout=T)
        parts = {t[len(prefix):]: sorted(md.topics[t].partitions) for t in (t1, t2) if t in md.topics}
        if parts == {"-a": [0, 1, 2], "-b": [0, 1, 2, 3]}:
            break
        time.sleep(0.2)
    seen["partitions"] = parts
    seen["brokers_known"] = len(md.brokers) >= 1 and all(b.port > 0 for b in md.brokers.values())
    one = md.topics[t1]
    seen["topic_error"] = one.error
    seen["leaders_known"] = all(p.leader >= 0 and p.error is None and p.replicas for p in one.partitions.values())
    res = admin.ConfigResource(admin.ConfigResource.Type.TOPIC, t1)
    configs = wait_all(a.describe_configs([res]))[res]
    seen["described_ok"] = configs[0]
    seen["retention"] = configs[1]["retention.ms"].value if configs[0] == "ok" else None
    seen["retention_entry_name"] = configs[1]["retention.ms"].name if configs[0] == "ok" else None
    seen["deleted"] = wait_all(a.delete_topics([t2], operation_timeout=T))[t2]
    deadline = time.monotonic() + T
    while t2 in a.list_topics(timeout=T).topics and time.monotonic() < deadline:
        time.sleep(0.2)
    seen["gone"] = t2 not in a.list_topics(timeout=T).topics
    seen["delete_missing"] = wait_all(a.delete_topics([f"{prefix}-never"], operation_timeout=T))[f"{prefix}-never"]
    return seen


# ------------------------------------------------------------------------------------------------ producing
def produce(ck: ModuleType, bootstrap: str, topic: str, n: int) -> dict[str, Any]:
    """n keyed records with a header; what the delivery callbacks and the producer's counters said."""
    reports: list[tuple[Any, Any]] = []
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, value=f"v{i}".encode(), key=f"k{i % 97}".encode(), headers=[("i", str(i).encode())],
                  on_delivery=lambda err, msg: reports.append((err, msg)))
    queued = len(p)
    left = p.flush(T)
    served = p.poll(0)
    ok = [m for e, m in reports if e is None]
    return {
        "queued_before_flush": 0 < queued <= n, "left_after_flush": left, "len_after_flush": len(p),
        "poll_after_flush": served, "reports": len(reports), "errors": sum(e is not None for e, _ in reports),
        "report_fields": sorted({(m.topic() == topic, m.partition() is not None and m.partition() >= 0,
                                  m.offset() is not None and m.offset() >= 0, m.error() is None) for m in ok}),
        "offsets_per_partition": sorted({m.partition(): 0 for m in ok}),
        "dense_offsets": all(sorted(m.offset() for m in ok if m.partition() == q) == list(
            range(sum(1 for m in ok if m.partition() == q))) for q in {m.partition() for m in ok}),
    }


# ------------------------------------------------------------------------------------------------ group consumer
class Member:
    """A group member polling in its own thread, committing after each batch, logging its rebalance callbacks."""

    def __init__(self, ck: ModuleType, bootstrap: str, group: str, topic: str, name: str) -> None:
        self.ck, self.name, self.topic = ck, name, topic
        self.events: list[tuple[str, list[tuple[str, int]]]] = []
        self.values: list[bytes] = []
        self.fields: set[tuple[Any, ...]] = set()
        self.commit_errors: list[str] = []
        self.stop = threading.Event()
        self.owned: list[tuple[str, int]] = []
        self.failed: list[BaseException] = []
        self.c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                              "enable.auto.commit": False, "session.timeout.ms": 6000,
                              "heartbeat.interval.ms": 500, "partition.assignment.strategy": "range"})
        self.c.subscribe([topic], on_assign=self.on_assign, on_revoke=self.on_revoke)
        self.thread = threading.Thread(target=self.run, name=name, daemon=True)
        self.thread.start()

    def on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        assert consumer is self.c
        self.events.append(("assign", sorted((tp.topic, tp.partition) for tp in partitions)))
        self.owned = self.events[-1][1]  # eager rebalancing (range): the whole new assignment

    def on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        self.events.append(("revoke", sorted((tp.topic, tp.partition) for tp in partitions)))
        self.owned = []

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                msg = self.c.poll(0.2)
                if msg is None:
                    continue
                if msg.error() is not None:
                    continue
                self.values.append(msg.value())
                ts_type, ts = msg.timestamp()
                self.fields.add((msg.topic() == self.topic, ts_type == self.ck.TIMESTAMP_CREATE_TIME, ts > 0,
                                 msg.key() is not None, msg.headers() is not None and msg.headers()[0][0] == "i",
                                 len(msg) == len(msg.value())))
                try:
                    done = self.c.commit(message=msg, asynchronous=False)
                    assert [(tp.topic, tp.partition, tp.offset) for tp in done] == [
                        (msg.topic(), msg.partition(), msg.offset() + 1)]
                except self.ck.KafkaException as e:  # a rebalance raced the commit: the new owner reads it again
                    self.commit_errors.append(e.args[0].name())
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.failed.append(e)

    def assignment(self) -> list[tuple[str, int]]:
        """As of the last rebalance callback (confluent-kafka's Consumer is not to be called from a second
        thread while its poll() runs, so the callbacks, run inside poll(), keep it)."""
        return self.owned

    def close(self) -> None:
        self.stop.set()
        self.thread.join(T)
        self.c.close()


def wait_for(cond: Any, what: str) -> None:
    deadline = time.monotonic() + 60
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def group_consumer(ck: ModuleType, bootstrap: str, topic: str, group: str, n: int) -> dict[str, Any]:
    """One member takes all 4 partitions; a second joins (2 + 2); the second leaves (the first has 4 again).
    Every record is consumed, and the group's committed offsets end at the end of each partition."""
    a = Member(ck, bootstrap, group, topic, "a")
    b = None
    try:
        wait_for(lambda: len(a.assignment()) == 4 and len(a.values) > 0, "member a to own all 4 partitions")
        b = Member(ck, bootstrap, group, topic, "b")
        wait_for(lambda: len(a.assignment()) == 2 and b is not None and len(b.assignment()) == 2,
                 "a rebalance to 2 + 2")
        split_ok = sorted(a.assignment() + b.assignment()) == [(topic, p) for p in range(4)]
        wait_for(lambda: len(set(a.values) | set(b.values if b else [])) >= n, "every record to be consumed")
        b.close()
        wait_for(lambda: len(a.assignment()) == 4, "member a to own all 4 partitions again")
        time.sleep(0.5)
    finally:
        a.close()
        if b is not None and not b.stop.is_set():
            b.close()
    checker = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        committed = checker.committed([ck.TopicPartition(topic, p) for p in range(4)], timeout=T)
        low_high = [checker.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=T) for p in range(4)]
    finally:
        checker.close()
    assert b is not None
    return {
        "failures": [repr(e) for e in a.failed + b.failed],
        "a_events": [(kind, len(tps)) for kind, tps in a.events],
        "b_events": [(kind, len(tps)) for kind, tps in b.events],
        "split_2_2": split_ok,
        "values": sorted(set(a.values) | set(b.values)),
        "fields": sorted(a.fields | b.fields),
        "committed": [(tp.topic == topic, tp.partition, tp.offset, tp.error) for tp in committed],
        "watermarks": low_high,
    }


# ------------------------------------------------------------------------------------------------ copier
def copier(ck: ModuleType, bootstrap: str, src: str, dst: str, group: str, txn_id: str) -> dict[str, Any]:
    """Consume-transform-produce exactly once. The first batch is aborted on purpose (and consumed again)."""
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                            "enable.auto.commit": False, "isolation.level": "read_committed"})
    producer = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5})
    stats = {"committed_txns": 0, "aborted_txns": 0, "copied": 0}
    try:
        producer.init_transactions(T)
        consumer.subscribe([src])
        idle, deadline = 0, time.monotonic() + T
        while idle < 6 or (stats["copied"] == 0 and time.monotonic() < deadline):  # the first join takes a while
            batch = [m for m in consumer.consume(100, 0.5) if m.error() is None]
            if not batch:
                idle += 1
                continue
            idle = 0
            producer.begin_transaction()
            for m in batch:
                producer.produce(dst, m.value().upper(), key=m.key(), headers=m.headers())
            if stats["aborted_txns"] == 0:
                producer.flush(T)  # the aborted records reach the log (abort alone would purge them unsent)
                producer.abort_transaction(T)
                stats["aborted_txns"] += 1
                firsts: dict[tuple[str, int], int] = {}
                for m in batch:
                    firsts.setdefault((m.topic(), m.partition()), m.offset())
                for (t, p), off in firsts.items():
                    consumer.seek(ck.TopicPartition(t, p, off))
                continue
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), T)
            producer.commit_transaction(T)
            stats["committed_txns"] += 1
            stats["copied"] += len(batch)
        try:
            producer.commit_transaction(T)  # no transaction open: an error whose KafkaError says so
            stats["commit_without_txn"] = "no error"
        except ck.KafkaException as e:
            err = e.args[0]
            stats["commit_without_txn"] = (isinstance(err, ck.KafkaError), err.fatal(), err.retriable())
    finally:
        consumer.close()
        producer.flush(T)
    return stats


def read_all(ck: ModuleType, bootstrap: str, topic: str, partitions: int, isolation: str) -> list[bytes]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{topic}-{isolation}",
                     "enable.auto.commit": False, "isolation.level": isolation})
    out: list[bytes] = []
    try:
        c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
        idle = 0
        while idle < 4:
            got = [m for m in c.consume(500, 0.5) if m.error() is None]
            idle = 0 if got else idle + 1
            out += [m.value() for m in got]
    finally:
        c.close()
    return out
