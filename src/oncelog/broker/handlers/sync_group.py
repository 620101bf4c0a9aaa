"""SyncGroup (14): the leader hands in the assignment; every member gets its own once it is durable."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

from oncelog.protocol.messages.sync_group_request import SyncGroupRequest
from oncelog.protocol.messages.sync_group_response import SyncGroupResponse
from oncelog.security.acl import AclOperation, ResourceType
from oncelog.protocol.errors import ErrorCode

from ..security.authorization import allowed
from ._groups import NOT_AVAILABLE, coordinator

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 14
MIN_VERSION = 0
MAX_VERSION = 5


def handle(broker: BrokerContext, ctx: RequestContext,
           request: SyncGroupRequest) -> SyncGroupResponse | Awaitable[SyncGroupResponse]:
    if not allowed(broker, ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return SyncGroupResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    gc = coordinator(broker)
    if gc is None:
        return SyncGroupResponse(error_code=NOT_AVAILABLE)
    return gc.sync_group(request, ctx.api_version)
