"""DeleteGroups (42): delete Empty groups and their offsets (NON_EMPTY_GROUP while members are in it)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

from oncelog.protocol.messages.delete_groups_request import DeleteGroupsRequest
from oncelog.protocol.messages.delete_groups_response import DeletableGroupResult, DeleteGroupsResponse
from oncelog.security.acl import AclOperation, ResourceType
from oncelog.protocol.errors import ErrorCode

from ..security.authorization import allowed_names
from ._groups import NOT_AVAILABLE, coordinator

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2


def handle(broker: BrokerContext, ctx: RequestContext,
           request: DeleteGroupsRequest) -> DeleteGroupsResponse | Awaitable[DeleteGroupsResponse]:
    deletable = allowed_names(broker, ctx, AclOperation.DELETE, ResourceType.GROUP, request.groups_names)
    refused = [DeletableGroupResult(group_id=g, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
               for g in dict.fromkeys(request.groups_names) if g not in deletable]
    gc = coordinator(broker)
    if gc is None:
        return DeleteGroupsResponse(results=[DeletableGroupResult(group_id=g, error_code=NOT_AVAILABLE)
                                             for g in request.groups_names if g in deletable] + refused)

    async def run() -> DeleteGroupsResponse:
        names = [g for g in request.groups_names if g in deletable]
        return DeleteGroupsResponse(results=(await gc.delete_groups(names) if names else []) + refused)
    return run()
