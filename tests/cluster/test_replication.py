"""Data replication on real processes: followers fetch from the leader, acks=all waits for the ISR, a new leader
holds every acknowledged record, and min.insync.replicas is enforced."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.client.connection import BrokerConnection
from oncelog.cluster.model import ClusterView
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.produce_request import PartitionProduceData, ProduceRequest, TopicProduceData
from oncelog.protocol.record_batch import iter_batch_headers
from oncelog.protocol.records import RecordBatchBuilder, decode_records
from oncelog.testing.cluster import ClusterProcess

from helpers.cluster import scrape

TIMEOUT = 30


def _create(cluster: ClusterProcess, topic: str, min_isr: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for fut in admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": str(min_isr)})],
                                   operation_timeout=TIMEOUT).values():
        fut.result(TIMEOUT)
    cluster.wait_for_topic(topic, 3)


def _produce(cluster: ClusterProcess, topic: str, values: list[bytes]) -> list[bytes]:
    """acks=all, plain (the idempotent and transactional paths: test_cluster_eos.py); the values acknowledged."""
    acked: list[bytes] = []
    errors: list[object] = []

    def done(err: object, msg: object) -> None:
        if err is None:
            acked.append(msg.value())  # type: ignore[attr-defined]
        else:
            errors.append(err)

    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": False,
                  "max.in.flight.requests.per.connection": 1, "linger.ms": 2, "message.timeout.ms": 20_000})
    for v in values:
        p.produce(topic, value=v, partition=0, on_delivery=done)
        p.poll(0)
    assert p.flush(TIMEOUT) == 0
    assert not errors, errors[:3]
    return acked


def _consume(cluster: ClusterProcess, topic: str, count: int, read_committed: bool) -> list[bytes]:
    return [v for _, v in _consume_at(cluster, topic, count, read_committed)]


def _consume_at(cluster: ClusterProcess, topic: str, count: int, read_committed: bool) -> list[tuple[int, bytes]]:
    """(offset, value) of the records of partition 0 from offset 0: ``count`` of them and whatever else comes
    within half a second."""
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "unused", "enable.auto.commit": False,
                  "isolation.level": "read_committed" if read_committed else "read_uncommitted"})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + TIMEOUT
    try:
        while len(got) < count and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append((m.offset(), m.value()))
        time.sleep(0.5)  # anything past the expected count would be a duplicate
        while (m := c.poll(0.2)) is not None:
            if not m.error():
                got.append((m.offset(), m.value()))
    finally:
        c.close()
    return got


def _local_records(data_dir: Path, topic: str) -> tuple[int, int]:
    """(records, next offset) in a replica's segment files of partition 0."""
    count = end = 0
    for seg in sorted((data_dir / f"{topic}-0").glob("*.log")):
        for h in iter_batch_headers(seg.read_bytes(), check_crc=True):
            if not h.is_control:
                count += h.records_count
            end = max(end, h.next_offset)
    return count, end


def _isr(view: ClusterView, topic: str) -> tuple[int, ...]:
    state = view.partition(topic, 0)
    return () if state is None else state.isr


def _leader(view: ClusterView, topic: str) -> int:
    state = view.partition(topic, 0)
    assert state is not None
    return state.leader


def test_acks_all_reaches_every_replica_and_a_new_leader_has_every_acknowledged_record(
        cluster: ClusterProcess, topic_name: str) -> None:
    _create(cluster, topic_name)
    first = [f"a{i}".encode() for i in range(500)]
    t0 = time.monotonic()
    assert _produce(cluster, topic_name, first) == first
    took = time.monotonic() - t0
    for node, b in cluster.brokers.items():  # acknowledged: on disk on every ISR member (all three)
        assert _local_records(b.data_dir, topic_name) == (500, 500), f"replica on node {node}"

    old = _leader(cluster.view(), topic_name)
    cluster.kill(old)
    view = cluster.wait_for(lambda v: _leader(v, topic_name) not in (old, -1)
                            and old not in _isr(v, topic_name),
                            TIMEOUT, "a new leader without the killed one in the ISR")
    new = _leader(view, topic_name)
    second = [f"b{i}".encode() for i in range(500)]
    assert _produce(cluster, topic_name, second) == second  # ISR 2 >= min.insync.replicas 2

    for read_committed in (True, False):
        got = _consume(cluster, topic_name, 1000, read_committed)
        assert got == first + second, (f"read_committed={read_committed}: {len(got)} records, "
                                       f"{len(set(got))} distinct, leader {new}")
    print(f"\nreplication: 500 acks=all records in {took:.2f} s on 3 replicas; leader {old} killed, {new} "
          f"leads with every acknowledged record")

    cluster.start_broker(old)  # comes back as a follower, catches up, and the leader puts it back in the ISR
    cluster.wait_for(lambda v: old in _isr(v, topic_name), TIMEOUT,
                     f"node {old} back in the ISR")
    assert _local_records(cluster.brokers[old].data_dir, topic_name) == (1000, 1000)
    assert scrape(cluster, new)["oncelog_replica_isr_expands_total"] >= 1


