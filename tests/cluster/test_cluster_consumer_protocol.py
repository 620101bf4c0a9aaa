"""A KIP-848 consumer group (confluent-kafka, ``group.protocol=consumer``) on the 3-broker cluster whose group
coordinator is SIGKILLed in the middle of a reconciliation: the new coordinator (the new leader of the group's
``__consumer_offsets`` partition) loads the group from the records the old one replicated, the members go on
reconciling with it, and the group ends Stable with every partition owned once, every record consumed and every
offset committed. Group configs set through one broker reach every broker."""

from __future__ import annotations

import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from oncelog.protocol.messages.consumer_group_describe_request import ConsumerGroupDescribeRequest
from oncelog.protocol.messages.describe_configs_request import DescribeConfigsRequest, DescribeConfigsResource
from oncelog.protocol.messages.incremental_alter_configs_request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from oncelog.testing.cluster import ClusterProcess

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "integration"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _rawclient import RawClient  # noqa: E402
from test_cluster_coordinators import OFFSETS_TOPIC, TIMEOUT, _address, _coordinator, _create  # noqa: E402
from test_cluster_coordinators import _internal_leader  # noqa: E402

PARTITIONS = 6


def _describe(cluster: ClusterProcess, node: int, group: str) -> Any:
    with RawClient(_address(cluster, node)) as raw:
        return raw.request(69, 0, ConsumerGroupDescribeRequest(group_ids=[group])).groups[0]


class _Member(threading.Thread):
    def __init__(self, cluster: ClusterProcess, group: str, topic: str, name: str, stop: threading.Event) -> None:
        super().__init__(daemon=True, name=name)
        self.seen: list[int] = []
        self.assigned: set[int] = set()
        self.errors: list[str] = []
        self.stop_event = stop
        self.c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "group.protocol": "consumer",
                           "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        self.c.subscribe([topic])

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                msgs = self.c.consume(50, 0.2)
                self.assigned = {tp.partition for tp in self.c.assignment()}
                self.seen += [int(m.value()) for m in msgs if not m.error()]
                if any(not m.error() for m in msgs):
                    try:
                        self.c.commit(asynchronous=False)
                    except Exception as e:  # noqa: BLE001 - during the failover a commit may fail: retried later
                        self.errors.append(str(e))
        finally:
            self.c.close()


def test_group_coordinator_killed_mid_reconciliation(cluster: ClusterProcess, topic_name: str) -> None:
    _create(cluster, topic_name, PARTITIONS)
    group = f"{topic_name}-group"
    total = 3000
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(total // 2):
        p.produce(topic_name, value=str(i).encode(), partition=i % PARTITIONS)
    assert p.flush(TIMEOUT) == 0
    stop = threading.Event()
    members = [_Member(cluster, group, topic_name, n, stop) for n in ("a", "b")]
    for m in members:
        m.start()
    try:
        deadline = time.monotonic() + TIMEOUT
        while sum(len(m.seen) for m in members) < total // 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        coordinator = _coordinator(cluster, group, 0)
        while _describe(cluster, coordinator, group).group_state != "Stable":
            assert time.monotonic() < deadline, "the group of two never became Stable"
            time.sleep(0.1)
        # a third member joins: the others must revoke partitions for it; kill the coordinator meanwhile
        members.append(_Member(cluster, group, topic_name, "c", stop))
        members[-1].start()
        states = []
        while not states or states[-1] not in ("Assigning", "Reconciling"):
            states.append(_describe(cluster, coordinator, group).group_state)
            assert time.monotonic() < deadline, f"the group never started reconciling: {states}"
            time.sleep(0.05)
        cluster.kill(coordinator)
        cluster.wait_for(lambda v: _internal_leader(v, OFFSETS_TOPIC, group)[0] not in (coordinator, -1), TIMEOUT,
                         "a new group coordinator")
        for i in range(total // 2, total):
            p.produce(topic_name, value=str(i).encode(), partition=i % PARTITIONS)
        assert p.flush(TIMEOUT) == 0
        new = _internal_leader(cluster.view(), OFFSETS_TOPIC, group)[0]
        deadline = time.monotonic() + TIMEOUT
        while True:
            d = _describe(cluster, new, group)  # COORDINATOR_LOAD_IN_PROGRESS while it loads: not Stable yet
            owned = sorted(q for m in members for q in m.assigned)
            done = len(set().union(*(set(m.seen) for m in members))) == total
            if d.group_state == "Stable" and owned == list(range(PARTITIONS)) and done \
                    and all(m.assigned for m in members):
                break
            assert time.monotonic() < deadline, (d.group_state, [sorted(m.assigned) for m in members])
            time.sleep(0.2)
        assert len(d.members) == 3 and {m.member_epoch for m in d.members} == {d.assignment_epoch}
    finally:
        stop.set()
        for m in members:
            m.join(TIMEOUT)
    check = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        committed = check.committed([TopicPartition(topic_name, q) for q in range(PARTITIONS)], TIMEOUT)
    finally:
        check.close()
    assert [tp.offset for tp in committed] == [total // PARTITIONS] * PARTITIONS, committed
    print(f"\nKIP-848 coordinator failover mid-reconciliation: states before the kill {states[-3:]}, commit errors "
          f"{[e for m in members for e in m.errors][:3]}")


def test_group_configs_reach_every_broker(cluster: ClusterProcess) -> None:
    """A group config set through one broker (IncrementalAlterConfigs on a GROUP) is described by every broker
    (the configs are cluster metadata in etcd, as Kafka keeps them in its metadata log)."""
    group = f"cfg-{uuid.uuid4().hex[:8]}"
    first, *others = cluster.node_ids
    with RawClient(_address(cluster, first)) as raw:
        r = raw.request(44, 1, IncrementalAlterConfigsRequest(resources=[AlterConfigsResource(
            resource_type=32, resource_name=group, configs=[AlterableConfig(
                name="consumer.session.timeout.ms", config_operation=0, value="50000")])]))
        assert r.responses[0].error_code == 0, r
    deadline = time.monotonic() + TIMEOUT
    for node in others:
        while True:
            with RawClient(_address(cluster, node)) as raw:
                d = raw.request(32, 4, DescribeConfigsRequest(resources=[DescribeConfigsResource(
                    resource_type=32, resource_name=group, configuration_keys=["consumer.session.timeout.ms"])]))
            entry = d.results[0].configs[0]
            if (entry.value, entry.config_source) == ("50000", 8):  # GROUP_CONFIG
                break
            assert time.monotonic() < deadline, (node, entry)
            time.sleep(0.1)
