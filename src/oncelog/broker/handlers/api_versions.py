"""ApiVersions (18): the APIs and versions this broker serves, as the router registered them
(``BrokerContext.api_versions``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.api_versions_request import ApiVersionsRequest
from oncelog.protocol.messages.api_versions_response import (
    ApiVersion,
    ApiVersionsResponse,
    FinalizedFeatureKey,
    SupportedFeatureKey,
)

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 18
MIN_VERSION = 0
MAX_VERSION = 4


#: Kafka's feature levels (server-common Features), v3+: ``group.version`` 1 says the KIP-848 consumer group
#: protocol is served (Kafka 4.0; GroupVersion.GV_1)
FEATURES = {"group.version": (0, 1)}
FINALIZED = {"group.version": 1}
FEATURES_EPOCH = 0


def handle(broker: "BrokerContext", ctx: "RequestContext",
           request: ApiVersionsRequest) -> ApiVersionsResponse:
    keys = [ApiVersion(api_key=key, min_version=low, max_version=high) for key, low, high in broker.api_versions]
    resp = ApiVersionsResponse(error_code=ErrorCode.NONE, api_keys=keys, throttle_time_ms=0)
    if ctx.api_version >= 3:
        resp.supported_features = [SupportedFeatureKey(name=n, min_version=lo, max_version=hi)
                                   for n, (lo, hi) in FEATURES.items()]
        resp.finalized_features = [FinalizedFeatureKey(name=n, min_version_level=level, max_version_level=level)
                                   for n, level in FINALIZED.items()]
        resp.finalized_features_epoch = FEATURES_EPOCH
    return resp
