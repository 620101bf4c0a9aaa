"""Heartbeat (12): keep a member's session alive; REBALANCE_IN_PROGRESS tells it to rejoin."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from oncelog.protocol.messages.heartbeat_request import HeartbeatRequest
from oncelog.protocol.messages.heartbeat_response import HeartbeatResponse

from ._groups import NOT_AVAILABLE, coordinator

if TYPE_CHECKING:
    from oncelog.broker.router import RequestContext
    from oncelog.broker.server import Broker

API_KEY = 12
MIN_VERSION = 0
MAX_VERSION = 4


def handle(broker: Broker, ctx: RequestContext, request: HeartbeatRequest) -> Any:
    gc = coordinator(broker)
    if gc is None:
        return HeartbeatResponse(error_code=NOT_AVAILABLE)
    return gc.heartbeat(request, ctx.api_version)
