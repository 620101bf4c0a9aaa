"""FindCoordinator (10): this broker coordinates every group (key type 0) and transactional id (key type 1).

Batched lookups (v4+) answer each key separately. The internal topic behind the coordinator is created on first
use, as Kafka does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.find_coordinator_request import FindCoordinatorRequest
from oncelog.protocol.messages.find_coordinator_response import Coordinator, FindCoordinatorResponse

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.router import RequestContext

API_KEY = 10
MIN_VERSION = 0
MAX_VERSION = 6

GROUP, TRANSACTION = 0, 1


def _check(broker: "BrokerContext", key_type: int, key: str) -> tuple[int, str | None]:
    if key_type not in (GROUP, TRANSACTION):
        return ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {key_type}"
    if not key:
        return ErrorCode.INVALID_REQUEST, "coordinator key must not be empty"
    if broker.cluster is not None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, ("the coordinators do not run in a cluster yet (they follow "
                                                     "the leaders of the internal partitions in a later version)")
    if not broker.coordinator_available(key_type):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, "the coordinator is loading; retry shortly"
    return ErrorCode.NONE, None


def handle(broker: "BrokerContext", ctx: "RequestContext",
           request: FindCoordinatorRequest) -> FindCoordinatorResponse:
    host, port = broker.config.advertised
    node = broker.config.node_id
    if ctx.api_version >= 4:
        coordinators = []
        for key in request.coordinator_keys:
            code, message = _check(broker, request.key_type, key)
            coordinators.append(Coordinator(key=key, node_id=node if not code else -1, host=host if not code else "",
                                            port=port if not code else -1, error_code=code, error_message=message))
        return FindCoordinatorResponse(throttle_time_ms=0, coordinators=coordinators)
    code, message = _check(broker, request.key_type, request.key)
    return FindCoordinatorResponse(throttle_time_ms=0, error_code=code, error_message=message,
                                   node_id=node if not code else -1, host=host if not code else "",
                                   port=port if not code else -1)
