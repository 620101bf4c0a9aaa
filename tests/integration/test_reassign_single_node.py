"""ElectLeaders and the partition reassignment APIs on a single node (the degenerate cluster): Kafka's answers, and
the cluster commands of the CLI work there too."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from confluent_kafka import ElectionType, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.client.connection import BrokerConnection
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.alter_partition_reassignments_request import (
    AlterPartitionReassignmentsRequest,
    ReassignablePartition,
    ReassignableTopic,
)
from oncelog.protocol.messages.elect_leaders_request import ElectLeadersRequest, TopicPartitions
from oncelog.protocol.messages.list_partition_reassignments_request import ListPartitionReassignmentsRequest
from oncelog.testing.broker_process import BrokerProcess

from helpers.cli import oncelog


async def _send(broker: BrokerProcess, request: Any) -> tuple[Any, dict[int, tuple[int, int]]]:
    conn = BrokerConnection("127.0.0.1", broker.port)
    await conn.connect()
    try:
        return await conn.send(request), dict(conn.broker_versions)
    finally:
        await conn.close()


def test_single_node_answers_elections_and_reassignments_as_kafka(broker: BrokerProcess, topic_name: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for fut in admin.create_topics([NewTopic(topic_name, 2, 1)]).values():
        fut.result(30)
    resp, versions = asyncio.run(_send(broker, ElectLeadersRequest(election_type=0, topic_partitions=[
        TopicPartitions(topic=topic_name, partitions=[0, 1, 7])])))
    assert {k: versions.get(k) for k in (43, 45, 46)} == {43: (0, 2), 45: (0, 0), 46: (0, 0)}
    assert {(r.topic, p.partition_id): p.error_code for r in resp.replica_election_results
            for p in r.partition_result} == {(topic_name, 0): ErrorCode.ELECTION_NOT_NEEDED,
                                             (topic_name, 1): ErrorCode.ELECTION_NOT_NEEDED,
                                             (topic_name, 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    resp, _ = asyncio.run(_send(broker, ElectLeadersRequest(election_type=1, topic_partitions=None)))
    assert resp.error_code == 0 and resp.replica_election_results == []  # nothing needed one

    resp, _ = asyncio.run(_send(broker, AlterPartitionReassignmentsRequest(topics=[ReassignableTopic(
        name=topic_name, partitions=[ReassignablePartition(partition_index=0, replicas=[0]),
                                     ReassignablePartition(partition_index=1, replicas=[0, 5])])])))
    assert {p.partition_index: p.error_code for t in resp.responses for p in t.partitions} == {
        0: ErrorCode.NONE, 1: ErrorCode.INVALID_REPLICA_ASSIGNMENT}
    resp, _ = asyncio.run(_send(broker, AlterPartitionReassignmentsRequest(topics=[ReassignableTopic(
        name=topic_name, partitions=[ReassignablePartition(partition_index=0, replicas=None)])])))
    assert resp.responses[0].partitions[0].error_code == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
    resp, _ = asyncio.run(_send(broker, ListPartitionReassignmentsRequest(topics=None)))
    assert resp.error_code == 0 and resp.topics == []

    got = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic_name, 0)]).result(30)
    assert [e.code() if e is not None else None for e in got.values()] == [ErrorCode.ELECTION_NOT_NEEDED]


def test_cluster_commands_on_a_single_node(broker: BrokerProcess, topic_name: str) -> None:
    assert oncelog("topic", "create", topic_name, "-p", "2", "-b", broker.bootstrap).exit_code == 0
    r = oncelog("cluster", "status", "--json", "-b", broker.bootstrap)
    assert r.exit_code == 0, r.stderr
    status = json.loads(r.stdout)
    assert [b["node_id"] for b in status["brokers"]] == [status["controller"]]
    assert status["under_replicated"] == [] and status["offline"] == [] and status["reassigning"] == []
    r = oncelog("cluster", "partitions", topic_name, "--json", "-b", broker.bootstrap)
    assert [(p["partition"], p["leader_epoch"], p["isr"]) for p in json.loads(r.stdout)] == [
        (0, 0, [status["controller"]]), (1, 0, [status["controller"]])]
    r = oncelog("cluster", "elect-leaders", "-t", topic_name, "-b", broker.bootstrap)
    assert r.exit_code == 0 and r.stdout.count("no election needed") == 2, r.stdout + r.stderr
    r = oncelog("topic", "reassign", topic_name, "--replicas", "0:9", "-b", broker.bootstrap)
    assert r.exit_code == 1 and "INVALID_REPLICA_ASSIGNMENT" in r.stderr, r.stderr
    r = oncelog("topic", "reassign", "--list", "-b", broker.bootstrap)
    assert r.exit_code == 0 and "No reassignment in progress." in r.stdout
    r = oncelog("cluster", "status", "-b", "127.0.0.1:1")
    assert r.exit_code == 1 and r.stderr.startswith("error: cannot reach a broker at 127.0.0.1:1"), r.stderr
