"""ApiVersions (18): the APIs and versions this broker serves, as the router registered them
(``BrokerContext.api_versions``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.api_versions_request import ApiVersionsRequest
from oncelog.protocol.messages.api_versions_response import ApiVersion, ApiVersionsResponse

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 18
MIN_VERSION = 0
MAX_VERSION = 4


def handle(broker: "BrokerContext", ctx: "RequestContext",
           request: ApiVersionsRequest) -> ApiVersionsResponse:
    keys = [ApiVersion(api_key=key, min_version=low, max_version=high) for key, low, high in broker.api_versions]
    return ApiVersionsResponse(error_code=ErrorCode.NONE, api_keys=keys, throttle_time_ms=0)
