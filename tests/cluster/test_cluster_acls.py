"""In a cluster the ACLs live in etcd: one created through one broker is enforced by every broker within a second,
and one deleted through another broker stops being enforced as fast. (A cluster of its own: authorization is a
setting of every broker. ``allow.everyone.if.no.acl.found`` lets the brokers and the test's client, all
``User:ANONYMOUS`` until SASL, do what no ACL names.)"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable
from typing import Any

from oncelog.protocol import api as kapi
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.create_acls_request import AclCreation, CreateAclsRequest
from oncelog.protocol.messages.create_topics_request import CreatableTopic, CreateTopicsRequest
from oncelog.protocol.messages.delete_acls_request import DeleteAclsFilter, DeleteAclsRequest
from oncelog.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from oncelog.testing.cluster import ClusterProcess

TOPIC = "guarded"
#: ALLOW User:someone-else READ on the topic: from then on the topic has ACLs, and User:ANONYMOUS none of them
ACL = dict(resource_type=2, resource_name=TOPIC, principal="User:someone-else", host="*", operation=3,
           permission_type=3)


def ask(bootstrap: str, message: Any, version: int) -> Any:
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"".join(bytes(b) for b in kapi.encode_request(
            kapi.RequestHeader(message.API_KEY, version, 1, "acl-cluster-test"), message)))
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        return kapi.decode_response(message.API_KEY, version, sock.recv(size, socket.MSG_WAITALL))[1]


def described(bootstrap: str) -> int:
    got = ask(bootstrap, MetadataRequest(topics=[MetadataRequestTopic(name=TOPIC)],
                                         allow_auto_topic_creation=False), 12)
    return int(got.topics[0].error_code)


def seconds_until_every_broker(cluster: ClusterProcess, code: int, since: float) -> float:
    pending = set(cluster.brokers)
    deadline = since + 10
    while pending and time.monotonic() < deadline:
        pending = {n for n in pending if described(cluster.brokers[n].bootstrap) != code}
        if pending:
            time.sleep(0.01)
    assert not pending, f"brokers {sorted(pending)} still answer otherwise after 10 s"
    return time.monotonic() - since


def test_an_acl_made_through_one_broker_is_enforced_by_every_broker_within_a_second(
        make_cluster: Callable[..., ClusterProcess]) -> None:
    cluster = make_cluster(3, settings={"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                                        "allow.everyone.if.no.acl.found": "true"})
    one, three = cluster.brokers[1].bootstrap, cluster.brokers[3].bootstrap
    made = ask(one, CreateTopicsRequest(timeout_ms=10_000, topics=[
        CreatableTopic(name=TOPIC, num_partitions=1, replication_factor=3)]), 5)
    assert made.topics[0].error_code == 0
    cluster.wait_for_topic(TOPIC, 3)
    assert all(described(b.bootstrap) == ErrorCode.NONE for b in cluster.brokers.values())

    created = ask(one, CreateAclsRequest(creations=[AclCreation(resource_pattern_type=3, **ACL)]), 3)
    assert created.results[0].error_code == 0
    took = seconds_until_every_broker(cluster, ErrorCode.TOPIC_AUTHORIZATION_FAILED, time.monotonic())
    assert took < 1.0, f"every broker enforced the new ACL after {took:.2f} s"

    deleted = ask(three, DeleteAclsRequest(filters=[DeleteAclsFilter(
        resource_type_filter=2, resource_name_filter=TOPIC, pattern_type_filter=3, principal_filter=None,
        host_filter=None, operation=1, permission_type=1)]), 3)
    assert len(deleted.filter_results[0].matching_acls) == 1
    took = seconds_until_every_broker(cluster, ErrorCode.NONE, time.monotonic())
    assert took < 1.0, f"every broker dropped the deleted ACL after {took:.2f} s"
