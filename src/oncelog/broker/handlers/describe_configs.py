"""DescribeConfigs (32): topic configs (overrides and defaults) and the broker's static settings.

Sources as Kafka reports them: DYNAMIC_TOPIC_CONFIG for a topic override, STATIC_BROKER_CONFIG for a broker setting
given at start (and for a topic default that comes from one, e.g. ``retention.ms`` from ``log.retention.hours``),
DEFAULT_CONFIG otherwise."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.protocol.messages.describe_configs_request import DescribeConfigsRequest
from oncelog.protocol.messages.describe_configs_response import (
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    DescribeConfigsSynonym,
)

from ._configs import BROKER, CONFIG_TYPE, TOPIC, Source, check_resource, topic_entries

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.router import RequestContext

API_KEY = 32
MIN_VERSION = 1
MAX_VERSION = 4


def handle(broker: "BrokerContext", ctx: "RequestContext",
           request: DescribeConfigsRequest) -> DescribeConfigsResponse:
    results = []
    for res in request.resources:
        code, message = check_resource(broker, res.resource_type, res.resource_name)
        out = DescribeConfigsResult(error_code=code, error_message=message, resource_type=res.resource_type,
                                    resource_name=res.resource_name, configs=[])
        results.append(out)
        if code:
            continue
        wanted = set(res.configuration_keys) if res.configuration_keys is not None else None
        if res.resource_type == TOPIC:
            entries = topic_entries(broker, res.resource_name)
        else:
            assert res.resource_type == BROKER
            entries = [(e.key, e.value, e.source, e.type, e.doc) for e in broker.config.entries()]
        for key, value, source, ktype, doc in entries:
            if wanted is not None and key not in wanted:
                continue
            synonyms = [DescribeConfigsSynonym(name=key, value=value, source=source)] if request.include_synonyms \
                else []
            out.configs.append(DescribeConfigsResourceResult(
                name=key, value=value, read_only=res.resource_type == BROKER, is_default=source == Source.DEFAULT,
                config_source=source, is_sensitive=False, synonyms=synonyms,
                config_type=CONFIG_TYPE.get(ktype, 0),
                documentation=doc if request.include_documentation else None))
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)
