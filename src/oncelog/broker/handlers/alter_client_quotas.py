"""AlterClientQuotas (49, KIP-546): set or remove client quotas (``kafka-configs.sh --alter --entity-type
users/clients/ips --add-config producer_byte_rate=...``).

Each entity is checked as Kafka's ``ClientQuotaControlManager`` checks it (entity types user, client-id, ip; a
name of null is the default entity; the keys of the entity's type; a value above 0, whole for the byte rates and the
connection rate): an entity with an error is answered INVALID_REQUEST with Kafka's message and nothing of it is
written. The records of the others are written together (``validate_only``: not at all). Every broker enforces them
within one watch delay in a cluster, at once on a single node.
"""

from __future__ import annotations

import asyncio
import socket
from typing import TYPE_CHECKING

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.alter_client_quotas_request import AlterClientQuotasRequest
from oncelog.protocol.messages.alter_client_quotas_response import (
    AlterClientQuotasResponse,
    EntityData,
    EntryData,
)
from oncelog.security.acl import AclOperation, ResourceType
from oncelog.security.quotas import IP, USER, Alteration, alter, is_ip_literal, parse_records
from oncelog.security.store import QUOTAS, SecurityStoreError

from ..security.authorization import allowed

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 49
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(broker: "BrokerContext", ctx: "RequestContext",
                 request: AlterClientQuotasRequest) -> AlterClientQuotasResponse:
    if not allowed(broker, ctx, AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER):  # KafkaApis: ALTER_CONFIGS
        return AlterClientQuotasResponse(entries=[
            EntryData(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=None,
                      entity=[EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity])
            for entry in request.entries])
    alterations = [Alteration({e.entity_type: e.entity_name for e in entry.entity},
                              [(op.key, None if op.remove else op.value) for op in entry.ops])
                   for entry in request.entries]
    hosts = {e.entity_name for entry in request.entries for e in entry.entity
             if e.entity_type == IP and e.entity_name and not is_ip_literal(e.entity_name)}
    resolvable = {host for host in hosts if await _resolves(host)}
    store = broker.security_store
    current = parse_records(store.records(QUOTAS)) if store is not None else {}
    outcome = alter(current, alterations, lambda name: is_ip_literal(name) or name in resolvable)
    results = dict(outcome.results)
    if not request.validate_only and (outcome.puts or outcome.deletes):
        try:
            if store is None:
                raise SecurityStoreError("this broker keeps no security records")
            await store.write(QUOTAS, outcome.puts, outcome.deletes)
        except SecurityStoreError as e:
            results = {entity: (ErrorCode.UNKNOWN_SERVER_ERROR, f"the quotas were not stored: {e}")
                       if code == ErrorCode.NONE else (code, message)
                       for entity, (code, message) in results.items()}
    return AlterClientQuotasResponse(entries=[
        EntryData(error_code=code, error_message=message,
                  entity=[EntityData(entity_type=t, entity_name=n) for t, n in sorted(entity, key=lambda p: p[0] != USER)])
        for entity, (code, message) in results.items()])


async def _resolves(host: str) -> bool:
    """Whether an ip entity's host name resolves (Kafka's InetAddress.getByName)."""
    try:
        await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    return True
