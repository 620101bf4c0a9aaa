"""DescribeConfigs (32): topic configs (overrides and defaults), the broker's settings and a group's configs
(``oncelog.broker.settings.group_configs``: source GROUP_CONFIG for the group's own value).

Sources as Kafka reports them: DYNAMIC_TOPIC_CONFIG for a topic override, DYNAMIC_BROKER_CONFIG /
DYNAMIC_DEFAULT_BROKER_CONFIG for a broker setting changed at run time for this broker / cluster-wide (in a
cluster), STATIC_BROKER_CONFIG for a broker setting given at start (and a topic default takes its broker setting's
source, e.g. ``retention.ms`` from ``log.retention.hours``), DEFAULT_CONFIG otherwise. With ``include_synonyms``
(v1+), where the value may come from, highest precedence first.

A BROKER resource named by this broker's node id lists every setting (read-only unless oncelog changes it at run
time, in a cluster); the empty name is the cluster-wide default: in a cluster, as in Kafka, the dynamic defaults set
(``DYNAMIC_DEFAULT_BROKER_CONFIG``); on a single node (no etcd, no dynamic configs) every setting, as for the
broker's own id."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.protocol.messages.describe_configs_request import DescribeConfigsRequest
from oncelog.protocol.messages.describe_configs_response import (
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    DescribeConfigsSynonym,
)

from oncelog.broker.settings.dynamic import BrokerEntry, Synonym, default_entries
from oncelog.security.acl import AclOperation

from ..settings.group_configs import group_entries
from ._configs import BROKER, CONFIG_TYPE, GROUP, TOPIC, Source, check_resource, config_refusal, topic_entries

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 32
MIN_VERSION = 1
MAX_VERSION = 4


def handle(broker: "BrokerContext", ctx: "RequestContext",
           request: DescribeConfigsRequest) -> DescribeConfigsResponse:
    results = []
    for res in request.resources:
        code, message = config_refusal(broker, ctx, AclOperation.DESCRIBE_CONFIGS, res.resource_type,
                                       res.resource_name) or check_resource(broker, res.resource_type,
                                                                            res.resource_name)
        out = DescribeConfigsResult(error_code=code, error_message=message, resource_type=res.resource_type,
                                    resource_name=res.resource_name, configs=[])
        results.append(out)
        if code:
            continue
        wanted = set(res.configuration_keys) if res.configuration_keys is not None else None
        if res.resource_type == TOPIC:
            entries = [BrokerEntry(key, value, source, ktype, doc, False, syns)
                       for key, value, source, ktype, doc, syns in topic_entries(broker, res.resource_name)]
        elif res.resource_type == GROUP:
            entries = group_entries(broker.security_store, broker.config, res.resource_name)
        else:
            assert res.resource_type == BROKER
            entries = _broker_entries(broker, res.resource_name)
        for e in entries:
            if wanted is not None and e.key not in wanted:
                continue
            synonyms = [DescribeConfigsSynonym(name=s.name, value=s.value, source=s.source)
                        for s in (e.synonyms or (Synonym(e.key, e.value, e.source),))] \
                if request.include_synonyms else []
            sensitive = e.type == "PASSWORD"  # Kafka answers a password's value as null
            out.configs.append(DescribeConfigsResourceResult(
                name=e.key, value=None if sensitive else e.value, read_only=e.read_only,
                is_default=e.source == Source.DEFAULT, config_source=e.source, is_sensitive=sensitive,
                synonyms=[] if sensitive else synonyms,
                config_type=CONFIG_TYPE.get(e.type, 0),
                documentation=e.doc if request.include_documentation else None))
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)


def _broker_entries(broker: "BrokerContext", name: str) -> list[BrokerEntry]:
    node = broker.cluster
    if node is None:  # a single node: every setting is static
        return [BrokerEntry(e.key, e.value, e.source, e.type, e.doc, True, ()) for e in broker.config.entries()]
    configs = node.view.broker_configs
    if name == "":
        return default_entries(configs.get(None, {}))
    return node.dynamic.describe(configs)
