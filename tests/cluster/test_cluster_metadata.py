"""A cluster of three brokers answers Metadata, DescribeCluster and CreateTopics cluster-wide, from the view in etcd:
checked with confluent-kafka, kafka-python, aiokafka and our own client against real broker processes."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from confluent_kafka import KafkaError as CKafkaError
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient

from oncelog.client.admin import AsyncAdmin
from oncelog.client.cluster import Cluster
from oncelog.client.errors import KafkaError
from oncelog.protocol.errors import ErrorCode
from oncelog.testing.cluster import ClusterProcess

TIMEOUT = 30


def confluent(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create(admin: AdminClient, *topics: NewTopic, validate_only: bool = False) -> dict[str, Exception | None]:
    futures = admin.create_topics(list(topics), operation_timeout=TIMEOUT, validate_only=validate_only)
    out: dict[str, Exception | None] = {}
    for name, fut in futures.items():
        try:
            fut.result(TIMEOUT)
            out[name] = None
        except KafkaException as e:
            out[name] = e
    return out


def test_every_client_sees_the_three_brokers_and_the_controller(cluster: ClusterProcess) -> None:
    view = cluster.view()
    assert set(view.brokers) == {1, 2, 3} and view.controller is not None
    ports = {n: b.port for n, b in cluster.brokers.items()}
    controller = view.controller.node_id

    for node, b in cluster.brokers.items():  # every broker answers for the whole cluster
        md = confluent(b.bootstrap).list_topics(timeout=TIMEOUT)
        assert {i: m.port for i, m in md.brokers.items()} == ports, f"asked broker {node}"
        assert md.controller_id == controller
        assert md.cluster_id == view.cluster_id

    admin = confluent(cluster.bootstrap)
    desc = admin.describe_cluster(request_timeout=TIMEOUT).result(TIMEOUT)
    assert desc.controller.id == controller and sorted(n.id for n in desc.nodes) == [1, 2, 3]

    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        kd = kp.describe_cluster()
        assert sorted(b["broker_id"] for b in kd["brokers"]) == [1, 2, 3]
        assert kd["controller_id"] == controller
    finally:
        kp.close()

    async def ours_and_aiokafka() -> None:
        aio = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        await aio.start()
        try:
            ad = await aio.describe_cluster()
            assert sorted(b["node_id"] for b in ad["brokers"]) == [1, 2, 3]
            assert ad["controller_id"] == controller
        finally:
            await aio.close()
        c = Cluster(cluster.bootstrap)
        try:
            await c.bootstrap()
            assert {n: b.port for n, b in c.brokers.items()} == ports
            assert c.controller_id == controller and c.cluster_id == view.cluster_id
        finally:
            await c.close()

    asyncio.run(ours_and_aiokafka())


def test_create_topics_rf3_spreads_leaders_evenly(cluster: ClusterProcess, topic_name: str) -> None:
    assert create(confluent(cluster.bootstrap), NewTopic(topic_name, 6, 3)) == {topic_name: None}
    view = cluster.view()  # answered once the view has it: no waiting needed
    states = dict(view.topic_partitions(topic_name))
    assert sorted(states) == list(range(6))
    for state in states.values():
        assert len(set(state.replicas)) == 3 and set(state.isr) == set(state.replicas)
        assert state.leader == state.replicas[0] and state.leader_epoch == 0
    assert Counter(s.leader for s in states.values()) == {1: 2, 2: 2, 3: 2}
    assert Counter(r for s in states.values() for r in s.replicas) == {1: 6, 2: 6, 3: 6}

    # every client's Metadata shows what the view holds
    md = confluent(cluster.brokers[2].bootstrap).list_topics(topic_name, timeout=TIMEOUT).topics[topic_name]
    assert md.error is None
    for i, p in md.partitions.items():
        assert (p.leader, p.replicas, p.isrs) == (states[i].leader, list(states[i].replicas), list(states[i].isr))
    kp = KafkaAdminClient(bootstrap_servers=cluster.brokers[3].bootstrap)
    try:
        (kt,) = kp.describe_topics([topic_name])
        assert kt["error_code"] == 0 and kt["topic_id"] is not None
        for p in kt["partitions"]:
            s = states[p["partition_index"]]
            assert (p["leader_id"], p["replica_nodes"], p["isr_nodes"]) == (s.leader, list(s.replicas), list(s.isr))
            assert p["leader_epoch"] == 0 and p["offline_replicas"] == []
    finally:
        kp.close()


def test_replication_factor_above_the_live_brokers_is_refused(cluster: ClusterProcess, topic_name: str) -> None:
    err = create(confluent(cluster.bootstrap), NewTopic(topic_name, 1, 4))[topic_name]
    assert err is not None
    kerr = err.args[0]
    assert kerr.code() == CKafkaError.INVALID_REPLICATION_FACTOR
    assert kerr.str().startswith("Unable to replicate the partition 4 time(s): The target replication factor of 4 "
                                 "cannot be reached because only 3 broker(s) are")
    assert topic_name not in cluster.view().topics

    async def ours() -> None:
        async with AsyncAdmin({"bootstrap.servers": cluster.bootstrap}) as admin:
            with pytest.raises(KafkaError) as e:
                await admin.create_topics(topic_name, 2, replication_factor=5)
            assert e.value.code() == ErrorCode.INVALID_REPLICATION_FACTOR

    asyncio.run(ours())
    assert topic_name not in cluster.view().topics


def test_validate_only_manual_assignments_and_configs(cluster: ClusterProcess, topic_name: str) -> None:
    admin = confluent(cluster.bootstrap)
    assert create(admin, NewTopic(topic_name, 3, 2), validate_only=True) == {topic_name: None}
    assert topic_name not in cluster.view().topics

    manual = NewTopic(topic_name, 3, replica_assignment=[[3, 1], [2, 3], [1, 2]],
                      config={"retention.ms": "3600000", "min.insync.replicas": "2"})
    assert create(admin, manual) == {topic_name: None}
    view = cluster.view()
    assert [s.replicas for _, s in view.topic_partitions(topic_name)] == [(3, 1), (2, 3), (1, 2)]
    assert [s.leader for _, s in view.topic_partitions(topic_name)] == [3, 2, 1]
    assert dict(view.topics[topic_name].configs) == {"retention.ms": "3600000", "min.insync.replicas": "2"}

    again = create(admin, NewTopic(topic_name, 1, 1))[topic_name]
    assert again is not None and again.args[0].code() == CKafkaError.TOPIC_ALREADY_EXISTS
    bad_broker = create(admin, NewTopic(topic_name + "-x", 1, replica_assignment=[[1, 7]]))[topic_name + "-x"]
    assert bad_broker is not None and bad_broker.args[0].code() == CKafkaError.INVALID_REPLICA_ASSIGNMENT
    bad_config = create(admin, NewTopic(topic_name + "-y", 1, 1, config={"no.such.config": "1"}))[topic_name + "-y"]
    assert bad_config is not None and bad_config.args[0].code() == CKafkaError.INVALID_CONFIG
    assert topic_name + "-x" not in cluster.view().topics and topic_name + "-y" not in cluster.view().topics


def test_metadata_auto_creates_with_the_default_replication_factor(cluster: ClusterProcess, topic_name: str) -> None:
    """Two brokers asked at once for the same unknown topic create it once (one topic id), both answer it."""

    async def ask(node: int) -> tuple[int, object]:
        c = Cluster(cluster.brokers[node].bootstrap, allow_auto_topic_creation=True)
        try:
            await c.bootstrap()
            resp = await c.refresh([topic_name])
            (t,) = resp.topics
            return t.error_code, t.topic_id
        finally:
            await c.close()

    async def both() -> list[tuple[int, object]]:
        return list(await asyncio.gather(ask(1), ask(2)))

    answers = asyncio.run(both())
    view = cluster.view()
    meta = view.topics[topic_name]
    assert answers == [(0, meta.topic_id), (0, meta.topic_id)]
    assert meta.num_partitions == 1  # num.partitions
    assert len(view.partition(topic_name, 0).replicas) == 3  # default.replication.factor of this cluster

    async def no_auto() -> int:
        c = Cluster(cluster.bootstrap, allow_auto_topic_creation=False)
        try:
            await c.bootstrap()
            (t,) = (await c.refresh([topic_name + "-none"])).topics
            return t.error_code
        finally:
            await c.close()

    assert asyncio.run(no_auto()) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert topic_name + "-none" not in cluster.view().topics


def test_create_partitions_and_delete_topics_are_cluster_wide(cluster: ClusterProcess, topic_name: str) -> None:
    from confluent_kafka.admin import NewPartitions

    admin = confluent(cluster.bootstrap)
    assert create(admin, NewTopic(topic_name, 2, 3)) == {topic_name: None}
    before = dict(cluster.view().topic_partitions(topic_name))

    admin.create_partitions([NewPartitions(topic_name, 5)], operation_timeout=TIMEOUT)[topic_name].result(TIMEOUT)
    view = cluster.view()
    states = dict(view.topic_partitions(topic_name))
    assert sorted(states) == [0, 1, 2, 3, 4] and all(states[i] == before[i] for i in before)
    assert all(len(set(s.replicas)) == 3 and s.leader in view.brokers for s in states.values())

    manual = NewPartitions(topic_name, 6, replica_assignment=[[2, 3, 1]])
    admin.create_partitions([manual], operation_timeout=TIMEOUT)[topic_name].result(TIMEOUT)
    assert cluster.view().partition(topic_name, 5).replicas == (2, 3, 1)
    with pytest.raises(KafkaException) as e:
        admin.create_partitions([NewPartitions(topic_name, 3)], operation_timeout=TIMEOUT)[topic_name].result(TIMEOUT)
    assert e.value.args[0].code() == CKafkaError.INVALID_PARTITIONS

    old_id = cluster.view().topics[topic_name].topic_id
    admin.delete_topics([topic_name], operation_timeout=TIMEOUT)[topic_name].result(TIMEOUT)
    view = cluster.view()
    assert topic_name not in view.topics and not list(view.topic_partitions(topic_name))
    md = confluent(cluster.brokers[3].bootstrap).list_topics(timeout=TIMEOUT)
    assert topic_name not in md.topics
    with pytest.raises(KafkaException) as e:
        admin.delete_topics([topic_name], operation_timeout=TIMEOUT)[topic_name].result(TIMEOUT)
    assert e.value.args[0].code() == CKafkaError.UNKNOWN_TOPIC_OR_PART

    assert create(admin, NewTopic(topic_name, 1, 3)) == {topic_name: None}  # the name is free again: a new id
    assert cluster.view().topics[topic_name].topic_id != old_id


def test_replicas_span_the_racks(make_cluster: Callable[..., ClusterProcess], topic_name: str) -> None:
    racks = {1: "rack-a", 2: "rack-a", 3: "rack-b", 4: "rack-b"}
    cluster = make_cluster(4, broker_settings={n: {"broker.rack": r} for n, r in racks.items()})
    admin = confluent(cluster.bootstrap)
    desc = admin.describe_cluster(request_timeout=TIMEOUT).result(TIMEOUT)
    assert {n.id: n.rack for n in desc.nodes} == racks
    assert create(admin, NewTopic(topic_name, 8, 2)) == {topic_name: None}
    states = dict(cluster.view().topic_partitions(topic_name))
    assert all({racks[r] for r in s.replicas} == {"rack-a", "rack-b"} for s in states.values())
    assert Counter(s.leader for s in states.values()) == {1: 2, 2: 2, 3: 2, 4: 2}


def test_kafka_python_and_aiokafka_produce_and_consume_in_groups_on_rf3(cluster: ClusterProcess,
                                                                        topic_name: str) -> None:
    """kafka-python and aiokafka each write acks=all to an RF=3 topic led by all three brokers (aiokafka with
    idempotence: InitProducerId from the cluster's producer-id blocks) and read everything back in a consumer group
    (the group coordinator on the leader of the group's __consumer_offsets partition), committing offsets."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition

    assert create(confluent(cluster.bootstrap), NewTopic(topic_name, 3, 3)) == {topic_name: None}
    cluster.wait_for_topic(topic_name, 3)
    assert set(cluster.leaders(topic_name).values()) == {1, 2, 3}

    kp = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    for i in range(30):
        kp.send(topic_name, value=f"kp-{i}".encode(), partition=i % 3)
    kp.flush(TIMEOUT)
    kp.close()

    async def aio_produce() -> None:
        p = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", enable_idempotence=True)
        await p.start()
        try:
            for i in range(30):
                await p.send_and_wait(topic_name, value=f"aio-{i}".encode(), partition=i % 3)
        finally:
            await p.stop()

    asyncio.run(aio_produce())
    expected = {f"kp-{i}" for i in range(30)} | {f"aio-{i}" for i in range(30)}

    kc = KafkaConsumer(topic_name, bootstrap_servers=cluster.bootstrap, group_id=f"{topic_name}-kp",
                       auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=15_000)
    got = {m.value.decode() for m in kc if True}
    kc.commit()
    committed = {p: kc.committed(KTopicPartition(topic_name, p)) for p in range(3)}
    kc.close()
    assert got == expected
    assert committed == {0: 20, 1: 20, 2: 20}, committed

    async def aio_consume() -> set[str]:
        c = AIOKafkaConsumer(topic_name, bootstrap_servers=cluster.bootstrap, group_id=f"{topic_name}-aio",
                             auto_offset_reset="earliest", enable_auto_commit=False)
        await c.start()
        seen: set[str] = set()
        try:
            deadline = asyncio.get_running_loop().time() + TIMEOUT
            while len(seen) < len(expected) and asyncio.get_running_loop().time() < deadline:
                batch = await c.getmany(timeout_ms=500)
                for records in batch.values():
                    seen.update(r.value.decode() for r in records)
            await c.commit()
        finally:
            await c.stop()
        return seen

    assert asyncio.run(aio_consume()) == expected
