"""CreateAcls / DescribeAcls / DeleteAcls through confluent-kafka's AdminClient, as against Kafka: created ACLs are
described by filters (LITERAL, PREFIXED, MATCH, ANY), deleted by filters, kept across a restart; a broker without an
authorizer answers SECURITY_DISABLED; who may not ALTER the cluster gets CLUSTER_AUTHORIZATION_FAILED; a resource
name of 100 KB is refused as Kafka refuses it (the request cannot be read: the connection is closed) while the
broker goes on serving."""

from __future__ import annotations

import socket
import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from acl_helpers import identities, request
from oncelog.protocol import _runtime
from oncelog.protocol import api as kapi
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.create_acls_request import AclCreation, CreateAclsRequest
from oncelog.protocol.messages.describe_acls_request import DescribeAclsRequest
from oncelog.testing.broker_process import BrokerProcess

TIMEOUT = 15
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED


def admin_for(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def every_acl(admin: AdminClient) -> list[AclBinding]:
    f = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                         AclPermissionType.ANY)
    return sorted(admin.describe_acls(f, request_timeout=TIMEOUT).result(TIMEOUT), key=str)


def test_create_describe_delete_as_against_kafka(super_broker: BrokerProcess) -> None:
    admin = admin_for(super_broker.bootstrap)
    bindings = [
        AclBinding(ResourceType.TOPIC, "orders", LITERAL, "User:alice", "*", AclOperation.READ, ALLOW),
        AclBinding(ResourceType.TOPIC, "orders-", PREFIXED, "User:alice", "10.0.0.1", AclOperation.WRITE, ALLOW),
        AclBinding(ResourceType.GROUP, "*", LITERAL, "User:bob", "*", AclOperation.READ, DENY),
        AclBinding(ResourceType.TRANSACTIONAL_ID, "copier-", PREFIXED, "User:alice", "*", AclOperation.WRITE,
                   ALLOW),
        AclBinding(ResourceType.BROKER, "kafka-cluster", LITERAL, "User:alice", "*", AclOperation.IDEMPOTENT_WRITE,
                   ALLOW),
    ]
    futures = admin.create_acls(bindings, request_timeout=TIMEOUT)
    for b in bindings:
        assert futures[b].result(TIMEOUT) is None
    assert every_acl(admin) == sorted(bindings, key=str)

    match_orders = AclBindingFilter(ResourceType.TOPIC, "orders-eu", ResourcePatternType.MATCH, None, None,
                                    AclOperation.ANY, AclPermissionType.ANY)
    assert admin.describe_acls(match_orders, request_timeout=TIMEOUT).result(TIMEOUT) == [bindings[1]]
    by_alice = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:alice", None,
                                AclOperation.ANY, AclPermissionType.ANY)
    assert len(admin.describe_acls(by_alice, request_timeout=TIMEOUT).result(TIMEOUT)) == 4

    # an invalid binding is refused alone, with Kafka's reason
    bad = AclBinding(ResourceType.BROKER, "not-the-cluster", LITERAL, "User:alice", "*", AclOperation.ALTER, ALLOW)
    with pytest.raises(KafkaException) as e:
        admin.create_acls([bad], request_timeout=TIMEOUT)[bad].result(TIMEOUT)
    assert e.value.args[0].code() == KafkaError.INVALID_REQUEST and "kafka-cluster" in e.value.args[0].str()

    super_broker.restart()  # the ACLs are stored: a restart keeps them
    admin = admin_for(super_broker.bootstrap)
    assert every_acl(admin) == sorted(bindings, key=str)

    deny_filter = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                   DENY)
    deleted = admin.delete_acls([deny_filter, by_alice], request_timeout=TIMEOUT)
    assert deleted[deny_filter].result(TIMEOUT) == [bindings[2]]
    assert sorted(deleted[by_alice].result(TIMEOUT), key=str) == sorted(bindings[:2] + bindings[3:], key=str)
    assert every_acl(admin) == []


def test_without_an_authorizer_the_acl_apis_answer_security_disabled(broker: BrokerProcess) -> None:
    admin = admin_for(broker.bootstrap)
    b = AclBinding(ResourceType.TOPIC, "t", LITERAL, "User:alice", "*", AclOperation.READ, ALLOW)
    with pytest.raises(KafkaException) as e:
        admin.create_acls([b], request_timeout=TIMEOUT)[b].result(TIMEOUT)
    assert e.value.args[0].code() == KafkaError.SECURITY_DISABLED


def test_only_who_may_alter_the_cluster_manages_acls(secured_broker: BrokerProcess) -> None:
    who = identities()
    app = request(secured_broker.bootstrap, DescribeAclsRequest(resource_type_filter=1, resource_name_filter=None,
                                                                pattern_type_filter=1, principal_filter=None,
                                                                host_filter=None, operation=1, permission_type=1),
                  3, who["app"])
    assert app.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    creation = AclCreation(resource_type=2, resource_name="t", resource_pattern_type=3, principal="User:x",
                           host="*", operation=3, permission_type=3)
    denied = request(secured_broker.bootstrap, CreateAclsRequest(creations=[creation]), 3, who["intruder"])
    assert [r.error_code for r in denied.results] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
    admin = request(secured_broker.bootstrap, DescribeAclsRequest(resource_type_filter=1, resource_name_filter=None,
                                                                  pattern_type_filter=1, principal_filter=None,
                                                                  host_filter=None, operation=1,
                                                                  permission_type=1), 3, who["admin"])
    assert admin.error_code == 0 and admin.resources


def test_a_resource_name_of_100_kb_is_refused_as_kafka_does(super_broker: BrokerProcess,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Kafka's generated codecs refuse a string over 32767 bytes: the request cannot be read and the connection
    is closed (SocketServer); nothing is created and every other client is served as before."""
    creation = AclCreation(resource_type=2, resource_name="x" * 100_000, resource_pattern_type=3,
                           principal="User:alice", host="*", operation=3, permission_type=3)
    # our own encoder refuses it too: lift its limit to write what a careless client would send
    monkeypatch.setattr(_runtime, "MAX_STRING_BYTES", 1 << 30)
    frame = b"".join(bytes(b) for b in kapi.encode_request(kapi.RequestHeader(30, 3, 7, "big"),
                                                           CreateAclsRequest(creations=[creation])))
    monkeypatch.undo()
    host, port = super_broker.bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(frame)
        assert sock.recv(4) == b""  # closed, no answer
    admin = admin_for(super_broker.bootstrap)
    assert not [b for b in every_acl(admin) if len(b.name) > 1000]
    ok = AclBinding(ResourceType.TOPIC, "after-the-big-one", LITERAL, "User:alice", "*", AclOperation.READ, ALLOW)
    assert admin.create_acls([ok], request_timeout=TIMEOUT)[ok].result(TIMEOUT) is None
    admin.delete_acls([AclBindingFilter(
        ResourceType.TOPIC, "after-the-big-one", LITERAL, None, None, AclOperation.ANY, AclPermissionType.ANY)],
        request_timeout=TIMEOUT)
