"""OffsetDelete (47): drop committed offsets of a group (not of topics an active group subscribes to)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

from oncelog.protocol.messages.offset_delete_request import OffsetDeleteRequest
from oncelog.protocol.messages.offset_delete_response import OffsetDeleteResponse

from ._groups import NOT_AVAILABLE, coordinator

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 47
MIN_VERSION = 0
MAX_VERSION = 0


def handle(broker: BrokerContext, ctx: RequestContext,
           request: OffsetDeleteRequest) -> OffsetDeleteResponse | Awaitable[OffsetDeleteResponse]:
    gc = coordinator(broker)
    if gc is None:
        return OffsetDeleteResponse(error_code=NOT_AVAILABLE)
    return gc.delete_offsets(request)