async def _raw_produce(host: str, port: int, topic: str) -> int:
    b = RecordBatchBuilder()
    b.append(int(time.time() * 1000), None, b"x")
    conn = BrokerConnection(host, port)
    await conn.connect()
    try:
        resp = await conn.send(ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[TopicProduceData(
            name=topic, partition_data=[PartitionProduceData(index=0, records=b.build())])]))
        return int(resp.responses[0].partition_responses[0].error_code)
    finally:
        await conn.close()


def test_acks_all_needs_min_insync_replicas(cluster: ClusterProcess, topic_name: str) -> None:
    _create(cluster, topic_name)
    assert _produce(cluster, topic_name, [b"before"]) == [b"before"]
    view = cluster.view()
    leader = _leader(view, topic_name)
    controller = view.controller.node_id if view.controller else -1
    victims = [n for n in cluster.node_ids if n != leader]
    for n in victims:
        cluster.kill(n)
    view = cluster.wait_for(lambda v: (s := v.partition(topic_name, 0)) is not None and s.isr == (leader,)
                            and s.leader == leader, TIMEOUT, f"the ISR down to the leader {leader} alone "
                            f"(controller was {controller})")
    b = cluster.brokers[leader]
    # the controller wrote the shrink: wait for the leader's own view of it (until then an acks=all write waits for
    # the ISR it knows, and times out, as in Kafka)
    own = AdminClient({"bootstrap.servers": b.bootstrap})
    deadline = time.monotonic() + TIMEOUT
    while own.list_topics(topic_name, timeout=10).topics[topic_name].partitions[0].isrs != [leader]:
        assert time.monotonic() < deadline, f"node {leader}'s metadata never showed the ISR [{leader}]"
        time.sleep(0.1)
    host, port = b.bootstrap.rsplit(":", 1)
    code = asyncio.run(_raw_produce(host, int(port), topic_name))
    assert code == ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode(code).name
    assert _local_records(b.data_dir, topic_name) == (1, 1)  # refused before appending
    deadline = time.monotonic() + TIMEOUT
    while (m := scrape(cluster, leader))["oncelog_replica_under_min_isr_partitions"] < 1 \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    assert m["oncelog_replica_under_min_isr_partitions"] >= 1 and m["oncelog_replica_under_replicated_partitions"] >= 1
    assert m["oncelog_replica_leader_partitions"] >= 1


def test_leader_killed_mid_stream_keeps_every_acknowledged_record_once(cluster: ClusterProcess,
                                                                       topic_name: str) -> None:
    """A producer writes without pause (acks=all, no retries: each value is sent once) while the leader is
    SIGKILLed: every acknowledged value is read exactly once, nothing twice, and the offsets have no gaps."""
    _create(cluster, topic_name)
    acked: list[bytes] = []
    failed: list[bytes] = []
    stop = threading.Event()

    def done(err: object, msg: object) -> None:
        (failed if err is not None else acked).append(msg.value())  # type: ignore[attr-defined]

    def produce() -> None:
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": False,
                      "message.send.max.retries": 0, "max.in.flight.requests.per.connection": 1,
                      "linger.ms": 1, "message.timeout.ms": 10_000, "topic.metadata.refresh.interval.ms": 500})
        i = 0
        while not stop.is_set():
            p.produce(topic_name, value=f"c{i}".encode(), partition=0, on_delivery=done)
            p.poll(0.001)
            i += 1
        p.flush(TIMEOUT)

    writer = threading.Thread(target=produce)
    writer.start()
    try:
        deadline = time.monotonic() + TIMEOUT
        while len(acked) < 200 and time.monotonic() < deadline:
            time.sleep(0.02)
        old = _leader(cluster.view(), topic_name)
        before = len(acked)
        cluster.kill(old)
        cluster.wait_for(lambda v: _leader(v, topic_name) not in (old, -1), TIMEOUT, "a new leader")
        while len(acked) < before + 200 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        stop.set()
        writer.join(TIMEOUT)
    assert len(acked) >= before + 200, f"{len(acked)} acknowledged, {len(failed)} failed"
    for read_committed in (False, True):
        got = _consume_at(cluster, topic_name, len(acked), read_committed)
        values = [v for _, v in got]
        assert [o for o, _ in got] == list(range(len(got))), "a gap in the offsets"
        assert len(values) == len(set(values)), "a value read twice"
        missing = set(acked) - set(values)
        assert not missing, f"{len(missing)} acknowledged value(s) lost, e.g. {sorted(missing)[:5]}"
    print(f"\nleader {old} killed mid-stream: {len(acked)} acknowledged, {len(failed)} failed (not retried), "
          f"{len(got)} read, none lost or doubled")


