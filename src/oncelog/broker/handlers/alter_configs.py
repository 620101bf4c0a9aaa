"""AlterConfigs (33): replace the whole set of a topic's config overrides, or (in a cluster) of a broker's dynamic
configs (name: this broker's node id) or of the cluster-wide default (name "").

On a single node (no etcd) broker settings stay static: a BROKER resource is refused with INVALID_REQUEST, as
before dynamic configs existed (set them in the TOML file and restart)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.alter_configs_request import AlterConfigsRequest
from oncelog.protocol.messages.alter_configs_response import AlterConfigsResourceResponse, AlterConfigsResponse

from ._common import error_for
from ._configs import (
    BROKER,
    TOPIC,
    alter_broker_configs,
    alter_topic_configs,
    apply_topic_overrides,
    check_resource,
)

if TYPE_CHECKING:
    from oncelog.broker.cluster_node import ClusterNode
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.router import RequestContext

API_KEY = 33
MIN_VERSION = 0
MAX_VERSION = 2


def handle(broker: "BrokerContext", ctx: "RequestContext",
           request: AlterConfigsRequest) -> AlterConfigsResponse | Awaitable[AlterConfigsResponse]:
    if broker.cluster is not None and any(r.resource_type in (BROKER, TOPIC) for r in request.resources):
        return _with_brokers(broker, broker.cluster, request)
    return _respond(broker, request, {})


async def _with_brokers(broker: "BrokerContext", node: "ClusterNode",
                        request: AlterConfigsRequest) -> AlterConfigsResponse:
    done: dict[int, tuple[ErrorCode, str | None]] = {}
    for i, res in enumerate(request.resources):
        if res.resource_type not in (BROKER, TOPIC) or check_resource(broker, res.resource_type,
                                                                      res.resource_name)[0]:
            continue
        if res.resource_type == TOPIC:  # in a cluster: written to etcd, applied by every replica from the view
            done[i] = await alter_topic_configs(broker, node, res.resource_name,
                                                {c.name: c.value for c in res.configs if c.value is not None},
                                                request.validate_only)
            continue
        names = [c.name for c in res.configs]
        if len(set(names)) != len(names):
            done[i] = ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys"
            continue
        given = {c.name: c.value for c in res.configs}
        nulls = sorted(k for k, v in given.items() if v is None)
        if nulls:
            done[i] = ErrorCode.INVALID_REQUEST, f"Null value not supported for : {', '.join(nulls)}"
            continue
        whole = {k: v for k, v in given.items() if v is not None}

        def replace(_current: dict[str, str], whole: dict[str, str] = whole) -> dict[str, str]:
            return dict(whole)

        done[i] = await alter_broker_configs(node, res.resource_name, replace, request.validate_only)
    return _respond(broker, request, done)


def _respond(broker: "BrokerContext", request: AlterConfigsRequest,
             done: dict[int, tuple[ErrorCode, str | None]]) -> AlterConfigsResponse:
    responses = []
    for i, res in enumerate(request.resources):
        code, message = check_resource(broker, res.resource_type, res.resource_name)
        if not code and i in done:
            code, message = done[i]
        elif not code and res.resource_type != TOPIC:
            code, message = ErrorCode.INVALID_REQUEST, "broker settings are static on a single node: set them in " \
                                                       "the TOML file"
        elif not code:
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
