"""LeaveGroup (13): members leave (v3+ several at once, each with its own answer)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

from oncelog.protocol.messages.leave_group_request import LeaveGroupRequest
from oncelog.protocol.messages.leave_group_response import LeaveGroupResponse
from oncelog.security.acl import AclOperation, ResourceType
from oncelog.protocol.errors import ErrorCode

from ..security.authorization import allowed
from ._groups import NOT_AVAILABLE, coordinator

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 13
MIN_VERSION = 0
MAX_VERSION = 5


def handle(broker: BrokerContext, ctx: RequestContext,
           request: LeaveGroupRequest) -> LeaveGroupResponse | Awaitable[LeaveGroupResponse]:
    if not allowed(broker, ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return LeaveGroupResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    gc = coordinator(broker)
    if gc is None:
        return LeaveGroupResponse(error_code=NOT_AVAILABLE)

    async def run() -> LeaveGroupResponse:
        resp: LeaveGroupResponse = await gc.leave_group(request, ctx.api_version)
        if ctx.api_version < 3 and not resp.error_code and resp.members:
            resp.error_code = resp.members[0].error_code  # v0-2 answer for their single member
        return resp
    return run()
