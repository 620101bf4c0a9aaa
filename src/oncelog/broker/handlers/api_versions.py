"""ApiVersions (18): the APIs and versions this broker serves, as the router registered them
(``BrokerContext.api_versions``), and from v3 Kafka's feature levels: what the broker supports and what it
finalized (``group.version`` 1: the KIP-848 consumer protocol; ``transaction.version`` 2: clients may use
transactions V2, KIP-890 part 2)."""

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

#: Kafka's feature levels (server-common ``Features``) this broker supports, v3+: ``group.version`` 1 is the KIP-848
#: consumer group protocol (Kafka 4.0, GroupVersion.GV_1), ``transaction.version`` 2 transactions V2
#: (KIP-890 part 2, TransactionVersion.TV_2)
FEATURES = {"group.version": (0, 1), "transaction.version": (0, 2)}
FEATURES_EPOCH = 0


def handle(broker: "BrokerContext", ctx: "RequestContext",
           request: ApiVersionsRequest) -> ApiVersionsResponse:
    keys = [ApiVersion(api_key=key, min_version=low, max_version=high) for key, low, high in broker.api_versions]
    resp = ApiVersionsResponse(error_code=ErrorCode.NONE, api_keys=keys, throttle_time_ms=0)
    if ctx.api_version >= 3:
        # v3 leaves out a supported feature whose min version is 0 (KAFKA-17011: older clients refuse it)
        resp.supported_features = [SupportedFeatureKey(name=n, min_version=lo, max_version=hi)
                                   for n, (lo, hi) in FEATURES.items() if lo > 0 or ctx.api_version >= 4]
        # the finalized levels: a feature at level 0 is left out, as Kafka does
        finalized = {"group.version": 1, "transaction.version": broker.config.transaction_version}
        resp.finalized_features = [FinalizedFeatureKey(name=n, min_version_level=level, max_version_level=level)
                                   for n, level in finalized.items() if level > 0]
        resp.finalized_features_epoch = FEATURES_EPOCH
    return resp