def _local_values(data_dir: Path, topic: str) -> list[bytes]:
    out: list[bytes] = []
    for seg in sorted((data_dir / f"{topic}-0").glob("*.log")):
        data = seg.read_bytes()
        for h in iter_batch_headers(data, check_crc=True):
            if not h.is_control:
                out += [r.value or b"" for r in decode_records(data, h.position)]
    return out


def test_a_returning_leader_truncates_what_it_alone_had(cluster: ClusterProcess, topic_name: str) -> None:
    """KIP-101: records only the old leader got (acks=1 while its follower was paused) are cut from its log when it
    returns as a follower of the new leader, which never had them; both logs end up the same."""
    view = cluster.view()
    a, b = sorted(view.brokers)[:2]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for fut in admin.create_topics([NewTopic(topic_name, 1, replica_assignment=[[a, b]])],
                                   operation_timeout=TIMEOUT).values():
        fut.result(TIMEOUT)
    cluster.wait_for_topic(topic_name, 2)
    assert _leader(cluster.view(), topic_name) == a
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1", "enable.idempotence": False})
    cluster.pause(b)  # its fetcher stops: what a takes now is on a alone
    try:
        for i in range(10):
            p.produce(topic_name, value=f"lost{i}".encode(), partition=0)
        assert p.flush(TIMEOUT) == 0
        assert _local_records(cluster.brokers[a].data_dir, topic_name) == (10, 10)
        cluster.kill(a)
    finally:
        cluster.resume(b)
    cluster.wait_for(lambda v: _leader(v, topic_name) == b, TIMEOUT, f"node {b} leading")
    kept = [f"kept{i}".encode() for i in range(5)]
    assert _produce(cluster, topic_name, kept) == kept  # acks=all with ISR {b}: min.insync.replicas is 1 here
    cluster.start_broker(a)
    cluster.wait_for(lambda v: a in _isr(v, topic_name), TIMEOUT, f"node {a} back in the ISR")
    assert _local_values(cluster.brokers[a].data_dir, topic_name) == kept
    assert _local_values(cluster.brokers[b].data_dir, topic_name) == kept
    assert _consume(cluster, topic_name, 5, False) == kept
    assert "truncating from 10 to 0" in cluster.log_tail(a, 200)


