"""DescribeGroups (15): state, protocol and members of groups (an unknown group is described as Dead)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.protocol.messages.describe_groups_request import DescribeGroupsRequest
from oncelog.protocol.messages.describe_groups_response import DescribedGroup, DescribeGroupsResponse

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
    groups = [gc.describe_group(g) if gc is not None else DescribedGroup(error_code=NOT_AVAILABLE, group_id=g)
              for g in request.groups]
    return DescribeGroupsResponse(groups=groups)
