"""ListGroups (16): every group on this broker, optionally filtered by state (v4+) and type (v5+)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.protocol.messages.list_groups_request import ListGroupsRequest
from oncelog.protocol.messages.list_groups_response import ListGroupsResponse

from ._groups import NOT_AVAILABLE, coordinator

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 16
MIN_VERSION = 0
MAX_VERSION = 5


def handle(broker: BrokerContext, ctx: RequestContext, request: ListGroupsRequest) -> ListGroupsResponse:
    gc = coordinator(broker)
    if gc is None:
        return ListGroupsResponse(error_code=NOT_AVAILABLE)
    states = list(request.states_filter) if ctx.api_version >= 4 else None
    types = list(request.types_filter) if ctx.api_version >= 5 else None
    return ListGroupsResponse(error_code=0, groups=gc.list_groups(states, types))