def test_delete_records_moves_the_log_start_of_every_replica(cluster: ClusterProcess, topic_name: str) -> None:
    _create(cluster, topic_name)
    _produce(cluster, topic_name, [b"%d" % i for i in range(100)])
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for fut in admin.delete_records([TopicPartition(topic_name, 0, 60)]).values():
        assert fut.result(TIMEOUT).low_watermark == 60

    def log_start(node: int) -> int:
        ckpt = cluster.brokers[node].data_dir / f"{topic_name}-0" / "partition.checkpoint"
        return int(json.loads(ckpt.read_text())["log_start_offset"])

    deadline = time.monotonic() + TIMEOUT  # the followers learn it from their next fetch
    while any(log_start(n) != 60 for n in cluster.node_ids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert {n: log_start(n) for n in cluster.node_ids} == {n: 60 for n in cluster.node_ids}


def test_a_stalled_follower_leaves_the_isr_and_acks_all_goes_on(make_cluster: Callable[..., ClusterProcess],
                                                                topic_name: str) -> None:
    """A follower that stops fetching (SIGSTOP: its lease outlives the lag limit) is dropped from the ISR by the
    leader after replica.lag.time.max.ms (a compare-and-swap in etcd), so acks=all writes are answered again; once
    it fetches again it catches up and the leader puts it back."""
    lag_ms = 1500
    cluster = make_cluster(3, settings={"replica.lag.time.max.ms": lag_ms})
    _create(cluster, topic_name)
    assert _produce(cluster, topic_name, [b"before"]) == [b"before"]
    view = cluster.view()
    leader = _leader(view, topic_name)
    follower = next(n for n in cluster.node_ids if n != leader)
    cluster.pause(follower)
    try:
        t0 = time.monotonic()
        assert _produce(cluster, topic_name, [b"during"]) == [b"during"]  # held until the ISR shrinks
        took = time.monotonic() - t0
        isr = _isr(cluster.view(), topic_name)
        assert follower not in isr and leader in isr, isr
        assert follower in cluster.view().brokers  # its lease is still alive: the leader shrank the ISR
    finally:
        cluster.resume(follower)
    assert took < lag_ms / 1000 * 3 + 5, f"acks=all answered after {took:.1f} s"
    assert "written" in cluster.log_tail(leader, 200)
    cluster.wait_for(lambda v: follower in _isr(v, topic_name), TIMEOUT, f"node {follower} back in the ISR")
    assert _local_values(cluster.brokers[follower].data_dir, topic_name) == [b"before", b"during"]
    print(f"\nstalled follower: acks=all answered {took:.2f} s after it stopped (replica.lag.time.max.ms={lag_ms})")


def test_controlled_shutdown_of_the_leader_loses_nothing(cluster: ClusterProcess, topic_name: str) -> None:
    """SIGTERM: the leader hands its partitions to an in-sync follower before it leaves, which has every record."""
    _create(cluster, topic_name)
    first = [f"a{i}".encode() for i in range(200)]
    assert _produce(cluster, topic_name, first) == first
    old = _leader(cluster.view(), topic_name)
    assert cluster.stop_broker(old) == 0
    new = _leader(cluster.view(), topic_name)
    assert new not in (old, -1)
    second = [f"b{i}".encode() for i in range(200)]
    assert _produce(cluster, topic_name, second) == second
    assert _consume(cluster, topic_name, 400, False) == first + second


def _epochs(cluster: ClusterProcess, node: int, topic: str) -> list[tuple[int, int]]:
    """(leader epoch, start offset) entries of a replica's leader-epoch-checkpoint."""
    lines = (cluster.brokers[node].data_dir / f"{topic}-0" / "leader-epoch-checkpoint").read_text().split("\n")
    return [(int(e), int(s)) for e, s in (line.split() for line in lines[2:2 + int(lines[1])])]


def test_a_leader_that_wrote_nothing_in_its_epoch_follows_again(cluster: ClusterProcess, topic_name: str) -> None:
    """A replica led at an epoch and appended nothing in it, then followed a leader that never saw that epoch. Its
    fetches named that epoch, the leader answered a diverging epoch ending at the follower's own log end, and the
    follower truncated nothing and kept the entry (its truncation skipped a target at the log end), so it fetched
    again at once, forever: never caught up (out of the ISR for good) and both brokers busy. Kafka's
    UnifiedLog.truncateTo drops the entry ("this broker was a leader and inserted the first start offset entry, but
    then failed to append any entries before another leader was elected")."""
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTopicPartition

    _create(cluster, topic_name)
    values = [f"v{i}".encode() for i in range(5)]
    assert _produce(cluster, topic_name, values) == values
    first = _leader(cluster.view(), topic_name)
    b, c = (n for n in (1, 2, 3) if n != first)
    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=TIMEOUT * 1000)
    try:
        for leader in (b, c):  # b leads and writes nothing; then c leads and b follows it
            order = [leader, *(n for n in (1, 2, 3) if n != leader)]
            kp.alter_partition_reassignments({KTopicPartition(topic_name, 0): order})
            cluster.wait_for(lambda v, order=order: (s := v.partition(topic_name, 0)) is not None
                             and s.replicas == tuple(order) and len(s.isr) == 3, TIMEOUT, f"replicas {order}")
            kp.elect_leaders(0, {topic_name: [0]})
            view = cluster.wait_for(lambda v, leader=leader: _leader(v, topic_name) == leader, TIMEOUT,
                                    f"node {leader} leading")
    finally:
        kp.close()
    state = view.partition(topic_name, 0)
    assert state is not None

    def dropped() -> bool:  # b's entries are a prefix of the leader's: its empty epoch is gone
        mine, leaders = _epochs(cluster, b, topic_name), _epochs(cluster, c, topic_name)
        return mine == leaders[:len(mine)]

    deadline = time.monotonic() + TIMEOUT
    while not dropped() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert dropped(), f"node {b} kept its empty epoch: {_epochs(cluster, b, topic_name)}"
    # and it fetches at the leader's pace (long polls), not in a loop
    before = _fetch_requests(cluster, c)
    time.sleep(2.0)
    assert _fetch_requests(cluster, c) - before < 200, f"followers fetch from node {c} in a loop"
    more = [b"after"]
    assert _produce(cluster, topic_name, more) == more  # acks=all: every replica has it
    assert _epochs(cluster, c, topic_name)[-1] == (state.leader_epoch, len(values))
    assert _epochs(cluster, b, topic_name) == _epochs(cluster, c, topic_name)
    assert _consume(cluster, topic_name, 6, False) == values + more


def _fetch_requests(cluster: ClusterProcess, node: int) -> float:
    """Fetch requests a broker has answered (its /metrics)."""
    url = f"http://{cluster.brokers[node].settings['metrics.listen']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith('oncelog_requests_total{api="fetch"}'):
                return float(line.split()[-1])
    return 0.0
