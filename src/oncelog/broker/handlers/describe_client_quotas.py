"""DescribeClientQuotas (48, KIP-546): the stored client quotas of the entities matching a filter.

The filter's components are EXACT (that name), DEFAULT (the default entity of the type) or SPECIFIED (any entity of
the type); a type the filter does not name matches anything unless ``strict``. A bad filter is answered with
INVALID_REQUEST (an unknown entity type: UNSUPPORTED_VERSION) and Kafka's message, as ``ClientQuotasImage``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.describe_client_quotas_request import DescribeClientQuotasRequest
from oncelog.protocol.messages.describe_client_quotas_response import (
    DescribeClientQuotasResponse,
    EntityData,
    EntryData,
    ValueData,
)
from oncelog.security.acl import AclOperation, ResourceType
from oncelog.security.quotas import USER, FilterComponent, QuotaError, describe, parse_records
from oncelog.security.store import QUOTAS

from ..security.authorization import allowed

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 48
MIN_VERSION = 0
MAX_VERSION = 1


def handle(broker: "BrokerContext", ctx: "RequestContext",
           request: DescribeClientQuotasRequest) -> DescribeClientQuotasResponse:
    if not allowed(broker, ctx, AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER):  # KafkaApis: DESCRIBE_CONFIGS
        return DescribeClientQuotasResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                            error_message=None, entries=None)
    store = broker.security_store
    current = parse_records(store.records(QUOTAS)) if store is not None else {}
    components = [FilterComponent(c.entity_type, c.match_type, c.match) for c in request.components]
    try:
        found = describe(current, components, request.strict)
    except QuotaError as e:
        return DescribeClientQuotasResponse(error_code=e.code, error_message=e.message, entries=None)
    entries = [EntryData(entity=[EntityData(entity_type=t, entity_name=n)
                                 for t, n in sorted(entity, key=lambda p: p[0] != USER)],
                         values=[ValueData(key=k, value=v) for k, v in sorted(values.items())])
               for entity, values in found]
    return DescribeClientQuotasResponse(error_code=ErrorCode.NONE, error_message=None, entries=entries)
