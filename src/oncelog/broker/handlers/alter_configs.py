"""AlterConfigs (33): replace the whole set of a topic's config overrides. Broker settings are static."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.alter_configs_request import AlterConfigsRequest
from oncelog.protocol.messages.alter_configs_response import AlterConfigsResourceResponse, AlterConfigsResponse

from ._common import error_for
from ._configs import TOPIC, apply_topic_overrides, check_resource

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.router import RequestContext

API_KEY = 33
MIN_VERSION = 0
MAX_VERSION = 2


def handle(broker: "BrokerContext", ctx: "RequestContext",
           request: AlterConfigsRequest) -> AlterConfigsResponse:
    responses = []
    for res in request.resources:
        code, message = check_resource(broker, res.resource_type, res.resource_name)
        if not code and res.resource_type != TOPIC:
            code, message = ErrorCode.INVALID_REQUEST, "broker settings are static: set them in the TOML file"
        if not code:
            try:
                apply_topic_overrides(broker, res.resource_name,
                                      {c.name: c.value for c in res.configs if c.value is not None},
                                      request.validate_only)
            except Exception as e:
                code, message = error_for(e)
        responses.append(AlterConfigsResourceResponse(error_code=code, error_message=message,
                                                      resource_type=res.resource_type,
                                                      resource_name=res.resource_name))
    return AlterConfigsResponse(throttle_time_ms=0, responses=responses)
