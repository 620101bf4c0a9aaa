"""Each handler asks the authorizer what Kafka's broker asks and answers Kafka's error for a refusal, for other
principals than ``User:ANONYMOUS`` (set on the connection, as an authenticated one would be); refusals go to the
audit log and the denials counter; without an authorizer nothing is checked."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oncelog.broker.context import BrokerContext
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.add_offsets_to_txn_request import AddOffsetsToTxnRequest
from oncelog.protocol.messages.add_partitions_to_txn_request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
)
from oncelog.protocol.messages.alter_client_quotas_request import (
    AlterClientQuotasRequest,
    EntityData,
    EntryData,
    OpData,
)
from oncelog.protocol.messages.create_topics_request import CreatableTopic, CreateTopicsRequest
from oncelog.protocol.messages.delete_topics_request import DeleteTopicsRequest
from oncelog.protocol.messages.describe_client_quotas_request import DescribeClientQuotasRequest
from oncelog.protocol.messages.describe_cluster_request import DescribeClusterRequest
from oncelog.protocol.messages.describe_configs_request import DescribeConfigsRequest, DescribeConfigsResource
from oncelog.protocol.messages.end_txn_request import EndTxnRequest
from oncelog.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from oncelog.protocol.messages.find_coordinator_request import FindCoordinatorRequest
from oncelog.protocol.messages.init_producer_id_request import InitProducerIdRequest
from oncelog.protocol.messages.join_group_request import JoinGroupRequest
from oncelog.protocol.messages.list_offsets_request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from oncelog.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from oncelog.protocol.messages.offset_commit_request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from oncelog.protocol.messages.produce_request import PartitionProduceData, ProduceRequest, TopicProduceData
from oncelog.protocol.records import RecordBatchBuilder
from oncelog.security.acl import CLUSTER_NAME, AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from oncelog.security.authorizer import StandardAuthorizer
from oncelog.security.principal import parse_principal
from oncelog.security.store import ACLS, MemorySecurityStore
from oncelog.testing.connection import ConnectionHarness, broker_context

Op, R = AclOperation, ResourceType
ALICE, BOB = "User:alice", "User:bob"


def acl(principal: str, rtype: ResourceType, name: str, op: AclOperation,
        pattern: PatternType = PatternType.LITERAL) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, "*", op, AclPermissionType.ALLOW)


ALICE_ACLS = [acl(ALICE, R.TOPIC, "t", Op.WRITE), acl(ALICE, R.TOPIC, "t", Op.READ),
              acl(ALICE, R.TRANSACTIONAL_ID, "tx", Op.WRITE), acl(ALICE, R.GROUP, "g", Op.READ),
              acl(ALICE, R.CLUSTER, CLUSTER_NAME, Op.DESCRIBE)]


@pytest.fixture
def context(tmp_path: Path) -> Iterator[BrokerContext]:
    ctx = broker_context(tmp_path / "data")
    ctx.topics.create("t", 1)
    ctx.topics.create("secret", 1)
    ctx.authorizer = StandardAuthorizer(MemorySecurityStore({ACLS: dict(b.record() for b in ALICE_ACLS)}))
    yield ctx
    ctx.topics.logs.close()


def ask(context: BrokerContext, principal: str, version: int, request: Any) -> Any:
    async def go() -> Any:
        h = ConnectionHarness(context)
        h.connection.principal = parse_principal(principal)
        h.send(request.API_KEY, version, request)
        for _ in range(200):
            got = h.responses()
            if got:
                return got[0][1]
            await asyncio.sleep(0.005)
        raise AssertionError("no answer")
    return asyncio.run(go())


def produce(topic: str, transactional: bool = False, txn_id: str | None = None) -> ProduceRequest:
    b = RecordBatchBuilder(producer_id=7 if transactional else -1, producer_epoch=0 if transactional else -1,
                           base_sequence=0 if transactional else -1, is_transactional=transactional)
    b.append(1, b"k", b"v", ())
    return ProduceRequest(transactional_id=txn_id, acks=1, timeout_ms=1000, topic_data=[TopicProduceData(
        name=topic, partition_data=[PartitionProduceData(index=0, records=b.build())])])


def codes(response: Any) -> list[int]:
    return [p.error_code for t in response.responses for p in t.partition_responses]


def test_produce_needs_write_on_the_topic_and_on_the_transactional_id(context: BrokerContext) -> None:
    assert codes(ask(context, ALICE, 9, produce("t"))) == [ErrorCode.NONE]
    assert codes(ask(context, BOB, 9, produce("t"))) == [ErrorCode.TOPIC_AUTHORIZATION_FAILED]
    assert codes(ask(context, ALICE, 9, produce("secret"))) == [ErrorCode.TOPIC_AUTHORIZATION_FAILED]
    assert codes(ask(context, ALICE, 9, produce("t", True, "other"))) == [
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED]
    assert codes(ask(context, ALICE, 9, produce("t", True, None))) == [ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED]


def test_fetch_and_list_offsets_need_read_and_describe(context: BrokerContext) -> None:
    fetch = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, topics=[FetchTopic(
        topic=name, partitions=[FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])
        for name in ("t", "secret")])
    got = ask(context, ALICE, 12, fetch)
    assert [p.error_code for t in got.responses for p in t.partitions] == [0, ErrorCode.TOPIC_AUTHORIZATION_FAILED]
    follower = FetchRequest(replica_id=2, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, topics=fetch.topics[:1])
    got = ask(context, ALICE, 12, follower)  # a replica fetch needs CLUSTER_ACTION
    assert [p.error_code for t in got.responses for p in t.partitions] == [ErrorCode.TOPIC_AUTHORIZATION_FAILED]
    offsets = ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsTopic(name=n, partitions=[
        ListOffsetsPartition(partition_index=0, timestamp=-1)]) for n in ("t", "secret")])
    got = ask(context, ALICE, 5, offsets)
    assert [p.error_code for t in got.topics for p in t.partitions] == [0, ErrorCode.TOPIC_AUTHORIZATION_FAILED]


def test_metadata_leaves_out_what_the_principal_may_not_describe(context: BrokerContext) -> None:
    every = ask(context, ALICE, 12, MetadataRequest(topics=None, include_topic_authorized_operations=True))
    assert [t.name for t in every.topics] == ["t"]
    bits = every.topics[0].topic_authorized_operations
    assert bits == (1 << Op.READ) | (1 << Op.WRITE) | (1 << Op.DESCRIBE)
    named = ask(context, ALICE, 12, MetadataRequest(topics=[MetadataRequestTopic(name="secret"),
                                                            MetadataRequestTopic(name="t")]))
    assert sorted((t.name, t.error_code) for t in named.topics) == [("secret", ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                                                                   ("t", 0)]
    # auto-creation needs CREATE (the topic is not created, nor disclosed)
    asyncio.run(context.authorizer.create_acls([acl(ALICE, R.TOPIC, "new-", Op.DESCRIBE, PatternType.PREFIXED)]))
    made = ask(context, ALICE, 12, MetadataRequest(topics=[MetadataRequestTopic(name="new-1")],
                                                   allow_auto_topic_creation=True))
    assert [(t.name, t.error_code) for t in made.topics] == [("new-1", ErrorCode.TOPIC_AUTHORIZATION_FAILED)]
    assert context.topics.get("new-1") is None
    by_id = ask(context, BOB, 12, MetadataRequest(topics=[MetadataRequestTopic(
        name=None, topic_id=context.topics.get("t").topic_id)]))  # type: ignore[union-attr]
    assert [(t.name, t.error_code) for t in by_id.topics] == [(None, ErrorCode.TOPIC_AUTHORIZATION_FAILED)]
    cluster = ask(context, ALICE, 1, DescribeClusterRequest(include_cluster_authorized_operations=True))
    assert cluster.cluster_authorized_operations == 1 << Op.DESCRIBE


def test_group_apis_need_the_group(context: BrokerContext) -> None:
    join = JoinGroupRequest(group_id="other", session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="",
                            protocol_type="consumer", protocols=[])
    assert ask(context, ALICE, 5, join).error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    commit = OffsetCommitRequest(group_id="g", generation_id_or_member_epoch=-1, member_id="", topics=[
        OffsetCommitRequestTopic(name=n, partitions=[OffsetCommitRequestPartition(partition_index=0,
                                                                                  committed_offset=1)])
        for n in ("secret",)])
    got = ask(context, ALICE, 8, commit)  # the group is allowed: the topic is refused
    assert [p.error_code for t in got.topics for p in t.partitions] == [ErrorCode.TOPIC_AUTHORIZATION_FAILED]
    got = ask(context, BOB, 8, commit)
    assert [p.error_code for t in got.topics for p in t.partitions] == [ErrorCode.GROUP_AUTHORIZATION_FAILED]
    find = FindCoordinatorRequest(key_type=0, coordinator_keys=["g", "other"])
    assert [c.error_code for c in ask(context, ALICE, 4, find).coordinators] == [
        ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.GROUP_AUTHORIZATION_FAILED]  # (no coordinator in this test)


def test_the_exactly_once_apis(context: BrokerContext) -> None:
    init = InitProducerIdRequest(transactional_id="other", transaction_timeout_ms=10_000)
    assert ask(context, ALICE, 4, init).error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    idempotent = InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=-1)
    assert ask(context, BOB, 4, idempotent).error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert ask(context, ALICE, 4, idempotent).error_code != ErrorCode.CLUSTER_AUTHORIZATION_FAILED  # WRITE on t
    end = EndTxnRequest(transactional_id="other", producer_id=1, producer_epoch=0, committed=True)
    assert ask(context, ALICE, 3, end).error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    offsets = AddOffsetsToTxnRequest(transactional_id="tx", producer_id=1, producer_epoch=0, group_id="other")
    assert ask(context, ALICE, 3, offsets).error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    add = AddPartitionsToTxnRequest(v3_and_below_transactional_id="tx", v3_and_below_producer_id=1,
                                    v3_and_below_producer_epoch=0, v3_and_below_topics=[
                                        AddPartitionsToTxnTopic(name="t", partitions=[0]),
                                        AddPartitionsToTxnTopic(name="secret", partitions=[0])])
    got = ask(context, ALICE, 3, add)
    assert {r.name: r.results_by_partition[0].partition_error_code for r in got.results_by_topic_v3_and_below} == {
        "t": ErrorCode.OPERATION_NOT_ATTEMPTED, "secret": ErrorCode.TOPIC_AUTHORIZATION_FAILED}


def test_admin_apis(context: BrokerContext) -> None:
    create = CreateTopicsRequest(topics=[CreatableTopic(name="n1", num_partitions=1, replication_factor=1)],
                                 timeout_ms=1000)
    assert [t.error_code for t in ask(context, ALICE, 5, create).topics] == [ErrorCode.TOPIC_AUTHORIZATION_FAILED]
    assert context.topics.get("n1") is None
    delete = DeleteTopicsRequest(topic_names=["t"], timeout_ms=1000)
    assert [t.error_code for t in ask(context, ALICE, 4, delete).responses] == [ErrorCode.TOPIC_AUTHORIZATION_FAILED]
    assert context.topics.get("t") is not None
    describe = DescribeConfigsRequest(resources=[DescribeConfigsResource(resource_type=2, resource_name="t"),
                                                 DescribeConfigsResource(resource_type=4, resource_name="0")])
    assert [r.error_code for r in ask(context, ALICE, 4, describe).results] == [
        ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.CLUSTER_AUTHORIZATION_FAILED]


def test_client_quota_apis_need_the_cluster_configs(context: BrokerContext) -> None:
    alter = AlterClientQuotasRequest(entries=[EntryData(entity=[EntityData(entity_type="client-id",
                                                                           entity_name="app")],
                                                        ops=[OpData(key="producer_byte_rate", value=1024.0)])])
    assert [e.error_code for e in ask(context, ALICE, 1, alter).entries] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
    assert ask(context, ALICE, 1, DescribeClientQuotasRequest(components=[])).error_code == \
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    context.authorizer = StandardAuthorizer(MemorySecurityStore({ACLS: dict(b.record() for b in [
        acl(BOB, R.CLUSTER, CLUSTER_NAME, Op.ALTER_CONFIGS)])}))  # ALTER_CONFIGS implies DESCRIBE_CONFIGS
    context.security_store = MemorySecurityStore()
    assert [e.error_code for e in ask(context, BOB, 1, alter).entries] == [ErrorCode.NONE]
    assert [v.value for v in ask(context, BOB, 1, DescribeClientQuotasRequest(components=[])).entries[0].values] \
        == [1024.0]


def test_a_refusal_is_audited_and_counted(context: BrokerContext, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="oncelog.security.audit"):
        ask(context, BOB, 9, produce("t"))
    lines = [r.getMessage() for r in caplog.records if r.name == "oncelog.security.audit"]
    assert len(lines) == 1
    assert "User:bob" in lines[0] and "WRITE" in lines[0] and "TOPIC:LITERAL:t" in lines[0] and "Produce" in lines[0]
    assert "127.0.0.1" in lines[0]
    value = context.metrics.registry.get_sample_value("oncelog_authorization_denials_total",
                                                      {"api": "Produce", "operation": "WRITE"})
    assert value == 1


def test_without_an_authorizer_nothing_is_checked(context: BrokerContext) -> None:
    context.authorizer = None
    assert codes(ask(context, BOB, 9, produce("secret"))) == [ErrorCode.NONE]
    every = ask(context, BOB, 12, MetadataRequest(topics=None, include_topic_authorized_operations=True))
    assert sorted(t.name for t in every.topics) == ["secret", "t"]
    assert all(t.topic_authorized_operations == 0b110111111000 for t in every.topics)  # every TOPIC operation


def test_a_failed_login_is_audited_and_counted(context: BrokerContext, caplog: pytest.LogCaptureFixture) -> None:
    from oncelog.broker.security.authorization import audit_failed_login

    with caplog.at_level(logging.INFO, logger="oncelog.security.audit"):
        audit_failed_login(context.metrics, "User:eve", "10.0.0.9", "SASL_PLAINTEXT", "SCRAM-SHA-256",
                           "bad password")
    line = [r.getMessage() for r in caplog.records if r.name == "oncelog.security.audit"][0]
    assert "User:eve" in line and "10.0.0.9" in line and "SCRAM-SHA-256" in line
    assert context.metrics.registry.get_sample_value("oncelog_failed_authentications_total", {
        "listener": "SASL_PLAINTEXT", "mechanism": "SCRAM-SHA-256"}) == 1


def test_the_host_acls_name_is_the_clients_address() -> None:
    from oncelog.broker.request import RequestContext

    def host(peer: str) -> str:
        return RequestContext(1, peer, None, 0, 0, 0).client_host
    assert host("10.0.0.1:5000") == "10.0.0.1"
    assert host("[::1]:5000") == "::1"
    assert host("[::ffff:10.0.0.1]:5000") == "10.0.0.1"  # IPv4 through a dual-stack listener, as Kafka sees it
