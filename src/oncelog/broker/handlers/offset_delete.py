"""OffsetDelete (47): drop committed offsets of a group (not of topics an active group subscribes to)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from oncelog.protocol.messages.offset_delete_request import OffsetDeleteRequest
from oncelog.protocol.messages.offset_delete_response import OffsetDeleteResponse

from ._groups import NOT_AVAILABLE, coordinator

if TYPE_CHECKING:
    from oncelog.broker.router import RequestContext
    from oncelog.broker.server import Broker

API_KEY = 47
MIN_VERSION = 0
MAX_VERSION = 0


def handle(broker: Broker, ctx: RequestContext, request: OffsetDeleteRequest) -> Any:
    gc = coordinator(broker)
    if gc is None:
        return OffsetDeleteResponse(error_code=NOT_AVAILABLE)
    return gc.delete_offsets(request)
