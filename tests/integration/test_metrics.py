"""The Prometheus endpoint reports what the broker did: records/bytes in and out, requests per API, offsets."""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Callable

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.testing.broker_process import free_port
from oncelog.testing.pytest_plugin import KafkaBroker


def _scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def test_metrics_endpoint_counts_traffic(kafka_broker_factory: Callable[..., KafkaBroker]) -> None:
    mport = free_port()
    broker = kafka_broker_factory({"metrics.listen": f"127.0.0.1:{mport}"},
                                  in_process=False, memory=False)  # process metrics, fsync rounds on a disk
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic("metered", 2, 1)]).values():
        f.result(10)
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(100):
        p.produce("metered", value=b"x" * 50, partition=i % 2)
    assert p.flush(10) == 0
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "m", "enable.auto.commit": False})
    c.assign([TopicPartition("metered", i, 0) for i in range(2)])
    got, deadline = 0, time.time() + 15
    while got < 100 and time.time() < deadline:
        got += sum(1 for m in c.consume(100, 0.5) if not m.error())
    c.close()
    assert got == 100

    m = _scrape(mport)
    assert m['oncelog_records_in_total{topic="metered"}'] == 100
    assert m['oncelog_bytes_in_total{topic="metered"}'] > 100 * 50
    assert m['oncelog_bytes_out_total{topic="metered"}'] >= m['oncelog_bytes_in_total{topic="metered"}']
    assert m['oncelog_requests_total{api="produce"}'] >= 1
    assert m['oncelog_request_latency_seconds_count{api="fetch"}'] >= 1
    for part in (0, 1):
        labels = f'{{partition="{part}",topic="metered"}}'
        assert m[f"oncelog_partition_log_end_offset{labels}"] == 50
        assert m[f"oncelog_partition_high_watermark{labels}"] == 50
        assert m[f"oncelog_partition_last_stable_offset{labels}"] == 50
        assert m[f"oncelog_partition_log_start_offset{labels}"] == 0
    assert m["oncelog_connections"] >= 0
    # acks=all produce waited for fsync rounds: small ones ran on the event loop
    assert m['oncelog_fsync_rounds_total{thread="event_loop"}'] >= 1
    assert m['oncelog_fsync_rounds_total{thread="flusher"}'] >= 0
    assert m["oncelog_fsync_stalls_total"] >= 0
    assert not re.search(r"Traceback", broker.log_tail(200))


def test_non_durable_mode_leaves_fsync_to_the_periodic_flush(
        kafka_broker_factory: Callable[..., KafkaBroker]) -> None:
    """log.flush.interval.messages > 1: appends are not fsynced one by one (nobody waits for the disk); the
    periodic flush, here once a minute, does it. Before the fix every append still ran an fsync round on the event
    loop, blocking it while nothing needed the disk (txn10 ~244 instead of ~400 txn/s)."""
    mport = free_port()
    settings = {"metrics.listen": f"127.0.0.1:{mport}", "log.flush.interval.messages": 1_000_000,
                "log.flush.interval.ms": 60_000}
    broker = kafka_broker_factory(settings, in_process=False, memory=False)  # fsync rounds on a disk
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic("lazy", 1, 1)]).values():
        f.result(10)
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
    for _ in range(30):  # one request each
        p.produce("lazy", value=b"x" * 50)
        assert p.flush(10) == 0
    m = _scrape(mport)
    assert m['oncelog_partition_high_watermark{partition="0",topic="lazy"}'] == 30
    rounds = m['oncelog_fsync_rounds_total{thread="event_loop"}'] + m['oncelog_fsync_rounds_total{thread="flusher"}']
    assert rounds == 0, f"{rounds} fsync rounds for appends nobody waited for"


def test_operator_metrics_group_lag_open_transactions_errors_process(
        kafka_broker_factory: Callable[..., KafkaBroker]) -> None:
    """Issue 17 finding 12: consumer-group lag (read_committed-aware), open transactions and the age of the oldest
    per partition, requests by error code, process CPU/RSS/open files."""
    mport = free_port()
    broker = kafka_broker_factory({"metrics.listen": f"127.0.0.1:{mport}"},
                                  in_process=False, memory=False)  # process metrics, fsync rounds on a disk
    bs = broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.create_topics([NewTopic("lagged", 1, 1)]).values():
        f.result(10)
    p = Producer({"bootstrap.servers": bs})
    for i in range(10):
        p.produce("lagged", value=b"v%d" % i)
    assert p.flush(10) == 0
    c = Consumer({"bootstrap.servers": bs, "group.id": "lagging", "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition("lagged", 0, 4)], asynchronous=False)
    c.close()
    txn = Producer({"bootstrap.servers": bs, "transactional.id": "holder"})  # left open: holds the LSO at 10
    txn.init_transactions(10)
    txn.begin_transaction()
    for i in range(3):
        txn.produce("lagged", value=b"t%d" % i)
    assert txn.flush(10) == 0
    for f in admin.create_topics([NewTopic("lagged", 1, 1)]).values():  # TOPIC_ALREADY_EXISTS
        try:
            f.result(10)
        except Exception:
            pass
    time.sleep(1.5)

    m = _scrape(mport)
    g = 'group="lagging",partition="0",topic="lagged"'

    def lag(isolation: str) -> str:
        return f'oncelog_consumer_group_lag{{group="lagging",isolation="{isolation}",partition="0",topic="lagged"}}'
    assert m[f"oncelog_consumer_group_committed_offset{{{g}}}"] == 4
    assert m[lag("read_committed")] == 6  # LSO 10 - 4
    assert m[lag("read_uncommitted")] == 9  # HW 13 - 4
    assert m['oncelog_partition_open_transactions{partition="0",topic="lagged"}'] == 1
    age = m['oncelog_partition_oldest_open_transaction_age_seconds{partition="0",topic="lagged"}']
    assert 1.0 <= age < 60
    assert m['oncelog_request_errors_total{api="create_topics",error="TOPIC_ALREADY_EXISTS"}'] == 1
    assert m["process_resident_memory_bytes"] > 10 << 20
    assert m["process_cpu_seconds_total"] > 0 and m["process_open_fds"] > 0
    txn.abort_transaction(10)
    m = _scrape(mport)
    assert 'oncelog_partition_open_transactions{partition="0",topic="lagged"}' not in m
    assert m[lag("read_committed")] == 10  # the abort marker: 14 - 4
