"""ListGroups (16): every group on this broker, optionally filtered by state (v4+) and type (v5+)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.protocol.messages.list_groups_request import ListGroupsRequest
from oncelog.protocol.messages.list_groups_response import ListGroupsResponse
from oncelog.security.acl import AclOperation, ResourceType

from ..security.authorization import allowed, allowed_names
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
    groups = gc.list_groups(states, types)
    if not allowed(broker, ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER, audit_denial=False):
        shown = allowed_names(broker, ctx, AclOperation.DESCRIBE, ResourceType.GROUP, (g.group_id for g in groups),
                              audit_denial=False)  # only the groups the principal may describe, no error
        groups = [g for g in groups if g.group_id in shown]
    return ListGroupsResponse(error_code=0, groups=groups)
