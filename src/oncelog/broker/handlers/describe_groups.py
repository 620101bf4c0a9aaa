"""DescribeGroups (15): state, protocol and members of groups (an unknown group is described as Dead)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.protocol.messages.describe_groups_request import DescribeGroupsRequest
from oncelog.protocol.messages.describe_groups_response import DescribedGroup, DescribeGroupsResponse
from oncelog.security.acl import AclOperation, ResourceType
from oncelog.protocol.errors import ErrorCode

from ..security.authorization import allowed, authorized_operations
from ._groups import NOT_AVAILABLE, coordinator

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 15
MIN_VERSION = 0
MAX_VERSION = 5


def handle(broker: BrokerContext, ctx: RequestContext,
           request: DescribeGroupsRequest) -> DescribeGroupsResponse:
    gc = coordinator(broker)
    groups = [DescribedGroup(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id=g)
              if not allowed(broker, ctx, AclOperation.DESCRIBE, ResourceType.GROUP, g)
              else gc.describe_group(g) if gc is not None else DescribedGroup(error_code=NOT_AVAILABLE, group_id=g)
              for g in request.groups]
    if ctx.api_version >= 3 and request.include_authorized_operations:  # KIP-430
        for g in groups:
            if g.error_code == ErrorCode.NONE:
                g.authorized_operations = authorized_operations(broker, ctx, ResourceType.GROUP, g.group_id)
    return DescribeGroupsResponse(groups=groups)
