"""JoinGroup (11): join a classic group; answered when the join phase ends (see oncelog.coordinator.group)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

from oncelog.protocol.messages.join_group_request import JoinGroupRequest
from oncelog.protocol.messages.join_group_response import JoinGroupResponse
from oncelog.security.acl import AclOperation, ResourceType
from oncelog.protocol.errors import ErrorCode

from ..security.authorization import allowed
from ._groups import NOT_AVAILABLE, client_host, coordinator

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 11
MIN_VERSION = 0
MAX_VERSION = 9


def _fix(resp: JoinGroupResponse, version: int) -> JoinGroupResponse:
    if version < 7 and resp.protocol_name is None:
        resp.protocol_name = ""  # nullable only from v7
    return resp


def handle(broker: BrokerContext, ctx: RequestContext,
           request: JoinGroupRequest) -> JoinGroupResponse | Awaitable[JoinGroupResponse]:
    if not allowed(broker, ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return _fix(JoinGroupResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, member_id=request.member_id, protocol_name=None), ctx.api_version)
    gc = coordinator(broker)
    if gc is None:
        return _fix(JoinGroupResponse(error_code=NOT_AVAILABLE, member_id=request.member_id, protocol_name=None),
                    ctx.api_version)

    async def run() -> JoinGroupResponse:
        resp = await gc.join_group(request, ctx.api_version, ctx.client_id or "", client_host(ctx))
        return _fix(resp, ctx.api_version)
    return run()
