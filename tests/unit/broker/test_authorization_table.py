"""What each API checks (``broker/security/authorization.py``'s table) is Kafka's documentation table "Operations
and Resources on Protocols" (docs/security.html, #operations_resources_and_protocols), except where Kafka's broker
code (``KafkaApis.scala``) does otherwise: each such difference is listed here with the code that shows it. Every
API the broker serves has a row."""

from __future__ import annotations

from oncelog.broker.security.authorization import API_ACLS
from oncelog.broker.router import Router
from oncelog.security.acl import AclOperation, ResourceType

Op, R = AclOperation, ResourceType

#: Kafka's documentation table, transcribed for the APIs oncelog serves (plus those other lanes add: 48-51)
KAFKA_DOCS: dict[int, set[tuple[str, str]]] = {
    0: {("Write", "TransactionalId"), ("IdempotentWrite", "Cluster"), ("Write", "Topic")},
    1: {("ClusterAction", "Cluster"), ("Read", "Topic")},
    2: {("Describe", "Topic")},
    3: {("Describe", "Topic"), ("Create", "Cluster"), ("Create", "Topic")},
    8: {("Read", "Group"), ("Read", "Topic")},
    9: {("Describe", "Group"), ("Describe", "Topic")},
    10: {("Describe", "Group"), ("Describe", "TransactionalId")},
    11: {("Read", "Group")},
    12: {("Read", "Group")},
    13: {("Read", "Group")},
    14: {("Read", "Group")},
    15: {("Describe", "Group")},
    16: {("Describe", "Cluster"), ("Describe", "Group")},
    17: set(),
    18: set(),
    19: {("Create", "Cluster"), ("Create", "Topic")},
    20: {("Delete", "Topic")},
    21: {("Delete", "Topic")},
    22: {("Write", "TransactionalId"), ("IdempotentWrite", "Cluster")},
    23: {("ClusterAction", "Cluster"), ("Describe", "Topic")},
    24: {("Write", "TransactionalId"), ("Write", "Topic")},
    25: {("Write", "TransactionalId"), ("Read", "Group")},
    26: {("Write", "TransactionalId")},
    27: {("Alter", "Cluster"), ("ClusterAction", "Cluster")},
    28: {("Write", "TransactionalId"), ("Read", "Group"), ("Read", "Topic")},
    29: {("Describe", "Cluster")},
    30: {("Alter", "Cluster")},
    31: {("Alter", "Cluster")},
    32: {("DescribeConfigs", "Cluster"), ("DescribeConfigs", "Topic")},
    33: {("AlterConfigs", "Cluster"), ("AlterConfigs", "Topic")},
    34: {("Alter", "Cluster")},
    35: {("Describe", "Cluster")},
    36: set(),
    37: {("Alter", "Topic")},
    42: {("Delete", "Group")},
    43: {("ClusterAction", "Cluster")},
    44: {("AlterConfigs", "Cluster"), ("AlterConfigs", "Topic")},
    45: {("Alter", "Cluster")},
    46: {("Describe", "Cluster")},
    47: {("Delete", "Group"), ("Read", "Topic")},
    48: {("DescribeConfigs", "Cluster")},
    49: {("AlterConfigs", "Cluster")},
    50: {("Describe", "Cluster")},
    51: {("Alter", "Cluster")},
    60: {("Describe", "Cluster")},
    61: {("Read", "Topic")},
    65: {("Describe", "TransactionalId")},
    66: {("Describe", "TransactionalId")},
    68: {("Read", "Group")},
    69: {("Describe", "Group")},
}

#: where Kafka's code (KafkaApis.scala, ConfigHelper.scala) differs from its documentation: (added, removed)
CODE_OVER_DOCS: dict[int, tuple[set[tuple[str, str]], set[tuple[str, str]]]] = {
    # handleProduceRequest checks WRITE on the transactional id and the topics only; idempotence is checked at
    # InitProducerId since KIP-679
    0: (set(), {("IdempotentWrite", "Cluster")}),
    # handleTopicMetadataRequest: authorize(DESCRIBE, CLUSTER) for the cluster's authorized operations (KIP-430)
    3: ({("Describe", "Cluster")}, set()),
    # handleCreateTopicsRequest: filterByAuthorized(DESCRIBE_CONFIGS, TOPIC) for the configs it returns
    19: ({("DescribeConfigs", "Topic")}, set()),
    # handleDeleteTopicsRequest: filterByAuthorized(DESCRIBE, TOPIC) for a topic named by id
    20: ({("Describe", "Topic")}, set()),
    # handleInitProducerIdRequest: ... || authorizeByResourceType(WRITE, TOPIC) (KIP-679)
    22: ({("Write", "Topic")}, set()),
    # handleAddPartitionsToTxnRequest: version >= 4 (brokers, KIP-890) authorizeClusterOperation(CLUSTER_ACTION)
    24: ({("ClusterAction", "Cluster")}, set()),
    # ConfigHelper.describeConfigs / handleIncrementalAlterConfigsRequest: GROUP resources (KIP-848)
    32: ({("DescribeConfigs", "Group")}, set()),
    44: ({("AlterConfigs", "Group")}, set()),
    # handleElectLeaders: authorize(ALTER, CLUSTER)
    43: ({("Alter", "Cluster")}, {("ClusterAction", "Cluster")}),
    # handleDescribeTransactionsRequest: topics shown only with authorize(DESCRIBE, TOPIC)
    65: ({("Describe", "Topic")}, set()),
    # handleConsumerGroupHeartbeat: filterByAuthorized(DESCRIBE, TOPIC) of the subscribed topic names (and of what
    # a subscription regex matches, in the group coordinator's TopicRegexResolver)
    68: ({("Describe", "Topic")}, set()),
    # handleConsumerGroupDescribe: DESCRIBE on the topics of the described members (TOPIC_AUTHORIZATION_FAILED)
    69: ({("Describe", "Topic")}, set()),
}


def _kafka_name(op: AclOperation, resource: ResourceType) -> tuple[str, str]:
    def camel(name: str) -> str:
        return "".join(part.capitalize() for part in name.split("_"))
    return camel(op.name), camel(resource.name)


def test_the_table_is_kafkas_documentation_table_except_where_kafkas_code_differs() -> None:
    assert set(API_ACLS) == set(KAFKA_DOCS)
    for api, documented in KAFKA_DOCS.items():
        added, removed = CODE_OVER_DOCS.get(api, (set(), set()))
        ours = {_kafka_name(op, resource) for op, resource in API_ACLS[api]}
        assert ours == (documented - removed) | added, api


def test_every_api_the_broker_serves_has_a_row() -> None:
    served = set(Router.with_all_handlers().routes)
    assert served <= set(API_ACLS), sorted(served - set(API_ACLS))
