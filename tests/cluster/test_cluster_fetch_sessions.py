"""Followers fetch in incremental fetch sessions (KIP-227): once in sync, an idle follower's fetches list no
partitions and their answers carry none; records still reach every replica."""

from __future__ import annotations

import time
import urllib.request

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.testing.cluster import ClusterProcess

TIMEOUT = 30


def samples(cluster: ClusterProcess, node: int) -> dict[str, float]:
    """Every sample of a broker's /metrics, labels included in the name."""
    url = f"http://{cluster.brokers[node].settings['metrics.listen']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    return {name: float(value) for line in text.splitlines() if line and not line.startswith("#")
            for name, _, value in [line.rpartition(" ")]}


FETCHES = 'oncelog_requests_total{api="fetch"}'
LISTED = 'oncelog_fetch_partitions_requested_total{fetcher="follower"}'
CARRIED = 'oncelog_fetch_partitions_answered_total{fetcher="follower"}'


def test_idle_followers_fetch_no_partitions(cluster: ClusterProcess, topic_name: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic_name, 6, 3)], operation_timeout=TIMEOUT)[topic_name].result(TIMEOUT)
    cluster.wait_for_topic(topic_name, 3)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(60):
        p.produce(topic_name, f"v{i}".encode(), partition=i % 6)
    assert p.flush(TIMEOUT) == 0
    # the followers' next fetches bring the high watermark over; then nothing changes
    deadline = time.monotonic() + TIMEOUT
    while True:
        before = {n: samples(cluster, n) for n in cluster.brokers}
        time.sleep(1.5)
        after = {n: samples(cluster, n) for n in cluster.brokers}
        listed = {n: after[n][LISTED] - before[n][LISTED] for n in after}
        carried = {n: after[n][CARRIED] - before[n][CARRIED] for n in after}
        fetches = {n: after[n][FETCHES] - before[n][FETCHES] for n in after}
        if not any(listed.values()) and not any(carried.values()) or time.monotonic() > deadline:
            break
    assert all(f >= 2 for f in fetches.values()), f"fetches answered per broker: {fetches}"
    assert listed == {n: 0 for n in after} and carried == {n: 0 for n in after}, (listed, carried)
    assert all(s["oncelog_fetch_sessions"] >= 2 for s in after.values())  # two followers' sessions each
    # the sessions still carry new records: acks=all is answered once both followers (all in the ISR) fetched it
    cluster.wait_for(lambda v: all(len(s.isr) == 3 for _, s in v.topic_partitions(topic_name)), TIMEOUT,
                     "every replica in the ISR")
    p.produce(topic_name, b"late", partition=0)
    assert p.flush(TIMEOUT) == 0
