"""Failover in a real cluster: the controller moves when its broker dies (at once when the process is gone, at the
lease expiry when it is only paused), and a dead broker's partitions get new leaders from their ISR (or go offline,
answered as LEADER_NOT_AVAILABLE, when it was the last one)."""

from __future__ import annotations

import time
from collections.abc import Callable

from kafka.admin import KafkaAdminClient
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.cluster.model import NO_LEADER, ClusterView
from oncelog.protocol.errors import ErrorCode
from oncelog.testing.cluster import ClusterProcess

from cluster_helpers import scrape

TIMEOUT = 30
SESSION_S = 9.0  # broker.session.timeout.ms's default
HEARTBEAT_S = 2.0


def create(bootstrap: str, *topics: NewTopic) -> None:
    """CreateTopics, retried while the answer is REQUEST_TIMED_OUT (retriable: the broker asked could not reach etcd,
    e.g. its connection still backing off after an outage)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + TIMEOUT
    for topic in topics:
        retried = False
        while True:
            try:
                admin.create_topics([topic], operation_timeout=TIMEOUT)[topic.topic].result(TIMEOUT)
                break
            except KafkaException as e:
                code = e.args[0].code()
                if retried and code == KafkaError.TOPIC_ALREADY_EXISTS:
                    break  # the timed-out try was written after all
                if code != KafkaError.REQUEST_TIMED_OUT or time.monotonic() > deadline:
                    raise
                retried = True
                time.sleep(0.5)


def timed(cluster: ClusterProcess, cond: Callable[[ClusterView], bool], what: str,
          timeout: float = 30.0) -> tuple[float, ClusterView]:
    t0 = time.monotonic()
    view = cluster.wait_for(cond, timeout, what)
    return time.monotonic() - t0, view


def test_controller_failover_kill_is_fast_pause_waits_for_the_lease(
        make_cluster: Callable[..., ClusterProcess]) -> None:
    cluster = make_cluster(3)
    first = cluster.controller()
    assert first is not None

    cluster.kill(first)  # the process is gone: its listener refuses, the other brokers revoke its lease
    fast, view = timed(cluster, lambda v: v.controller is not None and v.controller.node_id != first
                       and first not in v.brokers, "a new controller after SIGKILL")
    second = view.controller.node_id if view.controller else -1
    assert fast < SESSION_S / 2, f"new controller {fast:.2f} s after SIGKILL: the dead broker was not detected"
    assert "refuses new ones: the process is gone" in "".join(
        cluster.log_tail(n, 300) for n in cluster.node_ids if n != first)

    cluster.start_broker(first)
    paused = cluster.view().brokers[second]
    cluster.pause(second)  # a paused process keeps its listener: only its lease expiry removes it
    slow, view = timed(cluster, lambda v: v.controller is not None and v.controller.node_id != second,
                       "a new controller after SIGSTOP", SESSION_S + 20)
    assert SESSION_S - HEARTBEAT_S - 1 <= slow <= SESSION_S + 6, f"new controller {slow:.2f} s after SIGSTOP"
    assert second not in view.brokers
    print(f"\ncontroller failover: {fast:.2f} s after SIGKILL (fast detection), {slow:.2f} s after SIGSTOP "
          f"(lease expiry, broker.session.timeout.ms={SESSION_S * 1000:.0f})")

    cluster.resume(second)  # the zombie finds its session lost, steps down and registers anew
    cluster.wait_for(lambda v: second in v.brokers and v.brokers[second].epoch > paused.epoch, TIMEOUT,
                     f"node {second} registered again")
    log = cluster.log_tail(second, 300)
    assert "session lost" in log and "registered again" in log
    assert cluster.controller() != second


def test_a_dead_brokers_partitions_get_new_leaders(cluster: ClusterProcess, topic_name: str) -> None:
    view = cluster.view()
    victim = next(n for n in sorted(view.brokers) if view.controller is None or n != view.controller.node_id)
    alone = topic_name + "-rf1"
    create(cluster.bootstrap, NewTopic(topic_name, 6, 3), NewTopic(alone, 1, replica_assignment=[[victim]]))
    cluster.wait_for_topic(topic_name, 3)
    assert any(s.leader == victim for _, s in cluster.view().topic_partitions(topic_name))

    cluster.kill(victim)

    def moved(v: ClusterView) -> bool:
        return victim not in v.brokers and all(
            s.leader in v.brokers and victim not in s.isr for _, s in v.topic_partitions(topic_name))

    took, view = timed(cluster, moved, f"partitions led by node {victim} moved")
    assert took < SESSION_S / 2, f"new leaders {took:.2f} s after SIGKILL"
    offline = view.partition(alone, 0)
    assert offline is not None and offline.leader == NO_LEADER and offline.isr == (victim,)
    print(f"\nnew leaders for a SIGKILLed broker's partitions after {took:.2f} s")

    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        by_name = {t["name"]: t for t in kp.describe_topics([topic_name, alone])}
    finally:
        kp.close()
    for p in by_name[topic_name]["partitions"]:
        state = view.partition(topic_name, p["partition_index"])
        assert p["error_code"] == 0 and p["leader_id"] == state.leader != victim
        assert p["offline_replicas"] == [victim] and victim in p["replica_nodes"]
        assert p["leader_epoch"] == state.leader_epoch
    (p,) = by_name[alone]["partitions"]
    assert p["error_code"] == ErrorCode.LEADER_NOT_AVAILABLE and p["leader_id"] == -1
    assert p["replica_nodes"] == [victim] and p["isr_nodes"] == [victim] and p["offline_replicas"] == [victim]

    controller = view.controller.node_id if view.controller else -1
    metrics = {n: scrape(cluster, n) for n in view.brokers}
    assert sum(m["oncelog_cluster_active_controller"] for m in metrics.values()) == 1
    assert metrics[controller]["oncelog_cluster_active_controller"] == 1
    assert all(m["oncelog_cluster_brokers"] == 2 for m in metrics.values())
    assert metrics[controller]["oncelog_cluster_offline_partitions"] >= 1  # the RF=1 partition (and older tests')
    assert metrics[controller]["oncelog_cluster_under_replicated_partitions"] >= 6
    assert metrics[controller]["oncelog_cluster_dead_brokers_revoked_total"] >= 1
    # the controller timed its elections (the view without the victim -> new leaders in etcd)
    assert metrics[controller]["oncelog_controller_leader_election_seconds_count"] >= 1
    assert metrics[controller]["oncelog_controller_leader_election_seconds_sum"] > 0

    cluster.start_broker(victim)  # the last ISR member is back: it leads its partition again
    cluster.wait_for(lambda v: (s := v.partition(alone, 0)) is not None and s.leader == victim, TIMEOUT,
                     f"node {victim} leading {alone} again")


def test_brokers_ride_out_an_etcd_outage(make_cluster: Callable[..., ClusterProcess], topic_name: str) -> None:
    """etcd killed (shorter than a session) and paused (longer): the brokers keep answering from the last view
    meanwhile, and afterwards all are registered, a controller is elected and topics can be created again."""
    cluster = make_cluster(3, settings={"broker.session.timeout.ms": 4000, "broker.heartbeat.interval.ms": 1000})
    epochs = {n: b.epoch for n, b in cluster.view().brokers.items()}

    def healthy(v: ClusterView) -> bool:
        return set(v.brokers) == {1, 2, 3} and v.controller is not None

    def metadata_brokers(node: int) -> list[int]:
        md = AdminClient({"bootstrap.servers": cluster.brokers[node].bootstrap}).list_topics(timeout=10)
        return sorted(md.brokers)

    cluster.etcd.kill()
    time.sleep(1.5)
    assert [metadata_brokers(n) for n in (1, 2, 3)] == [[1, 2, 3]] * 3  # the last view, served meanwhile
    cluster.etcd.start()
    cluster.wait_for(healthy, TIMEOUT, "the cluster after etcd restarted")
    assert {n: b.epoch for n, b in cluster.view().brokers.items()} == epochs  # the leases survived the restart
    create(cluster.bootstrap, NewTopic(topic_name, 3, 3))
    cluster.wait_for_topic(topic_name, 3)

    cluster.etcd.pause()
    time.sleep(6.0)  # past every broker's session: each keeps serving its last view (test_etcd_stall.py: under load)
    assert metadata_brokers(2) == [1, 2, 3]
    cluster.etcd.resume()
    cluster.wait_for(healthy, TIMEOUT, "the cluster after etcd was paused past the sessions")
    assert all("session lost" in cluster.log_tail(n, 400) for n in (1, 2, 3))
    create(cluster.bootstrap, NewTopic(topic_name + "-after", 3, 3))
    cluster.wait_for_topic(topic_name + "-after", 3)
