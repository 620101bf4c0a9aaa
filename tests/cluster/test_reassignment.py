"""Scale out and leader elections on real processes: a fourth broker joins and partitions are reassigned onto it
while an idempotent acks=all producer runs (nothing lost or duplicated, the new broker holds the data), ElectLeaders
moves leadership back to the preferred replica after a failover, bad requests get Kafka's error codes, and the
cluster commands of the CLI run against the cluster."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, ElectionType, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.client.connection import BrokerConnection
from oncelog.cluster.model import ClusterView
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.alter_partition_reassignments_request import (
    AlterPartitionReassignmentsRequest,
    ReassignablePartition,
    ReassignableTopic,
)
from oncelog.protocol.messages.elect_leaders_request import ElectLeadersRequest, TopicPartitions
from oncelog.protocol.messages.list_partition_reassignments_request import (
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsTopics,
)
from oncelog.protocol.record_batch import iter_batch_headers
from oncelog.testing.cluster import ClusterProcess

TIMEOUT = 60
_SCRIPT = Path(sys.executable).parent / "oncelog"
ONCELOG = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "oncelog"]


# --------------------------------------------------------------------------------------------------- helpers
def _create(cluster: ClusterProcess, topic: str, partitions: int, rf: int,
            assignment: list[list[int]] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    new = (NewTopic(topic, len(assignment), replica_assignment=assignment, config={"min.insync.replicas": "2"}) if assignment
           else NewTopic(topic, partitions, rf, config={"min.insync.replicas": "2"}))
    for fut in admin.create_topics([new], operation_timeout=TIMEOUT).values():
        fut.result(TIMEOUT)
    cluster.wait_for_topic(topic, rf)


async def _send(cluster: ClusterProcess, node: int, request: Any) -> Any:
    b = cluster.brokers[node]
    conn = BrokerConnection("127.0.0.1", b.port, request_timeout=TIMEOUT)
    await conn.connect()
    try:
        return await conn.send(request)
    finally:
        await conn.close()


async def _versions(cluster: ClusterProcess, node: int) -> dict[int, tuple[int, int]]:
    conn = BrokerConnection("127.0.0.1", cluster.brokers[node].port)
    await conn.connect()
    try:
        return dict(conn.broker_versions)
    finally:
        await conn.close()


def send(cluster: ClusterProcess, node: int, request: Any) -> Any:
    return asyncio.run(_send(cluster, node, request))


def alter(cluster: ClusterProcess, node: int, topic: str, targets: dict[int, list[int] | None],
          ) -> dict[tuple[str, int], int]:
    resp = send(cluster, node, AlterPartitionReassignmentsRequest(timeout_ms=30000, topics=[ReassignableTopic(
        name=topic, partitions=[ReassignablePartition(partition_index=i, replicas=r) for i, r in targets.items()])]))
    assert resp.error_code == 0, resp
    return {(t.name, p.partition_index): p.error_code for t in resp.responses for p in t.partitions}


def ongoing(cluster: ClusterProcess, node: int, topic: str | None = None) -> dict[tuple[str, int], tuple[Any, ...]]:
    topics = None if topic is None else [ListPartitionReassignmentsTopics(name=topic, partition_indexes=[0, 1, 2])]
    resp = send(cluster, node, ListPartitionReassignmentsRequest(timeout_ms=30000, topics=topics))
    assert resp.error_code == 0, resp
    return {(t.name, p.partition_index): (tuple(p.replicas), tuple(p.adding_replicas), tuple(p.removing_replicas))
            for t in resp.topics for p in t.partitions}


def elect(cluster: ClusterProcess, node: int, topic: str, partitions: list[int], election_type: int = 0,
          ) -> dict[tuple[str, int], int]:
    resp = send(cluster, node, ElectLeadersRequest(election_type=election_type, timeout_ms=30000, topic_partitions=[
        TopicPartitions(topic=topic, partitions=partitions)]))
    assert resp.error_code == 0, resp
    return {(r.topic, p.partition_id): p.error_code for r in resp.replica_election_results
            for p in r.partition_result}


def _state(view: ClusterView, topic: str, index: int) -> Any:
    state = view.partition(topic, index)
    assert state is not None
    return state


def _local_records(data_dir: Path, topic: str, index: int) -> int:
    count = 0
    for seg in sorted((data_dir / f"{topic}-{index}").glob("*.log")):
        for h in iter_batch_headers(seg.read_bytes(), check_crc=True):
            if not h.is_control:
                count += h.records_count
    return count


class _Load:
    """An idempotent acks=all producer writing unique values to every partition of a topic until stopped."""

    def __init__(self, cluster: ClusterProcess, topic: str, partitions: int) -> None:
        self.acked: dict[int, list[bytes]] = {i: [] for i in range(partitions)}
        self.errors: list[str] = []
        self.sent = 0
        self._stop = threading.Event()
        self._p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                            "linger.ms": 5, "message.timeout.ms": 60000, "retry.backoff.ms": 50})
        self._topic, self._n = topic, partitions
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _done(self, err: Any, msg: Any) -> None:
        if err is None:
            self.acked[msg.partition()].append(msg.value())
        else:
            self.errors.append(str(err))

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            try:
                self._p.produce(self._topic, value=f"v{i:08d}".encode() + b"." * 100, partition=i % self._n,
                                on_delivery=self._done)
                i += 1
            except BufferError:
                self._p.poll(0.05)
                continue
            self._p.poll(0)
            if i % 200 == 0:
                time.sleep(0.01)
        self.sent = i
        self._p.flush(TIMEOUT)

    def start(self) -> _Load:
        self._thread.start()
        return self

    def acked_count(self) -> int:
        return sum(len(v) for v in self.acked.values())

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(TIMEOUT + 10)
        assert not self._thread.is_alive(), "the producer did not finish flushing"


def _read_all(cluster: ClusterProcess, topic: str, index: int, count: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "unused", "enable.auto.commit": False,
                  "isolation.level": "read_committed"})
    c.assign([TopicPartition(topic, index, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT
    try:
        while len(got) < count and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                if not m.error():
                    got.append(m.value())
        time.sleep(0.5)  # anything more would be a duplicate
        for m in c.consume(1000, 0.5):
            if not m.error():
                got.append(m.value())
    finally:
        c.close()
    return got


def _wait(cond: Callable[[], bool], what: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.1)


# ----------------------------------------------------------------------------------------------------- tests
def test_a_new_broker_takes_over_replicas_under_load_with_nothing_lost_or_duplicated(
        make_cluster: Callable[..., ClusterProcess], topic_name: str) -> None:
    cluster = make_cluster(3, settings={"default.replication.factor": 3})
    topic = topic_name
    _create(cluster, topic, 2, 3, assignment=[[1, 2, 3], [2, 3, 1]])
    new = cluster.add_broker(4)
    assert new.alive()
    load = _Load(cluster, topic, 2).start()
    try:
        _wait(lambda: load.acked_count() >= 5000, "5000 records acknowledged before the move")
        # the new broker is paused while the move starts, so the move is seen in progress: it cannot catch up
        cluster.pause(4)
        try:
            controller = cluster.controller()
            other = next(n for n in (1, 2, 3) if n != controller)
            assert alter(cluster, other, topic, {0: [4, 1, 2], 1: [2, 4, 1]}) == {(topic, 0): 0, (topic, 1): 0}
            moving = ongoing(cluster, other, topic)
            for n in (1, 2, 3):  # every broker answers from its view; the write is in etcd already
                _wait(lambda n=n: len(ongoing(cluster, n)) >= 2 or n == other, f"node {n} lists the moves")
            assert moving == {(topic, 0): ((4, 1, 2, 3), (4,), (3,)), (topic, 1): ((2, 4, 1, 3), (4,), (3,))}
            view = cluster.view()
            assert _state(view, topic, 0).adding == (4,) and 4 not in _state(view, topic, 0).isr
            time.sleep(1.0)  # load keeps being acknowledged by the old ISR meanwhile
        finally:
            cluster.resume(4)
        view = cluster.wait_for(lambda v: all(_state(v, topic, i).replicas == r and set(_state(v, topic, i).isr)
                                              == set(r) and not _state(v, topic, i).adding
                                              for i, r in ((0, (4, 1, 2)), (1, (2, 4, 1)))),
                                TIMEOUT, "both moves completed")
        _wait(lambda: ongoing(cluster, 1) == {} and ongoing(cluster, 4) == {}, "no move listed any more")
        # the preferred leader of partition 0 is the new broker now: move the leadership to it, still under load
        before = _state(view, topic, 0)
        result = elect(cluster, 1, topic, [0])
        expect_elected = before.leader != 4
        assert result == {(topic, 0): ErrorCode.NONE if expect_elected else ErrorCode.ELECTION_NOT_NEEDED}
        view = cluster.wait_for(lambda v: _state(v, topic, 0).leader == 4, TIMEOUT, "node 4 leads partition 0")
        assert _state(view, topic, 0).leader_epoch > before.leader_epoch or not expect_elected
        mark = load.acked_count()
        _wait(lambda: load.acked_count() >= mark + 2000, "2000 more records acknowledged after the moves")
    finally:
        load.stop()
    assert not load.errors, load.errors[:5]
    assert load.acked_count() == load.sent
    for i in (0, 1):
        got = _read_all(cluster, topic, i, len(load.acked[i]))
        assert len(got) == len(set(got)), f"partition {i}: {len(got) - len(set(got))} duplicate(s)"
        assert got == load.acked[i], (f"partition {i}: read {len(got)}, acknowledged {len(load.acked[i])}; missing "
                                      f"{len(set(load.acked[i]) - set(got))}")
    # the new broker holds the data; the removed one deleted its replicas
    _wait(lambda: all(_local_records(cluster.brokers[4].data_dir, topic, i) == len(load.acked[i]) for i in (0, 1)),
          "node 4 holds every record of both partitions")
    _wait(lambda: not any((cluster.brokers[3].data_dir / f"{topic}-{i}").exists() for i in (0, 1)),
          "node 3 deleted the replicas it no longer has")
    print(f"\nreassignment under load: {load.sent} idempotent acks=all records, partitions moved onto the new broker "
          f"4, none lost or duplicated")


def test_elect_leaders_moves_leadership_back_to_the_preferred_replica_after_a_failover(
        cluster: ClusterProcess, topic_name: str) -> None:
    _create(cluster, topic_name, 1, 3)
    preferred = _state(cluster.view(), topic_name, 0).replicas[0]
    assert _state(cluster.view(), topic_name, 0).leader == preferred
    others = [n for n in cluster.node_ids if n != preferred]
    assert elect(cluster, others[0], topic_name, [0]) == {(topic_name, 0): ErrorCode.ELECTION_NOT_NEEDED}

    cluster.kill(preferred)
    view = cluster.wait_for(lambda v: _state(v, topic_name, 0).leader in others
                            and preferred not in _state(v, topic_name, 0).isr, TIMEOUT, "failover")
    survivor = _state(view, topic_name, 0).leader
    ask = next(n for n in others if n in view.brokers)
    assert elect(cluster, ask, topic_name, [0]) == {(topic_name, 0): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE}

    cluster.start_broker(preferred)
    cluster.wait_for(lambda v: preferred in _state(v, topic_name, 0).isr, TIMEOUT, "the preferred replica in sync")
    assert _state(cluster.view(), topic_name, 0).leader == survivor  # no automatic move within the test
    for node in cluster.node_ids:  # a broker that is not the controller forwards it; the controller decides
        if node != cluster.controller():
            # the controller's view may be one watch event behind etcd's (the ISR expansion just written): until
            # it has it, the preferred replica is not eligible yet (PREFERRED_LEADER_NOT_AVAILABLE)
            deadline = time.monotonic() + 5
            while (got := elect(cluster, node, topic_name, [0])) == {
                    (topic_name, 0): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE} and time.monotonic() < deadline:
                time.sleep(0.1)
            assert got == {(topic_name, 0): ErrorCode.NONE}
            break
    view = cluster.wait_for(lambda v: _state(v, topic_name, 0).leader == preferred, TIMEOUT, "preferred leads")
    assert _state(view, topic_name, 0).leader_epoch >= 2
    for node in cluster.node_ids:
        assert elect(cluster, node, topic_name, [0]) == {(topic_name, 0): ErrorCode.ELECTION_NOT_NEEDED}
    # librdkafka's admin client (it sends ElectLeaders to the controller it finds in Metadata)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    got = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic_name, 0)]).result(TIMEOUT)
    assert [(tp.topic, tp.partition, e.code() if e is not None else None) for tp, e in got.items()] == [
        (topic_name, 0, ErrorCode.ELECTION_NOT_NEEDED)], got


def test_bad_requests_get_kafkas_error_codes(cluster: ClusterProcess, topic_name: str) -> None:
    ctrl = cluster.controller()
    assert ctrl is not None
    y, z = (n for n in cluster.node_ids if n != ctrl)  # z is paused below: never the controller
    _create(cluster, topic_name, 1, 2, assignment=[[ctrl, y]])
    t = topic_name
    versions = asyncio.run(_versions(cluster, y))
    assert {k: versions.get(k) for k in (43, 45, 46)} == {43: (0, 2), 45: (0, 0), 46: (0, 0)}  # ApiVersions
    for node in cluster.node_ids:  # the controller and the brokers that forward to it answer alike
        got = alter(cluster, node, t, {0: [ctrl, 99], 1: [ctrl, y], 2: None})
        assert got == {(t, 0): ErrorCode.INVALID_REPLICA_ASSIGNMENT, (t, 1): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                       (t, 2): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}, node
        assert alter(cluster, node, t, {0: [y, y, ctrl]}) == {(t, 0): ErrorCode.INVALID_REPLICA_ASSIGNMENT}
        assert alter(cluster, node, t, {0: []}) == {(t, 0): ErrorCode.INVALID_REPLICA_ASSIGNMENT}
        assert alter(cluster, node, t, {0: None}) == {(t, 0): ErrorCode.NO_REASSIGNMENT_IN_PROGRESS}
        assert alter(cluster, node, "no-such-topic", {0: [1, 2]}) == {
            ("no-such-topic", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        assert alter(cluster, node, t, {0: [ctrl, y]}) == {(t, 0): ErrorCode.NONE}  # already there: nothing to move
        assert elect(cluster, node, t, [0, 5]) == {(t, 0): ErrorCode.ELECTION_NOT_NEEDED,
                                                   (t, 5): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        assert elect(cluster, node, t, [0], election_type=1) == {(t, 0): ErrorCode.ELECTION_NOT_NEEDED}
        assert elect(cluster, node, "no-such-topic", [0]) == {
            ("no-such-topic", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        assert ongoing(cluster, node, t) == {}
        assert ongoing(cluster, node, "no-such-topic") == {}  # Kafka leaves out what does not exist
    assert _state(cluster.view(), t, 0).replicas == (ctrl, y)

    # a move, then a cancel while it cannot complete (its new replica is paused): back to the old replicas
    cluster.pause(z)
    try:
        assert alter(cluster, y, t, {0: [z, y]}) == {(t, 0): ErrorCode.NONE}
        _wait(lambda: ongoing(cluster, ctrl, t) == {(t, 0): ((z, y, ctrl), (z,), (ctrl,))}, "the move listed")
        assert alter(cluster, y, t, {0: None}) == {(t, 0): ErrorCode.NONE}
        view = cluster.wait_for(lambda v: not _state(v, t, 0).adding, TIMEOUT, "the move cancelled")
        assert _state(view, t, 0).replicas == (y, ctrl)  # Kafka's revert: the replicas without those being added
        assert alter(cluster, ctrl, t, {0: None}) == {(t, 0): ErrorCode.NO_REASSIGNMENT_IN_PROGRESS}
    finally:
        cluster.resume(z)


def _oncelog(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ONCELOG, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "300"})


def test_cli_cluster_status_partitions_reassign_and_elect(cluster: ClusterProcess, topic_name: str) -> None:
    boot = ["-b", cluster.bootstrap]
    _create(cluster, topic_name, 2, 2, assignment=[[1, 2], [2, 3]])
    r = _oncelog("cluster", "status", *boot)
    assert r.returncode == 0, r.stderr
    assert f"controller {cluster.controller()}" in r.stdout and "3 broker(s)" in r.stdout
    status = json.loads(_oncelog("cluster", "status", "--json", *boot).stdout)
    assert sorted(b["node_id"] for b in status["brokers"]) == [1, 2, 3]
    assert status["controller"] == cluster.controller()

    r = _oncelog("cluster", "partitions", topic_name, "--json", *boot)
    assert r.returncode == 0, r.stderr
    rows = {p["partition"]: p for p in json.loads(r.stdout)}
    assert rows[0]["replicas"] == [1, 2] and rows[0]["leader"] == 1 and sorted(rows[0]["isr"]) == [1, 2]
    assert rows[0]["leader_epoch"] >= 0
    r = _oncelog("cluster", "partitions", topic_name, *boot)
    assert "Leader epoch" in r.stdout, r.stdout

    plan = {"version": 1, "partitions": [{"topic": topic_name, "partition": 1, "replicas": [1, 3]}]}
    r = subprocess.run([*ONCELOG, "topic", "reassign", "--plan", "-", "--wait", "60", *boot], input=json.dumps(plan),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Every move completed." in r.stdout
    r = _oncelog("topic", "reassign", topic_name, "--replicas", "0:3,1", "--wait", "60", *boot)
    assert r.returncode == 0, r.stdout + r.stderr
    view = cluster.view()
    assert _state(view, topic_name, 0).replicas == (3, 1) and _state(view, topic_name, 1).replicas == (1, 3)
    r = _oncelog("topic", "reassign", "--list", topic_name, *boot)
    assert r.returncode == 0 and "No reassignment in progress." in r.stdout, r.stdout + r.stderr
    r = _oncelog("topic", "reassign", topic_name, "--cancel", *boot)
    assert r.returncode == 1 and "no reassignment" in r.stderr, r.stderr
    r = _oncelog("topic", "reassign", topic_name, "--replicas", "0:3,99", *boot)
    assert r.returncode == 1 and "INVALID_REPLICA_ASSIGNMENT" in r.stderr, r.stderr

    cluster.wait_for(lambda v: set(_state(v, topic_name, 0).isr) == {1, 3}, TIMEOUT, "partition 0 in sync")
    r = _oncelog("cluster", "elect-leaders", "-t", topic_name, "--json", *boot)
    assert r.returncode == 0, r.stdout + r.stderr
    errors = {row["partition"]: row["error"] for row in json.loads(r.stdout)}
    assert errors[1] == "ELECTION_NOT_NEEDED" and errors[0] in (None, "ELECTION_NOT_NEEDED"), errors
    view = cluster.wait_for(lambda v: _state(v, topic_name, 0).leader == 3, TIMEOUT, "the preferred replica 3 leads")
    epoch = _state(view, topic_name, 0).leader_epoch
    assert epoch > rows[0]["leader_epoch"]  # elected again since the first listing
    # topic describe shows each partition's leader with its epoch, as Metadata gives them (once the broker asked
    # has the new view)
    deadline = time.monotonic() + TIMEOUT
    while True:
        r = _oncelog("topic", "describe", topic_name, "--json", *boot)
        assert r.returncode == 0, r.stderr
        described = {p["partition"]: p for p in json.loads(r.stdout)["partitions"]}
        if (described[0]["leader"], described[0]["leader_epoch"]) == (3, epoch) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert (described[0]["leader"], described[0]["leader_epoch"]) == (3, epoch), described[0]
    r = _oncelog("topic", "describe", topic_name, *boot)
    assert "Leader epoch" in r.stdout, r.stdout


def test_kafka_python_admin_reassigns_lists_and_elects(cluster: ClusterProcess, topic_name: str) -> None:
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTopicPartition

    ctrl = cluster.controller()
    assert ctrl is not None
    y, z = (n for n in cluster.node_ids if n != ctrl)
    _create(cluster, topic_name, 1, 2, assignment=[[y, ctrl]])
    # z is paused below: the admin client must know the controller by then (it looks it up through any broker)
    admin = KafkaAdminClient(bootstrap_servers=",".join(cluster.brokers[n].bootstrap for n in (ctrl, y)),
                             request_timeout_ms=TIMEOUT * 1000)
    try:
        tp = KTopicPartition(topic_name, 0)
        assert admin.list_partition_reassignments([tp]) == {}
        cluster.pause(z)  # the new replica cannot catch up while paused: the move stays listed
        try:
            admin.alter_partition_reassignments({tp: [z, y]})
            listed = admin.list_partition_reassignments([tp])
            assert list(listed) == [tp], listed
            entry = listed[tp]
            assert sorted(entry["replicas"]) == sorted([z, y, ctrl]), entry
            assert entry["adding_replicas"] == [z] and entry["removing_replicas"] == [ctrl], entry
        finally:
            cluster.resume(z)
        view = cluster.wait_for(lambda v: _state(v, topic_name, 0).replicas == (z, y)
                                and set(_state(v, topic_name, 0).isr) == {z, y}, TIMEOUT, "the move completed")
        _wait(lambda: admin.list_partition_reassignments([tp]) == {}, "the move no longer listed")
        if _state(view, topic_name, 0).leader != z:
            admin.elect_leaders(0, {topic_name: [0]})
        cluster.wait_for(lambda v: _state(v, topic_name, 0).leader == z, TIMEOUT, "the preferred replica leads")
    finally:
        admin.close()


def test_cli_reassign_spreads_a_topic_over_brokers(cluster: ClusterProcess, topic_name: str) -> None:
    boot = ["-b", cluster.bootstrap]
    _create(cluster, topic_name, 3, 1, assignment=[[1], [1], [1]])
    r = _oncelog("topic", "reassign", topic_name, "--brokers", "1,2,3", "--replication-factor", "2", "--wait", "60",
                 "--json", *boot)
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert out["still_moving"] == [] and all(row["error"] is None for row in out["results"]), out
    assert {row["partition"]: row["replicas"] for row in out["results"]} == {0: [1, 2], 1: [2, 3], 2: [3, 1]}
    view = cluster.view()
    assert [_state(view, topic_name, i).replicas for i in range(3)] == [(1, 2), (2, 3), (3, 1)]
    r = _oncelog("cluster", "elect-leaders", "-t", topic_name, *boot)
    assert r.returncode == 0, r.stdout + r.stderr
    cluster.wait_for(lambda v: [_state(v, topic_name, i).leader for i in range(3)] == [1, 2, 3], TIMEOUT,
                     "leaders spread over the three brokers")
    r = _oncelog("topic", "reassign", topic_name, "--brokers", "1,2", "--replication-factor", "3", *boot)
    assert r.returncode == 1 and "has 3 replicas but --brokers names 2" in r.stderr, r.stderr
