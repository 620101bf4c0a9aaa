"""Which API checks what: Kafka's table of operations and resources per API, as data, and the calls handlers make.

``API_ACLS`` is Kafka's documentation table "Operations and Resources on Protocols" (docs/security.html) as Kafka's
brokers apply it (``KafkaApis.scala``, ``AclApis.scala``, ``ConfigHelper.scala``, ``AuthHelper.scala``); where the
two differ the code wins and ``tests/unit/broker/test_authorization_table.py`` names each difference. A handler asks
once per resource with the operation of its API: :func:`allowed` (Kafka's ``authorize``), :func:`allowed_names`
(``filterByAuthorized``), :func:`allowed_any` (``authorizeByResourceType``, KIP-679) and
:func:`authorized_operations` (KIP-430). Asking for an operation the table does not list for the API is a bug
(RuntimeError), so the table is what the broker does.

With no authorizer (``authorizer.class.name`` empty, the default) every call answers "allowed" at once, and KIP-430
fields report every operation of the resource, as Kafka's ``AuthHelper`` does without an authorizer.

A refusal goes to the audit log ``oncelog.security.audit`` (principal, host, operation, resource, API, the rule;
Kafka's ``kafka.authorizer.logger`` line) and to the counter ``oncelog_authorization_denials{api,operation}``, a
failed login (:func:`audit_failed_login`, for the authenticator) to the same log and
``oncelog_failed_authentications{listener,mechanism}``; a
check that only filters what is shown (all-topics Metadata, ListGroups) is not audited, as Kafka's
``logIfDenied = false``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from oncelog.protocol.api import API_KEYS
from oncelog.security.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AclOperation,
    ResourceType,
    operation_bits,
)

if TYPE_CHECKING:
    from ..context import BrokerContext
    from ..metrics.counts import BrokerMetrics
    from ..request import RequestContext

__all__ = ["API_ACLS", "CLUSTER_NAME", "allowed", "allowed_any", "allowed_names", "audit_failed_login",
           "authorized_operations"]

audit = logging.getLogger("oncelog.security.audit")

_O, _R = AclOperation, ResourceType
_TOPIC, _GROUP, _CLUSTER, _TXN = _R.TOPIC, _R.GROUP, _R.CLUSTER, _R.TRANSACTIONAL_ID

#: API key -> the (operation, resource type) pairs the API may check
API_ACLS: dict[int, frozenset[tuple[AclOperation, ResourceType]]] = {k: frozenset(v) for k, v in {
    0: {(_O.WRITE, _TXN), (_O.WRITE, _TOPIC)},  # Produce: WRITE on the transactional id of transactional batches
    1: {(_O.CLUSTER_ACTION, _CLUSTER), (_O.READ, _TOPIC)},  # Fetch: a follower, or a consumer
    2: {(_O.DESCRIBE, _TOPIC)},  # ListOffsets
    3: {(_O.DESCRIBE, _TOPIC), (_O.CREATE, _CLUSTER), (_O.CREATE, _TOPIC), (_O.DESCRIBE, _CLUSTER)},  # Metadata
    8: {(_O.READ, _GROUP), (_O.READ, _TOPIC)},  # OffsetCommit
    9: {(_O.DESCRIBE, _GROUP), (_O.DESCRIBE, _TOPIC)},  # OffsetFetch
    10: {(_O.DESCRIBE, _GROUP), (_O.DESCRIBE, _TXN)},  # FindCoordinator
    11: {(_O.READ, _GROUP)},  # JoinGroup
    12: {(_O.READ, _GROUP)},  # Heartbeat
    13: {(_O.READ, _GROUP)},  # LeaveGroup
    14: {(_O.READ, _GROUP)},  # SyncGroup
    15: {(_O.DESCRIBE, _GROUP)},  # DescribeGroups
    16: {(_O.DESCRIBE, _CLUSTER), (_O.DESCRIBE, _GROUP)},  # ListGroups: all with DESCRIBE on the cluster
    17: set(),  # SaslHandshake: part of authentication
    18: set(),  # ApiVersions: before authentication
    19: {(_O.CREATE, _CLUSTER), (_O.CREATE, _TOPIC), (_O.DESCRIBE_CONFIGS, _TOPIC)},  # CreateTopics
    20: {(_O.DESCRIBE, _TOPIC), (_O.DELETE, _TOPIC)},  # DeleteTopics (DESCRIBE: a topic named by id)
    21: {(_O.DELETE, _TOPIC)},  # DeleteRecords
    22: {(_O.WRITE, _TXN), (_O.IDEMPOTENT_WRITE, _CLUSTER), (_O.WRITE, _TOPIC)},  # InitProducerId (KIP-679)
    23: {(_O.CLUSTER_ACTION, _CLUSTER), (_O.DESCRIBE, _TOPIC)},  # OffsetForLeaderEpoch
    24: {(_O.WRITE, _TXN), (_O.WRITE, _TOPIC), (_O.CLUSTER_ACTION, _CLUSTER)},  # AddPartitionsToTxn (v4+: brokers)
    25: {(_O.WRITE, _TXN), (_O.READ, _GROUP)},  # AddOffsetsToTxn
    26: {(_O.WRITE, _TXN)},  # EndTxn
    27: {(_O.ALTER, _CLUSTER), (_O.CLUSTER_ACTION, _CLUSTER)},  # WriteTxnMarkers
    28: {(_O.WRITE, _TXN), (_O.READ, _GROUP), (_O.READ, _TOPIC)},  # TxnOffsetCommit
    29: {(_O.DESCRIBE, _CLUSTER)},  # DescribeAcls
    30: {(_O.ALTER, _CLUSTER)},  # CreateAcls
    31: {(_O.ALTER, _CLUSTER)},  # DeleteAcls
    32: {(_O.DESCRIBE_CONFIGS, _CLUSTER), (_O.DESCRIBE_CONFIGS, _TOPIC), (_O.DESCRIBE_CONFIGS, _GROUP)},
    33: {(_O.ALTER_CONFIGS, _CLUSTER), (_O.ALTER_CONFIGS, _TOPIC)},  # AlterConfigs
    34: {(_O.ALTER, _CLUSTER)},  # AlterReplicaLogDirs
    35: {(_O.DESCRIBE, _CLUSTER)},  # DescribeLogDirs
    36: set(),  # SaslAuthenticate: part of authentication
    37: {(_O.ALTER, _TOPIC)},  # CreatePartitions
    42: {(_O.DELETE, _GROUP)},  # DeleteGroups
    43: {(_O.ALTER, _CLUSTER)},  # ElectLeaders
    44: {(_O.ALTER_CONFIGS, _CLUSTER), (_O.ALTER_CONFIGS, _TOPIC), (_O.ALTER_CONFIGS, _GROUP)},
    45: {(_O.ALTER, _CLUSTER)},  # AlterPartitionReassignments
    46: {(_O.DESCRIBE, _CLUSTER)},  # ListPartitionReassignments
    47: {(_O.DELETE, _GROUP), (_O.READ, _TOPIC)},  # OffsetDelete
    48: {(_O.DESCRIBE_CONFIGS, _CLUSTER)},  # DescribeClientQuotas
    49: {(_O.ALTER_CONFIGS, _CLUSTER)},  # AlterClientQuotas
    50: {(_O.DESCRIBE, _CLUSTER)},  # DescribeUserScramCredentials
    51: {(_O.ALTER, _CLUSTER)},  # AlterUserScramCredentials
    60: {(_O.DESCRIBE, _CLUSTER)},  # DescribeCluster (KIP-430 authorized operations only)
    61: {(_O.READ, _TOPIC)},  # DescribeProducers
    65: {(_O.DESCRIBE, _TXN), (_O.DESCRIBE, _TOPIC)},  # DescribeTransactions (topics shown only if described)
    66: {(_O.DESCRIBE, _TXN)},  # ListTransactions (only the ids the principal may describe)
    68: {(_O.READ, _GROUP), (_O.DESCRIBE, _TOPIC)},  # ConsumerGroupHeartbeat (topics subscribed by name, regex)
    69: {(_O.DESCRIBE, _GROUP), (_O.DESCRIBE, _TOPIC)},  # ConsumerGroupDescribe (the members' topics)
}.items()}


def _check_table(ctx: RequestContext, op: AclOperation, resource_type: ResourceType) -> None:
    if (op, resource_type) not in API_ACLS.get(ctx.api_key, ()):
        raise RuntimeError(f"API key {ctx.api_key} checks {op.name} on {resource_type.name}, which "
                           f"broker/security/authorization.py's table does not list for it")


def _api_name(api_key: int) -> str:
    spec = API_KEYS.get(api_key)
    return spec.name if spec is not None else str(api_key)


def _denied(broker: BrokerContext, ctx: RequestContext, op: AclOperation, resource_type: ResourceType,
            name: str, rule: str) -> None:
    api = _api_name(ctx.api_key)
    broker.metrics.authorization_denials.labels(api, op.name).inc()
    audit.info("Principal = %s is Denied operation = %s from host = %s on resource = %s:LITERAL:%s for request = %s "
               "based on rule %s", ctx.principal, op.name, ctx.client_host, resource_type.name, name, api, rule)


def allowed(broker: BrokerContext, ctx: RequestContext, op: AclOperation, resource_type: ResourceType,
            name: str = CLUSTER_NAME, *, audit_denial: bool = True) -> bool:
    """May the request's principal do ``op`` on the resource? (The CLUSTER resource's name is the default.)"""
    authorizer = broker.authorizer
    if authorizer is None:
        return True
    _check_table(ctx, op, resource_type)
    decision = authorizer.decide(str(ctx.principal), ctx.client_host, op, resource_type, name)
    if not decision.allowed and audit_denial:
        _denied(broker, ctx, op, resource_type, name, decision.rule)
    return decision.allowed


def allowed_names(broker: BrokerContext, ctx: RequestContext, op: AclOperation, resource_type: ResourceType,
                  names: Iterable[str], *, audit_denial: bool = True) -> set[str]:
    """The names (each asked once) on which the principal may do ``op`` (Kafka's ``filterByAuthorized``)."""
    unique = set(names)
    if broker.authorizer is None:
        return unique
    return {n for n in unique if allowed(broker, ctx, op, resource_type, n, audit_denial=audit_denial)}


def allowed_any(broker: BrokerContext, ctx: RequestContext, op: AclOperation, resource_type: ResourceType) -> bool:
    """May the principal do ``op`` on some resource of the type (KIP-679's ``authorizeByResourceType``)?"""
    authorizer = broker.authorizer
    if authorizer is None:
        return True
    _check_table(ctx, op, resource_type)
    if authorizer.authorize_by_resource_type(str(ctx.principal), ctx.client_host, op, resource_type):
        return True
    _denied(broker, ctx, op, resource_type, "*", "NoAclOnAnyResourceOfTheType")
    return False


def authorized_operations(broker: BrokerContext, ctx: RequestContext, resource_type: ResourceType,
                          name: str = CLUSTER_NAME) -> int:
    """KIP-430's bit field for the resource (every operation of its type when authorization is off)."""
    authorizer = broker.authorizer
    if authorizer is None:
        return operation_bits(set(SUPPORTED_OPERATIONS[resource_type]))
    return authorizer.authorized_operations(str(ctx.principal), ctx.client_host, resource_type, name)


def audit_failed_login(metrics: BrokerMetrics, principal: str, host: str, listener: str, mechanism: str,
                       reason: str) -> None:
    """A failed authentication, in the same audit log and counted (``oncelog_failed_authentications``)."""
    metrics.failed_authentications.labels(listener, mechanism).inc()
    audit.info("Failed authentication of principal = %s from host = %s on listener %s with %s: %s", principal,
               host, listener, mechanism, reason)
