"""Heartbeat (12): keep a member's session alive; REBALANCE_IN_PROGRESS tells it to rejoin."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

from oncelog.protocol.messages.heartbeat_request import HeartbeatRequest
from oncelog.protocol.messages.heartbeat_response import HeartbeatResponse
from oncelog.security.acl import AclOperation, ResourceType
from oncelog.protocol.errors import ErrorCode

from ..security.authorization import allowed
from ._groups import NOT_AVAILABLE, coordinator

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 12
MIN_VERSION = 0
MAX_VERSION = 4


def handle(broker: BrokerContext, ctx: RequestContext,
           request: HeartbeatRequest) -> HeartbeatResponse | Awaitable[HeartbeatResponse]:
    if not allowed(broker, ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return HeartbeatResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    gc = coordinator(broker)
    if gc is None:
        return HeartbeatResponse(error_code=NOT_AVAILABLE)
    return gc.heartbeat(request, ctx.api_version)
