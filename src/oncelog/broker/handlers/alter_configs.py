"""AlterConfigs (33): replace the whole set of a topic's config overrides, or (in a cluster) of a broker's dynamic
configs (name: this broker's node id) or of the cluster-wide default (name "").

On a single node (no etcd) broker settings stay static: a BROKER resource is refused with INVALID_REQUEST, as
before dynamic configs existed (set them in the TOML file and restart)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.broker.settings.dynamic import DynamicConfigError
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.alter_configs_request import AlterConfigsRequest, AlterConfigsResource
from oncelog.protocol.messages.alter_configs_response import AlterConfigsResourceResponse, AlterConfigsResponse

from ._configs import BrokerChange, alter_resources

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 33
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(broker: "BrokerContext", ctx: "RequestContext", request: AlterConfigsRequest) -> AlterConfigsResponse:
    outcomes = await alter_resources(broker, request.resources, request.validate_only, _whole_set, _replace, ctx)
    return AlterConfigsResponse(throttle_time_ms=0, responses=[
        AlterConfigsResourceResponse(error_code=code, error_message=message, resource_type=res.resource_type,
                                     resource_name=res.resource_name)
        for res, (code, message) in zip(request.resources, outcomes)])


def _whole_set(res: AlterConfigsResource, _current: dict[str, str]) -> dict[str, str]:
    """A topic's new overrides: the request's set replaces the old one (a null value leaves the key out)."""
    return {c.name: c.value for c in res.configs if c.value is not None}


def _replace(res: AlterConfigsResource) -> BrokerChange:
    """A broker's new dynamic configs: the request's set, which must name each key once and give it a value."""
    names = [c.name for c in res.configs]
    if len(set(names)) != len(names):
        raise DynamicConfigError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    nulls = sorted(c.name for c in res.configs if c.value is None)
    if nulls:
        raise DynamicConfigError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {', '.join(nulls)}")
    whole = {c.name: c.value for c in res.configs if c.value is not None}
    return lambda _current: dict(whole)
