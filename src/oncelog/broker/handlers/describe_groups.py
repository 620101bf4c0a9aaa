"""DescribeGroups (15): state, protocol and members of groups (an unknown group is described as Dead)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from oncelog.protocol.messages.describe_groups_request import DescribeGroupsRequest
from oncelog.protocol.messages.describe_groups_response import DescribedGroup, DescribeGroupsResponse

from ._groups import NOT_AVAILABLE, coordinator

if TYPE_CHECKING:
    from oncelog.broker.router import RequestContext
    from oncelog.broker.server import Broker

API_KEY = 15
MIN_VERSION = 0
MAX_VERSION = 5


def handle(broker: Broker, ctx: RequestContext, request: DescribeGroupsRequest) -> Any:
    gc = coordinator(broker)
    groups = [gc.describe_group(g) if gc is not None else DescribedGroup(error_code=NOT_AVAILABLE, group_id=g)
              for g in request.groups]
    return DescribeGroupsResponse(groups=groups)
