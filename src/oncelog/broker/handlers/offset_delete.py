"""OffsetDelete (47): drop committed offsets of a group (not of topics an active group subscribes to)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

from oncelog.protocol.messages.offset_delete_request import OffsetDeleteRequest
from oncelog.protocol.messages.offset_delete_response import OffsetDeleteResponse
from oncelog.security.acl import AclOperation, ResourceType
from oncelog.protocol.errors import ErrorCode
from dataclasses import replace
from oncelog.protocol.messages.offset_delete_response import OffsetDeleteResponsePartition, OffsetDeleteResponseTopic

from ..security.authorization import allowed, allowed_names
from ._authz import then
from ._groups import NOT_AVAILABLE, coordinator

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 47
MIN_VERSION = 0
MAX_VERSION = 0


def handle(broker: BrokerContext, ctx: RequestContext,
           request: OffsetDeleteRequest) -> OffsetDeleteResponse | Awaitable[OffsetDeleteResponse]:
    if not allowed(broker, ctx, AclOperation.DELETE, ResourceType.GROUP, request.group_id):
        return OffsetDeleteResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    readable = allowed_names(broker, ctx, AclOperation.READ, ResourceType.TOPIC, (t.name for t in request.topics))
    denied = [t for t in request.topics if t.name not in readable]
    gc = coordinator(broker)
    if gc is None:
        return OffsetDeleteResponse(error_code=NOT_AVAILABLE)
    if not denied:
        return gc.delete_offsets(request)
    result = gc.delete_offsets(replace(request, topics=[t for t in request.topics if t.name in readable]))
    return then(result, lambda r: replace(r, topics=list(r.topics) + [OffsetDeleteResponseTopic(
        name=t.name, partitions=[OffsetDeleteResponsePartition(partition_index=p.partition_index,
                                                               error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                                 for p in t.partitions]) for t in denied]))
